package main

import (
	"cmp"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/cmd/internal/telemetry"
	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// TestMetricsReference runs itlproxy with everything on (objectives from
// a file with a service class, tenants, sessions, a stall threshold, an
// upstream CA file, tracing, the metrics' push over OTLP), drives traffic that gives every family a
// series, scrapes /metrics as Prometheus does, and holds
// docs/metrics.md's generated sections to what the scrape says: the index
// of every itlproxy_ family with its type, labels and Help, and the values
// of the labels whose values are a fixed set. Every itlproxy_ family's
// Help is one sentence of at most maxHelp bytes (helpProblem; the Go and
// process collectors' are client_golang's), and every family has a section
// of its own in docs/metrics.md, written by hand, for what its Help leaves
// out (familySections).
func TestMetricsReference(t *testing.T) {
	fs := everyFamily(t)
	var names []string
	for name := range fs {
		if strings.HasPrefix(name, "itlproxy_") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	registered := registeredFamilies(t)
	for _, name := range registered {
		if fs[name] == nil {
			t.Errorf("%s is registered, but the test's traffic gave it no series: drive it in everyFamily, or the reference misses it", name)
		}
	}
	for _, name := range names {
		if !slices.Contains(registered, name) {
			t.Errorf("%s is exported, and not registered by the collectors the test knows (registeredFamilies)", name)
		}
	}

	longest := ""
	for name, f := range fs {
		if p := helpProblem(f.GetHelp()); p != "" && strings.HasPrefix(name, "itlproxy_") {
			t.Errorf("the Help of %s %s: %q", name, p, f.GetHelp())
		}
		if strings.HasPrefix(name, "itlproxy_") && len(f.GetHelp()) > len(fs[longest].GetHelp()) {
			longest = name
		}
	}
	t.Logf("the longest Help is %s's, %d bytes", longest, len(fs[longest].GetHelp()))

	sections := familySections(t)
	for _, name := range registered {
		if _, ok := sections[name]; !ok {
			t.Errorf("docs/metrics.md has no section \"### %s\" for what its Help leaves out", name)
		}
	}
	for name, text := range sections {
		if !slices.Contains(registered, name) {
			t.Errorf("docs/metrics.md has a section \"### %s\", which names no family", name)
		}
		if strings.TrimSpace(text) == "" {
			t.Errorf("docs/metrics.md's section %q is empty", name)
		}
	}

	var index strings.Builder
	index.WriteString("| family | type | labels | Help |\n|---|---|---|---|\n")
	for _, name := range names {
		f := fs[name]
		typ := strings.ToLower(f.GetType().String())
		labels := "—"
		if l := labelNames(f); len(l) > 0 {
			labels = "`" + strings.Join(l, "`, `") + "`"
		}
		fmt.Fprintf(&index, "| [`%s`](#%s) | %s | %s | %s |\n", name, name, typ, labels, markdownText(f.GetHelp()))
	}
	checkGenerated(t, "docs/metrics.md", "families", index.String())

	var values strings.Builder
	values.WriteString("| label | of | values |\n|---|---|---|\n")
	for _, v := range fixedLabelValues(fs) {
		fmt.Fprintf(&values, "| `%s` | %s | `%s` |\n", v.label, v.of, strings.Join(v.values, "`, `"))
	}
	checkGenerated(t, "docs/metrics.md", "label-values", values.String())
}

// maxHelp is the most bytes a family's Help may have: it is sent on every
// scrape, and docs/metrics.md holds the rest.
const maxHelp = 200

// sentenceEnd is a sentence that ends inside a Help: a full stop,
// question or exclamation mark followed by a space.
var sentenceEnd = regexp.MustCompile(`[.!?]["')]*\s`)

// helpProblem says what keeps help from being one sentence of at most
// maxHelp bytes, or "" when nothing does: it starts with an upper-case
// letter, ends with one full stop, and ends no sentence before that.
func helpProblem(help string) string {
	switch {
	case len(help) > maxHelp:
		return fmt.Sprintf("has %d bytes, over %d", len(help), maxHelp)
	case help == "" || !unicode.IsUpper([]rune(help)[0]):
		return "does not start with an upper-case letter"
	case !strings.HasSuffix(help, ".") || strings.HasSuffix(help, ".."):
		return "does not end with one full stop"
	case strings.ContainsAny(help, "\n\r"):
		return "has more than one line"
	case sentenceEnd.MatchString(help):
		return fmt.Sprintf("is more than one sentence (%q ends one inside it)", sentenceEnd.FindString(help))
	}
	return ""
}

// TestHelpProblem: helpProblem passes one sentence and names what is wrong
// with the rest.
func TestHelpProblem(t *testing.T) {
	for _, c := range []struct {
		name, help string
		ok         bool
	}{
		{"one sentence", "Streams in flight, each from t0 to the end of its response.", true},
		{"a semicolon and a colon", "Always 1; the labels name the running build: version and revision.", true},
		{"a decimal point", "Gaps over 0.5 s.", true},
		{"two sentences", "Streams ended. Each response is a stream.", false},
		{"a second sentence in lower case", "Streams ended. each response is a stream.", false},
		{"a question", "Streams ended? Each response is a stream.", false},
		{"no full stop", "Streams ended", false},
		{"two full stops", "Streams ended..", false},
		{"a lower-case start", "streams ended.", false},
		{"a digit first", "1 at start.", false},
		{"two lines", "Streams\nended.", false},
		{"as long as allowed", "S" + strings.Repeat("o", maxHelp-2) + ".", true},
		{"a byte too long", "S" + strings.Repeat("o", maxHelp-1) + ".", false},
		{"empty", "", false},
	} {
		if got := helpProblem(c.help); (got == "") != c.ok {
			t.Errorf("%s: helpProblem(%q) = %q, want ok %v", c.name, c.help, got, c.ok)
		}
	}
}

// familySections reads the hand-written part of docs/metrics.md's
// families: from the end of the generated index to the next "## "
// heading, a section per "### " heading, by the heading's text.
func familySections(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- generated:families:end -->\n")
	if !ok {
		t.Fatal("docs/metrics.md has no end of the generated families")
	}
	sections := map[string]string{}
	name := ""
	for line := range strings.Lines(rest) {
		switch {
		case strings.HasPrefix(line, "## "):
			return sections
		case strings.HasPrefix(line, "### "):
			name = strings.TrimSpace(strings.TrimPrefix(line, "### "))
			if _, ok := sections[name]; ok {
				t.Errorf("docs/metrics.md has two sections %q", name)
			}
			sections[name] = ""
		case name != "":
			sections[name] += line
		}
	}
	return sections
}

// labelNames are the label names of f's series, in their order.
func labelNames(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if !slices.Contains(out, l.GetName()) {
				out = append(out, l.GetName())
			}
		}
	}
	return out
}

