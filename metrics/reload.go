package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReloadSLOs puts new objectives in effect without a restart. Streams that
// start from now on are judged against them; streams in flight keep the
// counters and objectives they resolved when they started. The objective
// gauge is exported anew (series of objectives that no longer exist go
// away); breach and observation counters of the new objectives start at
// zero. Histogram bucket bounds stay those New was given: a new objective
// that is not one of them is judged exactly by the breach counters, but a
// bucket ratio or quantile at it is interpolated.
//
// Models the new objectives name keep their own label value from now on,
// even past the distinct-model cap or outside the allow-list, as at start.
func (m *Metrics) ReloadSLOs(s SLOs) {
	m.judging.mu.Lock()
	defer m.judging.mu.Unlock()
	m.models.reload(s.modelNames(), func(labels []string) {
		// Under the labeler's lock: no model is admitted with the old
		// objectives between the swap and the export.
		m.slos.Store(&s)
		m.judging.byID = map[[3]string]*sloCounters{}
		m.sloObjective.Reset()
		for _, label := range labels {
			m.admitModel(label)
		}
	})
}

// ParseSLOFile is LoadSLOFile of data already read from path.
func ParseSLOFile(path string, data []byte, base Objectives) (SLOs, error) {
	return parseSLOs(path, data, base)
}

// reload reserves the models with objectives of their own, then calls f
// with every label value, all under the lock, so that no label value is
// admitted meanwhile.
func (l *boundedLabels) reload(reserved []string, f func(labels []string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range reserved {
		if !l.allow[m] {
			l.seen[m] = true
		}
	}
	f(l.static())
}

// Reloads are the outcomes of re-reading files without a restart, under
// the names Prometheus and Alertmanager use for theirs.
type Reloads struct {
	successful  prometheus.Gauge
	successTime prometheus.Gauge
	tlsFailures *prometheus.CounterVec
}

// NewReloads creates the reload collectors and registers them on reg. The
// configuration counts as loaded successfully now: the process started
// with it.
func NewReloads(reg prometheus.Registerer) (*Reloads, error) {
	r := &registrar{reg: reg}
	successful := r.gauge("config_last_reload_successful",
		"Whether the last reload of the SLO file put it in effect (1) or refused it and kept the "+
			"objectives in use (0), 1 at start.")
	successTime := r.gauge("config_last_reload_success_timestamp_seconds",
		"Unix time of the last successful load of the SLO file, at start or by a reload.")
	tlsFailures := r.counter("tls_reload_failures_total",
		"Certificate or key files re-read after a change that could not be used, by file, while the "+
			"certificates in use stay.",
		"file")
	if r.err != nil {
		return nil, r.err
	}
	out := &Reloads{
		successful:  successful.WithLabelValues(),
		successTime: successTime.WithLabelValues(),
		tlsFailures: tlsFailures,
	}
	out.Config(true, time.Now())
	return out, nil
}

// Config records the outcome of a reload of the SLO file at now.
func (r *Reloads) Config(ok bool, now time.Time) {
	if !ok {
		r.successful.Set(0)
		return
	}
	r.successful.Set(1)
	r.successTime.Set(float64(now.UnixNano()) / 1e9)
}

// TLSFailed counts a certificate reload that failed; file is one of the
// values docs/metrics.md lists for itlproxy_tls_reload_failures_total.
func (r *Reloads) TLSFailed(file string) {
	r.tlsFailures.WithLabelValues(file).Inc()
}
