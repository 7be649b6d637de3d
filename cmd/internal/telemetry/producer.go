package telemetry

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	promb "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// registryProducer is what the OTLP push reads at each push: the registry
// /metrics serves, gathered once, so that the push and a scrape read the
// same instrumentation, never the data path. The Prometheus bridge
// converts the families (a native histogram to an exponential one at its
// scale, a counter to a monotonic cumulative sum, a gauge to a gauge, a
// summary to a summary, labels to attributes, names as they are); then
// this adds what the bridge does not do: every exemplar (exemplars.go),
// the delta temporalities (delta.go) and the GenAI metrics (genai.go).
type registryProducer struct {
	gatherer prometheus.Gatherer
	// snapshot is what the bridge gathers: the families just gathered.
	snapshot *gathered
	bridge   sdkmetric.Producer
	deltas   *deltas // nil: cumulative
	genAI    GenAI
	scope    instrumentation.Scope
	mu       sync.Mutex // a push at a time (the reader's Collect may race its loop)
}

func newRegistryProducer(g prometheus.Gatherer, t Temporality, genAI GenAI, version string) *registryProducer {
	snapshot := &gathered{}
	return &registryProducer{
		gatherer: g,
		snapshot: snapshot,
		bridge:   promb.NewMetricProducer(promb.WithGatherer(snapshot)),
		deltas:   newDeltas(t),
		genAI:    genAI,
		scope:    genAIScope(version),
	}
}

// gathered is a prometheus.Gatherer of families gathered already.
type gathered struct{ families []*dto.MetricFamily }

func (g *gathered) Gather() ([]*dto.MetricFamily, error) { return g.families, nil }

// Produce returns every family of the registry, and the GenAI metrics.
// A registry that fails to gather some families (a collector's bug,
// which /metrics would show too) still gives the others.
func (p *registryProducer) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	families, gatherErr := p.gatherer.Gather()
	p.snapshot.families = families
	scopes, err := p.bridge.Produce(ctx)
	p.snapshot.families = nil
	if err != nil || len(scopes) == 0 {
		return nil, err
	}
	byName := make(map[string]*dto.MetricFamily, len(families))
	for _, f := range families {
		byName[f.GetName()] = f
	}
	// The bridge gives one scope, its own.
	ms := scopes[0].Metrics
	for i := range ms {
		withExemplars(&ms[i], byName[ms[i].Name])
	}
	if p.deltas != nil {
		p.deltas.apply(ms)
	}
	if g := p.genAI.derive(ms); len(g) > 0 {
		scopes = append(scopes, metricdata.ScopeMetrics{Scope: p.scope, Metrics: g})
	}
	return scopes, gatherErr
}