// labelValues is a label whose values are a fixed set, in the families
// named by of.
type labelValues struct {
	label, of string
	values    []string
}

// fixedLabelValues are the labels whose values the code fixes: from the
// constants of package metrics, or from series that exist from the start
// whatever the traffic (every load band's bound, both reasons a span is
// dropped). The bands of position, turn and context, and the certificate
// files, are listed in their families' sections of docs/metrics.md.
func fixedLabelValues(fs scrape.Families) []labelValues {
	// of returns the values of label in family's series, ordered by the
	// series' values (a band by its bound).
	of := func(family, label string) []string {
		series := slices.Clone(fs[family].GetMetric())
		slices.SortStableFunc(series, func(a, b *dto.Metric) int {
			return cmp.Compare(a.GetGauge().GetValue()+a.GetCounter().GetValue(), b.GetGauge().GetValue()+b.GetCounter().GetValue())
		})
		var out []string
		for _, m := range series {
			out = append(out, scrape.Label(m, label))
		}
		return out
	}
	return []labelValues{
		{"endpoint", "every family that has it", []string{"chat_completions", "completions",
			"responses", "messages", "ollama_chat", "ollama_generate",
			"tgi_generate", "llamacpp_completion", "sglang_generate", "realtime", "other"}},
		{"outcome", "`itlproxy_streams_total`", []string{metrics.OutcomeCompleted, metrics.OutcomeClientCanceled,
			metrics.OutcomeUpstreamError, metrics.OutcomeRejected, metrics.OutcomeIdleTimeout, metrics.OutcomeIncomplete}},
		{"reason", "`itlproxy_parse_failures_total`", []string{metrics.ParseInvalidJSON, metrics.ParseEventTooLarge,
			metrics.ParseTruncated, metrics.ParseBodyTooLarge, metrics.ParseEncoded, metrics.ParseInvalidFrame}},
		{"reason", "`itlproxy_trace_spans_dropped_total`", of("itlproxy_trace_spans_dropped_total", "reason")},
		{"slo", "the `itlproxy_slo_*` families", []string{metrics.SLOTTFT, metrics.SLOITL, metrics.SLOTPOT, metrics.SLOMaxGap}},
		{"verdict", "`itlproxy_streams_judged_total`", []string{metrics.VerdictMet, metrics.VerdictMissed}},
		{"cause", "`itlproxy_stalls_total`", []string{metrics.StallPrefill, metrics.StallClient, metrics.StallUpstream}},
		{"type", "`itlproxy_tokens_per_response`", []string{metrics.TokenInput, metrics.TokenOutput}},
		{"streaming", "`itlproxy_requests_total`, `itlproxy_request_duration_seconds`", []string{"true", "false"}},
		{"load", "the `*_by_load_*` families, `itlproxy_load_band_upper_streams`", of("itlproxy_load_band_upper_streams", "load")},
	}
}

