package proxy

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// UpstreamEvents records what happens to the upstream's endpoints on m and
// in log: the set (and the series of the endpoints that left it), the
// resolutions that failed and the answers of no address (each logged once
// per outage: the first, then the one that ends it), the proxy's own
// addresses left out, and the endpoints set aside (each counted, logged
// every refusalLogEvery at most).
func UpstreamEvents(m *metrics.Metrics, log *zap.Logger) upstream.Events {
	return &upstreamEvents{m: m, log: log, refusals: logLimit{every: refusalLogEvery}}
}

// refusalLogEvery bounds the lines of endpoints that refuse connections: a
// pool of hundreds that all refuse logs one line every 10 s, with how many
// were not logged, while itlproxy_upstream_ejections_total counts each.
const refusalLogEvery = 10 * time.Second

type upstreamEvents struct {
	m        *metrics.Metrics
	log      *zap.Logger
	refusals logLimit

	mu      sync.Mutex
	failing bool // the last resolution failed
	empty   bool // the set is empty
}

func (u *upstreamEvents) Resolved(endpoints, removed []*upstream.Endpoint) {
	u.m.UpstreamsChanged(labelsOf(endpoints), labelsOf(removed))
	u.mu.Lock()
	recovered := u.failing || u.empty && len(endpoints) > 0
	emptied := len(endpoints) == 0 && len(removed) > 0 // then none are removed until it is not
	u.failing, u.empty = false, len(endpoints) == 0
	u.mu.Unlock()
	switch {
	case emptied:
		u.log.Warn("the upstream's name resolves to no address: no endpoint to send requests to, each answered 503 until it resolves again",
			zap.Strings("removed", addrsOf(removed)))
	case recovered || len(removed) > 0:
		u.log.Info("upstream endpoints", zap.Strings("endpoints", addrsOf(endpoints)), zap.Strings("removed", addrsOf(removed)))
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
		u.log.Warn("resolving the upstream failed: the endpoints stay as they were", zap.Error(err))
	}
}

func (u *upstreamEvents) Ejected(e *upstream.Endpoint, d time.Duration) {
	u.m.UpstreamEjected(e.Label)
	if ok, skipped := u.refusals.allow(time.Now()); ok {
		u.log.Warn("an upstream endpoint refused a connection: set aside", zap.String("upstream", e.Addr), zap.Duration("for", d),
			zap.Int("refusals_since_last_logged", skipped))
	}
}

func labelsOf(eps []*upstream.Endpoint) []string {
	out := make([]string, 0, len(eps))
	for _, e := range eps {
		out = append(out, e.Label)
	}
	return out
}

func addrsOf(eps []*upstream.Endpoint) []string {
	out := make([]string, 0, len(eps))
	for _, e := range eps {
		out = append(out, e.Addr)
	}
	return out
}
