package telemetry

import (
	"encoding/hex"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The exemplars of the push, read from the registry's families: the
// bridge leaves out those of native histograms (every itlproxy
// histogram's), and gives the trace_id label as its text where OTLP takes
// the 16 bytes it spells (a receiver refuses a whole export with an id of
// any other length). So every exemplar is read here, from a series'
// counter, its native histogram's list and its classic buckets, each
// observation once.

// exemplarsOf returns the exemplars of series m, at least one per
// observation that carries one; at is the time of an exemplar that has
// none.
func exemplarsOf(m *dto.Metric, at time.Time) []metricdata.Exemplar[float64] {
	var src []*dto.Exemplar
	if c := m.GetCounter(); c.GetExemplar() != nil {
		src = append(src, c.GetExemplar())
	}
	if h := m.GetHistogram(); h != nil {
		src = append(src, h.GetExemplars()...)
		for _, b := range h.GetBucket() {
			if b.GetExemplar() != nil {
				src = append(src, b.GetExemplar())
			}
		}
	}
	if len(src) == 0 {
		return nil
	}
	type observation struct {
		at    time.Time
		value float64
	}
	seen := make(map[observation]bool, len(src))
	out := make([]metricdata.Exemplar[float64], 0, len(src))
	for _, e := range src {
		ex := convertExemplar(e, at)
		// A native histogram's exemplar is also its classic bucket's.
		if o := (observation{ex.Time, ex.Value}); !seen[o] {
			seen[o] = true
			out = append(out, ex)
		}
	}
	return out
}

// convertExemplar returns e as OTLP carries it: trace_id and span_id as
// the ids they spell, when they spell one, every other label (request_id,
// session_id) as a filtered attribute.
func convertExemplar(e *dto.Exemplar, at time.Time) metricdata.Exemplar[float64] {
	ex := metricdata.Exemplar[float64]{Value: e.GetValue(), Time: at}
	if e.GetTimestamp() != nil {
		ex.Time = e.GetTimestamp().AsTime()
	}
	for _, l := range e.GetLabel() {
		name, value := l.GetName(), l.GetValue()
		if id, ok := decodeID(value, idLength[name]); ok && name == "trace_id" {
			ex.TraceID = id
		} else if ok && name == "span_id" {
			ex.SpanID = id
		} else {
			ex.FilteredAttributes = append(ex.FilteredAttributes, attribute.String(name, value))
		}
	}
	return ex
}

// idLength is the length in bytes of the ids OTLP carries in fields of
// their own.
var idLength = map[string]int{"trace_id": 16, "span_id": 8}

// decodeID returns the n bytes a hexadecimal id spells; n = 0 is no id.
func decodeID(s string, n int) ([]byte, bool) {
	if n == 0 || len(s) != 2*n {
		return nil, false
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

// withExemplars sets the exemplars of each point of the bridged metric m
// from its family f, whose series are its points in the same order.
func withExemplars(m *metricdata.Metrics, f *dto.MetricFamily) {
	series := f.GetMetric()
	switch data := m.Data.(type) {
	case metricdata.Sum[float64]:
		for i := range data.DataPoints {
			if i < len(series) {
				data.DataPoints[i].Exemplars = exemplarsOf(series[i], data.DataPoints[i].Time)
			}
		}
	case metricdata.Histogram[float64]:
		for i := range data.DataPoints {
			if i < len(series) {
				data.DataPoints[i].Exemplars = exemplarsOf(series[i], data.DataPoints[i].Time)
			}
		}
	case metricdata.ExponentialHistogram[float64]:
		for i := range data.DataPoints {
			if i < len(series) {
				data.DataPoints[i].Exemplars = exemplarsOf(series[i], data.DataPoints[i].Time)
			}
		}
	}
}
