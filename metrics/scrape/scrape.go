package scrape

import (
	"io"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are metric families by name.
type Families map[string]*dto.MetricFamily

// Gather reads every family from g.
func Gather(g prometheus.Gatherer) (Families, error) {
	list, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := make(Families, len(list))
	for _, f := range list {
		out[f.GetName()] = f
	}
	return out, nil
}

// Parse reads the text exposition format, as a scrape returns it.
func Parse(r io.Reader) (Families, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(r)
}

// Label returns the value of m's label name, "" when m has none (as
// PromQL reads a missing label).
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Series returns the series of family name whose labels match every name,
// value pair given (a value "" matches a series without that label).
func (fs Families) Series(name string, labels ...string) []*dto.Metric {
	var out []*dto.Metric
metric:
	for _, m := range fs[name].GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			if Label(m, labels[i]) != labels[i+1] {
				continue metric
			}
		}
		out = append(out, m)
	}
	return out
}

// Value sums the matching counter, gauge or untyped series.
func (fs Families) Value(name string, labels ...string) float64 {
	var v float64
	for _, m := range fs.Series(name, labels...) {
		v += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return v
}

// Buckets sums the matching histogram series.
func (fs Families) Buckets(name string, labels ...string) Buckets {
	var b Buckets
	for _, m := range fs.Series(name, labels...) {
		b.Add(m.GetHistogram())
	}
	return b
}

// Histogram sums the matching histogram series' counts and sums.
func (fs Families) Histogram(name string, labels ...string) (count uint64, sum float64) {
	b := fs.Buckets(name, labels...)
	return b.Count, b.Sum
}
