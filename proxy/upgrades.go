package proxy

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errShutdownCut is the cause of an upgraded connection's context when the
// shutdown closed it at its deadline.
var errShutdownCut = errors.New("itlproxy: closed at the shutdown timeout")

// upgrades are the connections in flight that the proxy forwards as
// upgraded (WebSockets, the Realtime API among them). Go's server forgets
// a connection once ReverseProxy has hijacked it, so a graceful shutdown
// waits for them here (WaitUpgraded).
type upgrades struct {
	mu   sync.Mutex
	open map[uint64]context.CancelCauseFunc
	next uint64
	// empty is closed when the last one ends while WaitUpgraded waits.
	empty chan struct{}
}

// add returns the context an upgraded request is served with, which
// WaitUpgraded cancels at its deadline (ReverseProxy then closes the
// upstream connection, and with it the client's), and the function that
// says the connection is over.
func (u *upgrades) add(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.open == nil {
		u.open = map[uint64]context.CancelCauseFunc{}
	}
	id := u.next
	u.next++
	u.open[id] = cancel
	return ctx, func() {
		cancel(nil)
		u.mu.Lock()
		defer u.mu.Unlock()
		delete(u.open, id)
		if len(u.open) == 0 && u.empty != nil {
			close(u.empty)
			u.empty = nil
		}
	}
}

// closeWait bounds the wait for connections closed at the deadline: a
// copy blocked writing to a client that reads nothing ends only when the
// process does.
const closeWait = 5 * time.Second

// WaitUpgraded waits until every upgraded connection in flight has ended,
// or until ctx is done; then it closes those still open (their responses
// in flight end as client_canceled, as streams cut by the shutdown do),
// waits a moment for their handlers to record them, and returns how many
// it closed. One caller at a time: the shutdown, once the server has
// stopped taking requests.
func (p *Proxy) WaitUpgraded(ctx context.Context) int {
	u := &p.upgrades
	u.mu.Lock()
	if len(u.open) == 0 {
		u.mu.Unlock()
		return 0
	}
	empty := make(chan struct{})
	u.empty = empty
	u.mu.Unlock()
	select {
	case <-empty:
		return 0
	case <-ctx.Done():
	}
	u.mu.Lock()
	closed := len(u.open)
	for _, cancel := range u.open {
		cancel(errShutdownCut)
	}
	u.mu.Unlock()
	select {
	case <-empty:
	case <-time.After(closeWait):
	}
	return closed
}
