package telemetry

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestExemplarsOfANativeHistogram: an observation with an exemplar, in a
// histogram with classic and native buckets, is pushed with one exemplar:
// its trace id as the 16 bytes it spells, its other labels as filtered
// attributes; a trace_id that spells no trace id stays a label.
func TestExemplarsOfANativeHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "h_seconds", Help: "H.", Buckets: []float64{0.01, 0.1}, NativeHistogramBucketFactor: 1.1,
	}, []string{"model"})
	reg.MustRegister(h)
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	h.WithLabelValues("m").(prometheus.ExemplarObserver).ObserveWithExemplar(0.05, prometheus.Labels{"request_id": "r1", "trace_id": trace})
	h.WithLabelValues("m").(prometheus.ExemplarObserver).ObserveWithExemplar(0.5, prometheus.Labels{"request_id": "r2", "trace_id": "not-hex"})
	scopes, err := newRegistryProducer(reg, nil, Cumulative, GenAI{}, "v").Produce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	e, ok := scopes[0].Metrics[0].Data.(metricdata.ExponentialHistogram[float64])
	if !ok {
		t.Fatalf("h_seconds pushed as %T, want an exponential histogram", scopes[0].Metrics[0].Data)
	}
	got := map[string]metricdata.Exemplar[float64]{}
	for _, ex := range e.DataPoints[0].Exemplars {
		for _, a := range ex.FilteredAttributes {
			if a.Key == "request_id" {
				got[a.Value.AsString()] = ex
			}
		}
	}
	if len(e.DataPoints[0].Exemplars) != 2 || len(got) != 2 {
		t.Fatalf("exemplars %+v, want one per observation", e.DataPoints[0].Exemplars)
	}
	if r1 := got["r1"]; hex.EncodeToString(r1.TraceID) != trace || r1.Value != 0.05 || len(r1.FilteredAttributes) != 1 {
		t.Errorf("r1's exemplar %+v, want trace id %s and request_id alone as an attribute", r1, trace)
	}
	if r2 := got["r2"]; len(r2.TraceID) != 0 || len(r2.FilteredAttributes) != 2 {
		t.Errorf("r2's exemplar %+v, want its trace_id as an attribute", r2)
	}
}

// TestConvertExemplar: ids of the wrong length stay attributes; an
// exemplar without a time takes the point's.
func TestConvertExemplar(t *testing.T) {
	label := func(n, v string) *dto.LabelPair { return &dto.LabelPair{Name: &n, Value: &v} }
	v := 1.5
	at := time.Unix(100, 0)
	ex := convertExemplar(&dto.Exemplar{Value: &v, Label: []*dto.LabelPair{
		label("trace_id", "4bf92f3577b34da6"), label("span_id", "00f067aa0ba902b7"),
	}}, at)
	if len(ex.TraceID) != 0 || hex.EncodeToString(ex.SpanID) != "00f067aa0ba902b7" || len(ex.FilteredAttributes) != 1 || !ex.Time.Equal(at) {
		t.Errorf("%+v: want an 8-byte trace_id kept as an attribute, the span id, the point's time", ex)
	}
}
