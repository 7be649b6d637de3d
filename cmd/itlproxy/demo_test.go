package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/demo"
	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// TestDemo runs the README's demo command and expects what an operator
// gets to fill: ITL samples on /metrics within seconds, the table on
// stdout, and within a minute the objectives at work (breaches and both
// verdicts for the model that misses by design, met streams for the
// others), stalls of each cause the batch model's engine makes (a
// prefill, a pause), and the live page's attainment and goodput columns
// and stall causes, as Chromium renders them.
func TestDemo(t *testing.T) {
	in := start(t, []string{"demo"}, nil)
	started := time.Now()
	deadline := started.Add(5 * time.Second)
	for {
		n, _ := in.scrape().Histogram("itlproxy_inter_token_latency_seconds")
		if n > 0 {
			t.Logf("%d ITL samples after %v", n, time.Since(started).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ITL samples after 5s\n%s", in.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if first, _, _ := strings.Cut(in.stdout.String(), "\n"); !strings.HasPrefix(first, "live page: http://"+in.admin+"/ ") {
		t.Errorf("the demo's first line is %q, not the live page's address", first)
	}
	deadline = time.Now().Add(demo.TableEvery + 3*time.Second)
	for !strings.Contains(in.stdout.String(), "ITL p50") {
		if time.Now().After(deadline) {
			t.Fatalf("no table on stdout:\n%s", in.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range demo.Models {
		if !strings.Contains(in.stdout.String(), m.Name) {
			t.Errorf("table does not show %s:\n%s", m.Name, in.stdout)
		}
	}

	fs := waitForVerdicts(t, in, started)
	for _, m := range demo.Models {
		var breaches []string
		for _, slo := range []string{metrics.SLOTTFT, metrics.SLOITL, metrics.SLOTPOT, metrics.SLOMaxGap} {
			breaches = append(breaches, fmt.Sprintf("%s %.0f/%.0f", slo,
				fs.Value("itlproxy_slo_breaches_total", "model", m.Name, "slo", slo),
				fs.Value("itlproxy_slo_observations_total", "model", m.Name, "slo", slo)))
		}
		t.Logf("%s: streams met %.0f, missed %.0f; breaches/observations %s", m.Name,
			fs.Value("itlproxy_streams_judged_total", "model", m.Name, "verdict", metrics.VerdictMet),
			fs.Value("itlproxy_streams_judged_total", "model", m.Name, "verdict", metrics.VerdictMissed), strings.Join(breaches, ", "))
	}

	// The batch model's engine made stalls of both its causes: another
	// request's long prompt, and its own pauses.
	stalls := func(cause string) float64 {
		return in.scrape().Value("itlproxy_stalls_total", "model", demo.Batch.Name, "cause", cause)
	}
	e2e.WaitFor(t, "stalls of each engine-made cause", time.Minute-time.Since(started)+demo.Batch.PauseEvery, func() bool {
		return stalls(metrics.StallPrefill) > 0 && stalls(metrics.StallUpstream) > 0
	})
	t.Logf("%s: %.0f prefill stalls, %.0f upstream, %.0f client", demo.Batch.Name,
		stalls(metrics.StallPrefill), stalls(metrics.StallUpstream), stalls(metrics.StallClient))

	// A stall is counted once its cause is decided, and recorded when
	// its stream ends.
	e2e.WaitFor(t, "streams recorded with stalls of each engine-made cause", 30*time.Second, func() bool {
		var recorded struct {
			Streams []struct {
				Stalls []struct{ Cause string } `json:"stalls"`
			} `json:"streams"`
		}
		getJSON(t, "http://"+in.admin+"/debug/streams?min_gap=700ms&limit=0", &recorded)
		seen := map[string]bool{}
		for _, e := range recorded.Streams {
			for _, s := range e.Stalls {
				seen[s.Cause] = true
			}
		}
		return seen[metrics.StallPrefill] && seen[metrics.StallUpstream]
	})
	dom := chromiumDOMIn(t, "demo", "http://"+in.admin+"/")
	for _, cause := range []string{metrics.StallPrefill, metrics.StallUpstream} {
		if !strings.Contains(dom, `data-cause="`+cause+`"`) {
			t.Errorf("the live page shows no %s stall", cause)
		}
	}
	for _, m := range demo.Models {
		row := regexp.MustCompile(`<tr class="model" data-model="` + regexp.QuoteMeta(m.Name) + `"><td rowspan="2">[^<]*</td><td rowspan="2">[^<]*</td>\s*` +
			`<td>(1m[^<]*)</td>(?:<td>[^<]*</td>){6}\s*<td class="attainment">(\d+\.\d)% of (\d+)</td><td class="goodput">(\d+\.\d) tokens/s</td>`).FindStringSubmatch(dom)
		if row == nil {
			t.Errorf("the live page shows no attainment and goodput for %s:\n%s", m.Name, dom)
			continue
		}
		t.Logf("live page, %s, window %s: SLO attainment %s%% of %s streams, goodput %s tokens/s", m.Name, row[1], row[2], row[3], row[4])
		if m.Name == demoMissing && row[2] == "100.0" {
			t.Errorf("%s met every objective on the page, though it has missed streams", m.Name)
		}
	}
	in.stop()
	if err := in.wait(10 * time.Second); err != nil {
		t.Errorf("demo ended with %v", err)
	}
}

// demoMissing is the demo's model that misses its objectives by design.
const demoMissing = "mixtral-8x7b-instruct"

// waitForVerdicts waits, up to a minute from started, until the demo's
// objectives have judged streams: breaches and both verdicts for
// demoMissing, met streams for every other model. It returns the scrape
// that showed them.
func waitForVerdicts(t *testing.T, in *instance, started time.Time) scrape.Families {
	t.Helper()
	verdict := func(fs scrape.Families, model, v string) float64 {
		return fs.Value("itlproxy_streams_judged_total", "model", model, "verdict", v)
	}
	for {
		fs := in.scrape()
		done := fs.Value("itlproxy_slo_breaches_total", "model", demoMissing) > 0 &&
			verdict(fs, demoMissing, metrics.VerdictMissed) > 0
		for _, m := range demo.Models {
			done = done && verdict(fs, m.Name, metrics.VerdictMet) > 0
		}
		if done {
			t.Logf("every verdict after %v", time.Since(started).Round(time.Millisecond))
			return fs
		}
		if time.Since(started) > time.Minute {
			t.Fatalf("after a minute, the objectives have not judged every model both ways:\n%s", grep(scrapeAs(t, in.admin, ""), "itlproxy_s"))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// chromiumDOMIn is chromiumDOM with its screenshot in the subdirectory
// sub of the test artifacts, so that it replaces no other test's.
func chromiumDOMIn(t *testing.T, sub, url string) string {
	t.Helper()
	if dir := os.Getenv("ITLPROXY_TEST_ARTIFACTS"); dir != "" {
		t.Setenv("ITLPROXY_TEST_ARTIFACTS", filepath.Join(dir, sub))
	}
	return chromiumDOM(t, url)
}
