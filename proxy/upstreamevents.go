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
// resolutions that failed (logged once per outage: the first, then the
// one that succeeds again), and the endpoints set aside.
func UpstreamEvents(m *metrics.Metrics, log *zap.Logger) upstream.Events {
	return &upstreamEvents{m: m, log: log}
}

type upstreamEvents struct {
	m   *metrics.Metrics
	log *zap.Logger

	mu      sync.Mutex
	failing bool // the last resolution failed
}

func (u *upstreamEvents) Resolved(endpoints, removed []*upstream.Endpoint) {
	u.m.UpstreamsChanged(labelsOf(endpoints), labelsOf(removed))
	u.mu.Lock()
	recovered := u.failing
	u.failing = false
	u.mu.Unlock()
	if recovered || len(removed) > 0 {
		u.log.Info("upstream endpoints", zap.Strings("endpoints", addrsOf(endpoints)), zap.Strings("removed", addrsOf(removed)))
	}
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
	u.log.Warn("an upstream endpoint refused a connection: set aside", zap.String("upstream", e.Addr), zap.Duration("for", d))
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