// registeredFamilies are the itlproxy_ families the binary's collectors
// register, read from their descriptors (which exist before any series
// does), built as run builds them with tracing and the metrics' push on:
// what the scrape must show.
func registeredFamilies(t *testing.T) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, metrics.Options{MaxModels: 1, MaxTenants: 1, SessionMax: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.NewReloads(reg); err != nil {
		t.Fatal(err)
	}
	sink := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer sink.Close()
	tr, err := telemetry.StartTracing(telemetry.Config{OTLPEndpoint: sink.URL, OTLPProtocol: "http/protobuf", OTELServiceName: "itlproxy",
		OTELTracesSampler: "always_on", OTELBSPMaxQueueSize: 16}, version, reg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(time.Second, zap.NewNop())
	push, err := telemetry.StartMetrics(telemetry.Config{OTLPEndpoint: sink.URL, OTLPProtocol: "http/protobuf", OTELServiceName: "itlproxy",
		OTELMetricsExporter: "otlp", OTELMetricExportInterval: 60000, OTELMetricExportTimeout: 1000, OTLPMetricsTemporality: "cumulative"},
		telemetry.MetricsOptions{Gatherer: reg, Registerer: reg, Version: version, Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer push.Shutdown(time.Second)
	descs := make(chan *prometheus.Desc, 256)
	reg.Describe(descs)
	close(descs)
	fqName := regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	var out []string
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		if strings.HasPrefix(m[1], "itlproxy_") {
			out = append(out, m[1])
		}
	}
	if len(out) == 0 {
		t.Fatal("no itlproxy_ family registered")
	}
	return out
}

// everyFamily runs itlproxy with every feature that has metrics on and
// drives what each family counts, then returns the scrape.
func everyFamily(t *testing.T) scrape.Families {
	t.Helper()
	dir := t.TempDir()
	slo := filepath.Join(dir, "slo.yaml")
	if err := os.WriteFile(slo, []byte("default: {ttft: 1s, itl: 30ms, tpot: 30ms, max_gap: 200ms}\n"+
		"classes:\n  interactive: {ttft: 500ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, readFile(t, newPKI(t).caFile), 0o600); err != nil {
		t.Fatal(err)
	}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer collector.Close()

	smooth := make([]time.Duration, 24)
	slow := make([]time.Duration, 24)
	for i := range smooth {
		smooth[i], slow[i] = 5*ms, 60*ms
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Request-Id") {
		case "slow":
			scheduledUpstream{schedule: fixedSchedule(20*ms, slow...)}.ServeHTTP(w, r)
		case "unreadable":
			send := eventWriter(w)
			_ = send(`{"choices":[{"index":0,"delta":{"content":"w"}}]}`) && send(`{not json`) && send("[DONE]")
		case "multitoken":
			// vLLM's continuous usage: each event's cumulative count,
			// two tokens an event.
			send := eventWriter(w)
			for i := 1; i <= 3; i++ {
				if !send(fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":"ab"}}],"usage":{"prompt_tokens":3,"completion_tokens":%d}}`, 2*i)) {
					return
				}
				time.Sleep(5 * ms)
			}
			_ = send("[DONE]")
		default:
			scheduledUpstream{schedule: fixedSchedule(20*ms, smooth...)}.ServeHTTP(w, r)
		}
	}))
	defer up.Close()
	// The upstream twice, under two names, and an address that refuses
	// connections: the proxy balances over them, sets the third aside and
	// sends its requests to the others.
	refusing := freeAddr(t)
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":         up.URL + "," + strings.Replace(up.URL, "127.0.0.1", "localhost", 1) + ",http://" + refusing,
		"ITLPROXY_SLO_FILE":             slo,
		"ITLPROXY_STALL_THRESHOLD":      "40ms",
		"ITLPROXY_TENANT_HEADER":        "X-Team",
		"ITLPROXY_UPSTREAM_CA_FILE":     ca,
		"ITLPROXY_WEB_ENABLE_LIFECYCLE": "true",
		"OTEL_EXPORTER_OTLP_ENDPOINT":   collector.URL,
		"OTEL_METRICS_EXPORTER":         "prometheus,otlp",
	})

	// A session whose second stream is much slower than its first:
	// turns, the session's baseline, its degradation, stalls, breaches;
	// and a session whose first turns another proxy served.
	stream(t, in.proxy, "m1", "smooth", "X-Session-Id", "s1", "X-Team", "team-a", "X-SLO-Class", "interactive")
	streamTurn(t, in.proxy, "m1", "slow", 2, "X-Session-Id", "s1", "X-Team", "team-a")
	streamTurn(t, in.proxy, "m1", "elsewhere", 3, "X-Session-Id", "s2")
	stream(t, in.proxy, "m1", "unreadable")
	stream(t, in.proxy, "m1", "multitoken")
	// llama.cpp server's native API reports each event's tokens and the
	// engine's own timing.
	resp, err := http.Post("http://"+in.proxy+"/completion", "application/json", strings.NewReader(`{"prompt":"p","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// A certificate file that changes into one that cannot be used.
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := postReload(t, in.admin); code != http.StatusInternalServerError {
		t.Errorf("POST /-/reload with an unusable CA file: %d %q, want 500", code, body)
	}
	// Until a request has picked the refusing address first (each picks
	// it with the other at random), and set it aside.
	for i := 0; len(in.scrape().Series("itlproxy_upstream_ejections_total")) == 0; i++ {
		if i == 100 {
			t.Fatal("no request was sent to the refusing address in 100")
		}
		stream(t, in.proxy, "m1", fmt.Sprintf("balanced-%d", i))
	}
	return in.scrape()
}
