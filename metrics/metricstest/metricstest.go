package metricstest

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

// Series returns the series of family name whose labels include every
// name, value pair given.
func (fs Families) Series(name string, labels ...string) []*dto.Metric {
	var out []*dto.Metric
metric:
	for _, m := range fs[name].GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}
			if !found {
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

// Histogram sums the matching histogram series' counts and sums.
func (fs Families) Histogram(name string, labels ...string) (count uint64, sum float64) {
	for _, m := range fs.Series(name, labels...) {
		count += m.GetHistogram().GetSampleCount()
		sum += m.GetHistogram().GetSampleSum()
	}
	return count, sum
}
