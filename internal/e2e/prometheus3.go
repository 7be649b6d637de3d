package e2e

import (
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/testenv"
)

// Prometheus3Variable names the Prometheus 3 server the OTLP tests run;
// without it they look for prometheus3 on PATH. Debian's package is 2.x,
// and a server built with go install reports no version to tell them
// apart, hence a name of its own.
const Prometheus3Variable = "ITLPROXY_TEST_PROMETHEUS3"

// InstallPrometheus3 says how to get the Prometheus 3 server the OTLP tests
// run, as .ci/run builds it.
const InstallPrometheus3 = "GOBIN=$HOME/prom3 go install -tags remove_all_sd -trimpath " +
	"github.com/prometheus/prometheus/cmd/prometheus@v0.316.0, then " + Prometheus3Variable + "=$HOME/prom3/prometheus, as .ci/run does"

// StartPrometheus3OTLP runs Prometheus 3 with its OTLP receiver on
// (--web.enable-otlp-receiver, at /api/v1/otlp/v1/metrics) and exemplar
// storage, scraping nothing, and waits until it is ready. It stores what
// OTLP pushes as its default translation does (names escaped to
// underscores, unit and _total suffixes added, exponential histograms
// as native histograms).
func StartPrometheus3OTLP(t testing.TB) *Prometheus {
	t.Helper()
	bin := os.Getenv(Prometheus3Variable)
	if bin == "" {
		bin = testenv.LookPath(t, "prometheus3", InstallPrometheus3)
	} else if _, err := exec.LookPath(bin); err != nil {
		testenv.Missing(t, "Prometheus 3 at "+Prometheus3Variable+"="+bin, InstallPrometheus3)
	}
	return runPrometheus(t, bin, []string{"--web.enable-otlp-receiver", "--enable-feature=exemplar-storage"}, "", nil)
}

// OTLPEndpoint is the base URL of the server's OTLP receiver, to which an
// OTLP/HTTP exporter appends /v1/metrics.
func (p *Prometheus) OTLPEndpoint() string { return p.url + "/api/v1/otlp" }

// Exemplars returns the labels of every exemplar of the series expr
// selects over the last hour, as /api/v1/query_exemplars gives them.
func (p *Prometheus) Exemplars(expr string) []map[string]string {
	p.t.Helper()
	var data []struct {
		Exemplars []struct {
			Labels map[string]string `json:"labels"`
		} `json:"exemplars"`
	}
	now := time.Now()
	p.api("/api/v1/query_exemplars", url.Values{"query": {expr},
		"start": {now.Add(-time.Hour).Format(time.RFC3339)}, "end": {now.Add(time.Minute).Format(time.RFC3339)}}, &data)
	var out []map[string]string
	for _, s := range data {
		for _, e := range s.Exemplars {
			out = append(out, e.Labels)
		}
	}
	return out
}
