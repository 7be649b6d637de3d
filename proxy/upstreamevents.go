package proxy

import (
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// UpstreamEvents records what happens to the upstream's servers on m and
// in log: the set (and the series of the servers that left it), the
// resolutions that failed (logged once per outage: the first, then the
// one that succeeds again), and the servers set aside. The idle
// connections of rt (the proxy's transport, when it can close one
// server's: transport.Lean) to a server that leaves the set are closed
// then: a pod taken out of a Service, or scaled away, keeps no socket.
func UpstreamEvents(m *metrics.Metrics, log *zap.Logger, rt http.RoundTripper) upstream.Events {
	u := &upstreamEvents{m: m, log: log}
	u.idle, _ = rt.(idleCloser)
	return u
}

// idleCloser closes the idle connections to one server.
type idleCloser interface{ CloseIdleConnectionsTo(addr string) }

type upstreamEvents struct {
	m    *metrics.Metrics
	log  *zap.Logger
	idle idleCloser // nil: none to close

	mu      sync.Mutex
	failing bool // the last resolution failed
}

func (u *upstreamEvents) Resolved(servers, removed []*upstream.Server) {
	u.m.UpstreamsChanged(labelsOf(servers), labelsOf(removed))
	if u.idle != nil {
		for _, sv := range removed {
			u.idle.CloseIdleConnectionsTo(sv.Addr)
		}
	}
	u.mu.Lock()
	recovered := u.failing
	u.failing = false
	u.mu.Unlock()
	if recovered || len(removed) > 0 {
		u.log.Info("upstream servers", zap.Strings("servers", addrsOf(servers)), zap.Strings("removed", addrsOf(removed)))
	}
}

func (u *upstreamEvents) ResolveFailed(err error) {
	u.m.UpstreamResolveFailed()
	u.mu.Lock()
	first := !u.failing
	u.failing = true
	u.mu.Unlock()
	if first {
		u.log.Warn("resolving the upstream failed: the servers stay as they were", zap.Error(err))
	}
}

func (u *upstreamEvents) Ejected(sv *upstream.Server, d time.Duration) {
	u.m.UpstreamEjected(sv.Label())
	u.log.Warn("an upstream server refused a connection: set aside", zap.String("upstream", sv.Addr), zap.Duration("for", d))
}

func labelsOf(servers []*upstream.Server) []string {
	out := make([]string, 0, len(servers))
	for _, sv := range servers {
		out = append(out, sv.Label())
	}
	return out
}

func addrsOf(servers []*upstream.Server) []string {
	out := make([]string, 0, len(servers))
	for _, sv := range servers {
		out = append(out, sv.Addr)
	}
	return out
}
