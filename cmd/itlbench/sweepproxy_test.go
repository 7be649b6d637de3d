package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

// TestSweepThroughItlproxy sweeps the law's server through the real
// itlproxy binary, with -compare-metrics, while a real Prometheus scrapes
// the proxy and evaluates the shipped rules. The levels sit on the
// proxy's load bands (2, 3-4, 9-16) and the ITL objective (126 ms, the
// proxy's too) falls between the law at 4 streams (78 ms) and at 16
// (150 ms), so the sweep finds 4 streams, and so must the proxy. The text
// report shows each level beside what the proxy counted of it (the same
// requests), and the proxy's capacity beside the sweep's: the figure the
// recording rule model:itlproxy_capacity_streams computes in Prometheus
// from the same traffic.
func TestSweepThroughItlproxy(t *testing.T) {
	base := startLawUpstream(t)
	proxy := e2e.Start(t, map[string]string{"ITLPROXY_UPSTREAM_URL": base, "ITLPROXY_SLO_ITL": "126ms"})
	prom := e2e.StartPrometheus(t, proxy.Admin, filepath.Join("..", "..", "deploy", "prometheus", "rules.yaml"))
	url := "http://" + proxy.Proxy + "/v1"
	// A first round at the highest level makes the series of every load
	// band up to it (a band's series appear when the load first reaches
	// it), and Prometheus scrapes them before the sweep: a series that
	// appears with its first observations loses them to rate(), which the
	// sweep's own two scrapes would count. Its streams have one token
	// each: no gap, which would be in the bands before Prometheus's first
	// sample of them or after it. Their connections are opened first
	// (-warmup), so that they arrive together.
	if _, out, err := benchJSON(t, context.Background(), "-url", url, "-c", "16", "-warmup", "16", "-requests", "16", "-max-tokens", "1"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	scrapedAfter(t, prom, time.Now())
	if got := prom.Query(`itlproxy_inter_token_latency_by_load_seconds_count{model="law",load="9-16"} == 0`); len(got) != 1 {
		t.Fatalf("after the first round, Prometheus has %v of band 9-16's gaps; want its series, without a gap", got)
	}

	page := filepath.Join(t.TempDir(), "sweep.html")
	var stdout, stderr bytes.Buffer
	// -ramp: the streams of a level start, and so end, out of step (those
	// of the law's server all last as long): streams ending together
	// would leave the others' last gaps, as long as the level made them,
	// to end at loads far below it, in the proxy's lower bands.
	err := run(context.Background(), []string{"sweep", "-url", url, "-levels", "2,4,16", "-duration", "3s", "-ramp", "1.5s", "-slo-itl", "126ms",
		"-compare-metrics", "http://" + proxy.Admin + "/metrics", "-report", page}, &stdout, &stderr)
	ended := time.Now()
	out := stdout.String()
	t.Logf("itlbench sweep:\n%s", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}

	// Each level beside the proxy's view of it: the same requests.
	view := out[strings.Index(out, "itlproxy's view"):]
	rows := regexp.MustCompile(`(?m)^\s+(\d+)\s+(\d+)\s+(\d+)\s+\d`).FindAllStringSubmatch(view, -1)
	if len(rows) != 3 {
		t.Fatalf("%d levels beside the proxy's view, want 3", len(rows))
	}
	for i, r := range rows {
		if want := []string{"2", "4", "16"}[i]; r[1] != want || r[2] != r[3] || r[2] == "0" {
			t.Errorf("level %s: %s first tokens on the client, %s on the proxy; want level %s, the same count", r[1], r[2], r[3], want)
		}
	}
	if !strings.Contains(out, "\ncapacity: 4 streams, the highest level that met p99 ITL ≤ 126.0ms; bound by ITL: at 16 streams, p99 ITL ") {
		t.Errorf("the sweep's capacity is not 4 streams, bound by ITL at 16")
	}
	m := regexp.MustCompile(`\nitlproxy: (\d+) streams? for model law \(model:itlproxy_capacity_streams`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no itlproxy capacity beside the sweep's")
	}
	if m[1] != "4" {
		t.Errorf("itlproxy's capacity %s streams; the law in its bands gives 4", m[1])
	}

	// The rule, evaluated after a scrape taken once the sweep had ended.
	scraped := scrapedAfter(t, prom, ended)
	e2e.WaitFor(t, "the capacity rule to run after that scrape", 20*time.Second, func() bool {
		for _, r := range prom.Rules() {
			if r.Name == "model:itlproxy_capacity_streams:1h" && float64(r.LastEvaluation.UnixMilli())/1e3 > scraped {
				return true
			}
		}
		return false
	})
	for _, rule := range []string{"model:itlproxy_capacity_streams:5m", "model:itlproxy_capacity_streams:1h"} {
		got := prom.Query(rule + `{model="law"}`)
		if len(got) != 1 || got[0].Value[1] != m[1] {
			t.Errorf("%s in Prometheus: %v; itlbench printed %s streams", rule, got, m[1])
			for _, q := range []string{`model_load:itlproxy_inter_token_latency_seconds:p99_rate5m{model="law"}`,
				`model_load:itlproxy_inter_token_latency_seconds_count:increase5m{model="law"}`} {
				t.Logf("%s: %v", q, prom.Query(q))
			}
		}
	}

	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(html, []byte(`<table id="proxy-levels">`)) || !bytes.Contains(html, []byte(`<p class="proxy-capacity">itlproxy: 4 streams for model law`)) ||
		!bytes.Contains(html, []byte(">itlproxy 4 (law)<")) {
		t.Error("the page lacks the proxy's view of the levels, its capacity, or its mark on the charts")
	}
}

// scrapedAfter waits for Prometheus to scrape the proxy after t, and
// returns the time of that scrape, in Unix seconds.
func scrapedAfter(tb *testing.T, prom *e2e.Prometheus, t time.Time) float64 {
	tb.Helper()
	var scraped float64
	e2e.WaitFor(tb, "a scrape after "+t.Format(time.StampMilli), 20*time.Second, func() bool {
		s := prom.Query(`timestamp(up{job="itlproxy"})`)
		if len(s) == 1 {
			scraped, _ = strconv.ParseFloat(s[0].Value[1].(string), 64)
		}
		return scraped > float64(t.UnixMilli())/1e3
	})
	return scraped
}
