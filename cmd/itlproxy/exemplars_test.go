package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestExemplarsOnMetrics: TTFT and ITL observations carry the request,
// session and trace ids as exemplars, which /metrics shows when the
// scraper negotiates OpenMetrics (and never as labels).
func TestExemplarsOnMetrics(t *testing.T) {
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(20*ms, 5*ms, 40*ms, 5*ms)})
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL})
	req, _ := http.NewRequest(http.MethodPost, "http://"+in.proxy+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	req.Header.Set("X-Request-Id", "req-exemplar-1")
	req.Header.Set("X-Session-Id", "sess-42")
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Request-Id") != "req-exemplar-1" {
		t.Errorf("response X-Request-Id %q", resp.Header.Get("X-Request-Id"))
	}

	scrape := func(accept string) string { return scrapeAs(t, in.admin, accept) }
	wantLabels := []string{`request_id="req-exemplar-1"`, `session_id="sess-42"`, `trace_id="4bf92f3577b34da6a3ce929d0e0e4736"`}
	var om string
	waitFor(t, "the stream to be recorded", 5*time.Second, func() bool {
		om = scrape("application/openmetrics-text; version=1.0.0")
		return strings.Contains(om, "itlproxy_streams_total{")
	})
	for _, family := range []string{"itlproxy_time_to_first_token_seconds_bucket", "itlproxy_inter_token_latency_seconds_bucket"} {
		// e.g. itlproxy_inter_token_latency_seconds_bucket{endpoint="chat_completions",model="m",le="0.05"} 3 # {request_id="...",...} 0.04 1.7e+09
		line := regexp.MustCompile(`(?m)^` + family + `\{[^}]*model="m"[^}]*\} \d+ # \{([^}]*)\} [0-9.e+-]+ [0-9.e+-]+$`)
		found := false
		for _, m := range line.FindAllStringSubmatch(om, -1) {
			labels := strings.Split(m[1], ",")
			slices.Sort(labels)
			found = found || slices.Equal(labels, wantLabels)
		}
		if !found {
			t.Errorf("no %s line with the exemplar %v in:\n%s", family, wantLabels, grep(om, family))
		}
	}
	if text := scrape("text/plain"); strings.Contains(text, "req-exemplar-1") {
		t.Error("the text format, which has no exemplars, shows the request id")
	}
	for _, l := range strings.Split(om, "\n") {
		series, _, _ := strings.Cut(l, " # ")
		for _, id := range []string{"req-exemplar-1", "sess-42", "4bf92f3577b34da6a3ce929d0e0e4736"} {
			if strings.Contains(series, id) {
				t.Errorf("an id is in a series, not an exemplar: %s", l)
			}
		}
	}
}

// scrapeAs reads admin's /metrics in the format accept asks for.
func scrapeAs(t *testing.T, admin, accept string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/metrics", nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
