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
// resolutions that failed and the answers of no address (each logged once
// per outage: the first, then the one that ends it), the proxy's own
// addresses left out, and the servers set aside (each counted, logged
// every refusalLogEvery at most). The idle connections of rt (the
// proxy's transport, when it can close one server's: transport.Lean) to
// a server that leaves the set are closed then: a pod taken out of a
// Service, or scaled away, keeps no socket.
func UpstreamEvents(m *metrics.Metrics, log *zap.Logger, rt http.RoundTripper) upstream.Events {
	u := &upstreamEvents{m: m, log: log, refusals: logLimit{every: refusalLogEvery}}
	u.idle, _ = rt.(idleCloser)
	return u
}

// refusalLogEvery bounds the lines of servers that refuse connections: a
// pool of hundreds that all refuse logs one line every 10 s, with how many
// were not logged, while itlproxy_upstream_ejections_total counts each.
const refusalLogEvery = 10 * time.Second

// idleCloser closes the idle connections to one server.
type idleCloser interface{ CloseIdleConnectionsTo(addr string) }

type upstreamEvents struct {
	m        *metrics.Metrics
	log      *zap.Logger
	idle     idleCloser // nil: none to close
	refusals logLimit

	mu      sync.Mutex
	failing bool // the last resolution failed
	empty   bool // the set is empty
}

func (u *upstreamEvents) Resolved(servers, removed []*upstream.Server) {
	u.m.UpstreamsChanged(labelsOf(servers), labelsOf(removed))
	if u.idle != nil {
		for _, sv := range removed {
			u.idle.CloseIdleConnectionsTo(sv.Addr)
		}
	}
	u.mu.Lock()
	recovered := u.failing || u.empty && len(servers) > 0
	emptied := len(servers) == 0 && len(removed) > 0 // then none are removed until it is not
	u.failing, u.empty = false, len(servers) == 0
	u.mu.Unlock()
	switch {
	case emptied:
		u.log.Warn("the upstream's name resolves to no address: no server to send requests to, each answered 503 until it resolves again",
			zap.Strings("removed", addrsOf(removed)))
	case recovered || len(removed) > 0:
		u.log.Info("upstream servers", zap.Strings("servers", addrsOf(servers)), zap.Strings("removed", addrsOf(removed)))
	}
}

func (u *upstreamEvents) LeftOut(addrs []string) {
	u.log.Warn("the upstream holds the proxy's own addresses: left out, as requests sent there would come back to the proxy",
		zap.Strings("left_out", addrs))
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
	if ok, skipped := u.refusals.allow(time.Now()); ok {
		u.log.Warn("an upstream server refused a connection: set aside", zap.String("upstream", sv.Addr), zap.Duration("for", d),
			zap.Int("refusals_since_last_logged", skipped))
	}
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
