package transport

import (
	"net"
	"time"
)

// Lean's idle connections end three ways besides being taken again: at
// IdleTimeout, by a timer that runs whether or not their host is asked
// for again (a pod that left a Service never is); when the server they
// lead to leaves the upstream's set (CloseIdleConnectionsTo); and with
// every other at CloseIdleConnections. Those in use when their server
// leaves are closed as their exchanges end.

// expireLater makes sure a timer will close the idle connections past
// IdleTimeout. t.mu is held.
func (t *Lean) expireLater() {
	if t.IdleTimeout > 0 && t.expiry == nil {
		t.expiry = time.AfterFunc(t.IdleTimeout, t.expire)
	}
}

// expire closes the idle connections idle for IdleTimeout or longer, and
// sets the timer again for the oldest left.
func (t *Lean) expire() {
	now := time.Now()
	var closing []net.Conn
	t.mu.Lock()
	t.expiry = nil
	var oldest time.Time
	for addr, list := range t.idle {
		// Each list is in the order the connections were put, oldest first.
		n := 0
		for n < len(list) && now.Sub(list[n].since) >= t.IdleTimeout {
			closing = append(closing, list[n].c)
			n++
		}
		switch {
		case n == len(list):
			delete(t.idle, addr)
			continue
		case n > 0:
			t.idle[addr] = append(list[:0], list[n:]...)
		}
		if since := t.idle[addr][0].since; oldest.IsZero() || since.Before(oldest) {
			oldest = since
		}
	}
	if !oldest.IsZero() {
		t.expiry = time.AfterFunc(max(oldest.Add(t.IdleTimeout).Sub(now), time.Millisecond), t.expire)
	}
	t.mu.Unlock()
	for _, c := range closing {
		c.Close()
	}
}

// CloseIdleConnectionsTo closes the idle connections to addr (host:port):
// its server has left the upstream's set. Those in use are closed as their
// exchanges end, unless a request is sent to addr again meanwhile (the
// server came back). The fallback, which cannot close one host's, closes
// all of its own, when it has ever carried a request to addr (a TLS
// upstream, an upgrade, a streamed upload).
func (t *Lean) CloseIdleConnectionsTo(addr string) {
	t.mu.Lock()
	list := t.idle[addr]
	delete(t.idle, addr)
	if t.inUse[addr] > 0 {
		if t.leaving == nil {
			t.leaving = map[string]bool{}
		}
		t.leaving[addr] = true
	}
	fallback := t.fallbackDialed[addr]
	delete(t.fallbackDialed, addr)
	t.mu.Unlock()
	for _, ic := range list {
		ic.c.Close()
	}
	if fallback {
		t.Fallback.CloseIdleConnections()
	}
}

// fallbackDials notes that the fallback dials addr.
func (t *Lean) fallbackDials(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fallbackDialed == nil {
		t.fallbackDialed = map[string]bool{}
	}
	t.fallbackDialed[addr] = true
}
