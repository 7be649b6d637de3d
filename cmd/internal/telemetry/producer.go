package telemetry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	promb "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/itlproxy/itlproxy/metrics"
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
	// genAISource gathers the families the GenAI metrics are derived
	// from, which are not pushed as they are; nil: none.
	genAISource prometheus.Gatherer
	// snapshot is what the bridge gathers: the families just gathered.
	snapshot *gathered
	bridge   sdkmetric.Producer
	deltas   *deltas // nil: cumulative
	genAI    GenAI
	scope    instrumentation.Scope
	// failed is why the last push lacks families, for the exporter to
	// count (exportcount.go).
	failed *gatherFailure
	mu     sync.Mutex // a push at a time (the reader's Collect may race its loop)
}

func newRegistryProducer(g, genAISource prometheus.Gatherer, t Temporality, genAI GenAI, version string) *registryProducer {
	snapshot := &gathered{}
	return &registryProducer{
		gatherer:    g,
		genAISource: genAISource,
		snapshot:    snapshot,
		bridge:      promb.NewMetricProducer(promb.WithGatherer(snapshot)),
		deltas:      newDeltas(t),
		genAI:       genAI,
		scope:       genAIScope(version),
		failed:      &gatherFailure{},
	}
}

// gathered is a prometheus.Gatherer of families gathered already.
type gathered struct{ families []*dto.MetricFamily }

func (g *gathered) Gather() ([]*dto.MetricFamily, error) { return g.families, nil }

// Produce returns every family of the registry, and the GenAI metrics.
// A registry that fails to gather some families (a collector's bug,
// which /metrics would show too) still gives the others: they are pushed,
// and the failure is the push's, which the exporter counts and logs
// (failed). Returned, it would make the reader drop the whole push.
func (p *registryProducer) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	families, gatherErr := p.gatherer.Gather()
	if p.genAISource != nil {
		sources, err := p.genAISource.Gather()
		families = append(slices.Clip(families), sources...)
		gatherErr = errors.Join(gatherErr, err)
	}
	p.snapshot.families = families
	scopes, err := p.bridge.Produce(ctx)
	p.snapshot.families = nil
	p.failed.set(errors.Join(gatherErr, err))
	if len(scopes) == 0 {
		return nil, nil
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
	own, sources := splitGenAISources(ms)
	scopes[0].Metrics = own
	if g := p.genAI.derive(sources); len(g) > 0 {
		scopes = append(scopes, metricdata.ScopeMetrics{Scope: p.scope, Metrics: g})
	}
	return scopes, nil
}

// splitGenAISources parts the families the GenAI metrics are derived
// from, which are not pushed themselves, from the others.
func splitGenAISources(ms []metricdata.Metrics) (own, sources []metricdata.Metrics) {
	own = ms[:0]
	for _, m := range ms {
		if strings.HasPrefix(m.Name, metrics.GenAISourcePrefix) {
			sources = append(sources, m)
		} else {
			own = append(own, m)
		}
	}
	return own, sources
}

// gatherFailure is why the push the reader collected last lacks families,
// nil when it lacks none: the producer sets it, the exporter takes it.
type gatherFailure struct {
	mu  sync.Mutex
	err error
}

func (f *gatherFailure) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *gatherFailure) take() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.err
	f.err = nil
	return err
}
