package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Goodput verdicts: the values of the verdict label.
const (
	VerdictMet    = "met"
	VerdictMissed = "missed"
)

// sloKinds indexes a stream's SLO counters.
const (
	kindTTFT = iota
	kindITL
	kindTPOT
	kindMaxGap
	sloKindCount
)

var sloKindLabels = [sloKindCount]string{SLOTTFT, SLOITL, SLOTPOT, SLOMaxGap}

// sloCounters are the counters of one model, class and tenant, resolved
// once so that a stream's observations do no label lookup. A kind's
// counters are nil where its objective is not set.
type sloCounters struct {
	obj                 Objectives
	limits              [sloKindCount]time.Duration // obj, by kind
	breaches, observed  [sloKindCount]prometheus.Counter
	met, missed, tokens prometheus.Counter // nil when streams are not judged
}

// byKind returns the objectives indexed by kind.
func (o Objectives) byKind() [sloKindCount]time.Duration {
	return [sloKindCount]time.Duration{o.TTFT, o.ITL, o.TPOT, o.MaxGap}
}

// judge counts one observation of kind i, and its breach when d exceeds
// the objective; it reports the breach.
func (c *sloCounters) judge(i int, d time.Duration) (breached bool) {
	if c.observed[i] == nil {
		return false
	}
	c.observed[i].Inc()
	if d > c.limits[i] {
		c.breaches[i].Inc()
		return true
	}
	return false
}

// judging caches the resolved counters by model, class and tenant: a
// bounded set, since each label is.
type judging struct {
	mu   sync.Mutex
	byID map[[3]string]*sloCounters
}

// sloCountersOf returns the counters of l's model, class and tenant.
func (m *Metrics) sloCountersOf(l Labels) *sloCounters {
	key := [3]string{l.Model, l.Class, l.Tenant}
	m.judging.mu.Lock()
	defer m.judging.mu.Unlock()
	if c := m.judging.byID[key]; c != nil {
		return c
	}
	obj := m.slos.Load().For(l.Model, l.Class)
	c := &sloCounters{obj: obj, limits: obj.byKind()}
	for i, kind := range sloKindLabels {
		if c.limits[i] > 0 {
			c.breaches[i] = m.sloBreaches.WithLabelValues(l.Model, l.Class, l.Tenant, kind)
			c.observed[i] = m.sloObserved.WithLabelValues(l.Model, l.Class, l.Tenant, kind)
		}
	}
	if c.obj.judges() {
		c.met = m.judged.WithLabelValues(l.Model, l.Class, l.Tenant, VerdictMet)
		c.missed = m.judged.WithLabelValues(l.Model, l.Class, l.Tenant, VerdictMissed)
		c.tokens = m.goodTokens.WithLabelValues(l.Model, l.Class, l.Tenant)
	}
	m.judging.byID[key] = c
	return c
}

// goodputCollectors builds the goodput counters.
func (m *Metrics) goodputCollectors(r *registrar) {
	m.judging = judging{byID: map[[3]string]*sloCounters{}}
	m.judged = r.counter("streams_judged_total",
		"Streams judged against the objectives of their model and service class when they end, by "+
			"verdict.",
		"model", "class", "tenant", "verdict")
	m.goodTokens = r.counter("goodput_tokens_total",
		"Output tokens of the streams that met their objectives (itlproxy_streams_judged_total "+
			"verdict=met), counted when they end.",
		"model", "class", "tenant")
}

// verdict judges an ended stream: whether it met its objectives. ttft is
// its time to first token (< 0: it produced none), tpot its time per
// output token (< 0: none), maxGap its longest gap.
func (o Objectives) verdict(outcome string, ttft, tpot, maxGap time.Duration) bool {
	switch {
	case outcome == OutcomeUpstreamError, outcome == OutcomeIdleTimeout, outcome == OutcomeRejected:
		return false
	case ttft < 0:
		return false
	case o.TTFT > 0 && ttft > o.TTFT:
		return false
	case o.TPOT > 0 && tpot >= 0 && tpot > o.TPOT:
		return false
	case o.MaxGap > 0 && maxGap > o.MaxGap:
		return false
	}
	return true
}
