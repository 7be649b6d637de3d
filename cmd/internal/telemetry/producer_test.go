package telemetry

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestBridgeConversion checks what itlproxy takes from the Prometheus
// bridge, family type by type, on a registry like its own: names and
// label names as they are; a counter a cumulative monotonic sum; a gauge a
// gauge; a histogram with native buckets an exponential one at its schema
// with the same count, sum and buckets (its classic buckets left out); a
// classic-only histogram an explicit-bucket one; a summary a summary.
func TestBridgeConversion(t *testing.T) {
	reg := prometheus.NewRegistry()
	counter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "C."}, []string{"model", "end_point"})
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "G."})
	native := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "n_seconds", Help: "N.", Buckets: []float64{0.01}, NativeHistogramBucketFactor: 1.1})
	classic := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "H.", Buckets: []float64{0.01, 0.1}})
	summary := prometheus.NewSummary(prometheus.SummaryOpts{Name: "s_seconds", Help: "S."})
	reg.MustRegister(counter, gauge, native, classic, summary)
	counter.WithLabelValues("m", "chat").Add(3)
	gauge.Set(7)
	for _, v := range []float64{0.001, 0.02, 0.02, 0.5} {
		native.Observe(v)
		classic.Observe(v)
		summary.Observe(v)
	}
	scopes, err := newRegistryProducer(reg, nil, Cumulative, GenAI{}, "v").Produce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, m := range scopes[0].Metrics {
		got[m.Name] = m.Data
	}
	c, ok := got["c_total"].(metricdata.Sum[float64])
	want := attribute.NewSet(attribute.String("model", "m"), attribute.String("end_point", "chat"))
	if !ok || !c.IsMonotonic || c.Temporality != metricdata.CumulativeTemporality || c.DataPoints[0].Value != 3 || !c.DataPoints[0].Attributes.Equals(&want) {
		t.Errorf("counter c_total: %+v", got["c_total"])
	}
	if g, ok := got["g"].(metricdata.Gauge[float64]); !ok || g.DataPoints[0].Value != 7 {
		t.Errorf("gauge g: %+v", got["g"])
	}
	n, ok := got["n_seconds"].(metricdata.ExponentialHistogram[float64])
	if !ok {
		t.Fatalf("n_seconds: %T, want an exponential histogram", got["n_seconds"])
	}
	var inBuckets uint64
	for _, b := range n.DataPoints[0].PositiveBucket.Counts {
		inBuckets += b
	}
	if p := n.DataPoints[0]; p.Scale != 3 || p.Count != 4 || p.Sum != 0.541 || inBuckets != 4 || n.Temporality != metricdata.CumulativeTemporality {
		t.Errorf("n_seconds: scale %d, count %d, sum %g, %d in buckets, %v", p.Scale, p.Count, p.Sum, inBuckets, n.Temporality)
	}
	if h, ok := got["h_seconds"].(metricdata.Histogram[float64]); !ok || len(h.DataPoints[0].Bounds) != 2 || h.DataPoints[0].Count != 4 {
		t.Errorf("h_seconds: %+v, want an explicit-bucket histogram", got["h_seconds"])
	}
	if s, ok := got["s_seconds"].(metricdata.Summary); !ok || s.DataPoints[0].Count != 4 {
		t.Errorf("s_seconds: %+v, want a summary", got["s_seconds"])
	}
}
