package metrics

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

const (
	typeHistogram = dto.MetricType_HISTOGRAM
	typeCounter   = dto.MetricType_COUNTER
	typeGauge     = dto.MetricType_GAUGE
)

// family is one exported metric family as the contract states it: its
// type, the label names of its series, what its one-sentence Help must say
// (what it counts or observes, where its clock starts and stops), and what
// its section of docs/metrics.md must say of what the Help leaves out.
type family struct {
	name   string
	typ    dto.MetricType
	labels []string // sorted
	help   []string
	doc    []string
}

// coarseBuckets is what the section of a breakdown says of its classic
// buckets.
const coarseBuckets = "Coarse classic buckets"

// contract lists every family itlproxy exports. The band, outcome and
// reason lists and the thresholds are taken from the code, so that neither
// the Help nor docs/metrics.md can drift from what the code does.
var contract = []family{
	{"itlproxy_time_to_first_token_seconds", typeHistogram, endpointModel, []string{
		"Time to first token of each stream that produced one", "from t0",
		"to its first token-bearing event fully read from the upstream"}, []string{
		"The clock stops at the first token-bearing SSE event (or NDJSON line)",
		"For a Realtime API response (endpoint realtime), it runs instead from the client's response.create passing the proxy",
		"to the response's first output delta"}},
	{"itlproxy_inter_token_latency_seconds", typeHistogram, endpointModel, []string{
		"the gap between two consecutive token-bearing events of a stream",
		"each stamped when fully read from the upstream", "one observation per gap"}, []string{
		"SSE events, NDJSON lines, or the output deltas of a Realtime API response",
		"in the same read are 0 s apart"}},
	{"itlproxy_inter_token_latency_by_position_seconds", typeHistogram, []string{"endpoint", "model", "position"}, []string{
		"Inter-token latency by where the gap falls in its stream",
		"the same gaps and clock as itlproxy_inter_token_latency_seconds"}, []string{
		"position is the band " + bandList(positionBands),
		"of the output position of the token event that ends the gap",
		coarseBuckets, "every ITL objective as a bound"}},
	{"itlproxy_time_per_output_token_seconds", typeHistogram, endpointModel, []string{
		"the time from its first token-bearing event to its last", "divided by its output tokens minus 1",
		"observed when it ends"}, []string{
		"usage.completion_tokens when the upstream reported usage, else the number of token-bearing events",
		"a stream with fewer than 2 has no time per output token and is not observed"}},
	{"itlproxy_time_per_output_token_by_context_seconds", typeHistogram, []string{"context", "endpoint", "model"}, []string{
		"Time per output token by the length of the stream's context",
		"the same observations and clock as itlproxy_time_per_output_token_seconds"}, []string{
		"context is the band (" + contextBandsDoc() + ") of the input tokens the upstream reported, cached ones included",
		"as itlproxy_input_tokens_total counts them",
		"or " + contextUnknown + " when it reported none",
		"each observation is in exactly one band", coarseBuckets, "every TPOT objective as a bound"}},
	{"itlproxy_event_delay_seconds", typeHistogram, []string{"endpoint"}, []string{
		"Time each token-bearing event spent inside the proxy",
		"from the bytes of the read that completed it being available to the proxy to the start of their write to the client"}, []string{
		"what the proxy adds to each token", "the network poller", "itlproxy_client_write_seconds", "every microsecond range"}},
	{"itlproxy_client_write_seconds", typeHistogram, []string{"endpoint"}, []string{
		"Time each write of a stream's bytes to its client took, from its start to its return"}, []string{
		"backpressure", "client_write_wait_seconds", "itlproxy_event_delay_seconds"}},
	{"itlproxy_scheduler_latency_seconds", typeHistogram, nil, []string{
		"Time the proxy's goroutines waited to run once ready", "as the Go runtime samples it"}, []string{
		"/sched/latencies", "at each scrape", "before a read returns", "itlproxy_event_delay_seconds",
		"a quarter of a doubling"}},
	{"itlproxy_upstream_streams_in_flight", typeGauge, []string{"model", "upstream"}, []string{
		"Streams in flight on each upstream endpoint"}, []string{"load band", "its endpoint's count"}},
	{"itlproxy_upstream_time_to_first_token_seconds", typeHistogram, []string{"model", "upstream"}, []string{
		"Time to first token of each stream, from t0", "by the upstream endpoint that served it"}, []string{
		"every TTFT objective as a bound"}},
	{"itlproxy_upstream_inter_token_latency_seconds", typeHistogram, []string{"model", "upstream"}, []string{
		"Inter-token latency of each gap", "by the upstream endpoint that served the stream"}, []string{
		"ITLPROXY_UPSTREAM_MAX_ENDPOINTS", "once its last stream has ended", "every ITL objective as a bound"}},
	{"itlproxy_upstream_streams_total", typeCounter, []string{"model", "outcome", "upstream"}, []string{
		"Streams ended, by the upstream endpoint that served them"}, []string{"retried on another endpoint"}},
	{"itlproxy_upstream_endpoints", typeGauge, nil, []string{"Upstream endpoints the proxy balances over"}, []string{
		"exit 2"}},
	{"itlproxy_upstream_resolve_failures_total", typeCounter, nil, []string{"Resolutions of the upstream's name that failed"}, []string{
		"once per outage"}},
	{"itlproxy_upstream_ejections_total", typeCounter, []string{"upstream"}, []string{
		"refused a connection and was set aside"}, []string{"Passive"}},
	{"itlproxy_request_forward_seconds", typeHistogram, []string{"endpoint"}, []string{
		"Time from t0 to the request written to the upstream"}, []string{
		"the request leg", "every request the upstream received", "a pooled connection"}},
	{"itlproxy_request_duration_seconds", typeHistogram, []string{"endpoint", "model", "streaming"}, []string{
		"from t0", "to the last byte of the response handed to the client, or to the request failing",
		"every request, streamed or not"}, []string{
		"A Realtime API WebSocket's request lasts to the end of the connection"}},
	{"itlproxy_requests_total", typeCounter, []string{"code", "endpoint", "model", "streaming", "tenant"}, []string{
		"counted when the response ends", "by the status returned to the client"}, []string{
		"499: the client went away before any response",
		"A Realtime API WebSocket is counted when the connection ends"}},
	{"itlproxy_streams_total", typeCounter, []string{"endpoint", "model", "outcome", "tenant"}, []string{
		"Streams ended, by outcome"}, append([]string{
		"whose end marker arrived", "is " + OutcomeCompleted + " even if the client leaves before the connection ends",
		"Each response of a Realtime API WebSocket is a stream"},
		explained(OutcomeCompleted, OutcomeClientCanceled, OutcomeUpstreamError, OutcomeRejected, OutcomeIdleTimeout, OutcomeIncomplete)...)},
	{"itlproxy_output_tokens_total", typeCounter, endpointModelTenant, []string{
		"Output tokens, counted when a response ends", "from the usage the upstream reported",
		"else, for streams, the number of token-bearing events"}, []string{
		"usage.completion_tokens", "output_tokens from the Responses and Messages APIs"}},
	{"itlproxy_input_tokens_total", typeCounter, endpointModelTenant, []string{
		"Input (prompt) tokens", "cached or not", "from the usage the upstream reported", "that reported usage"}, []string{
		"usage.prompt_tokens", "input_tokens of the Responses API",
		"Anthropic's input_tokens + cache_read_input_tokens + cache_creation_input_tokens"}},
	{"itlproxy_active_streams", typeGauge, endpointModel, []string{
		"Streams in flight", "from t0", "the upstream's event-stream headers", "to the end of its response"}, []string{
		"from t0 when the request asked for a stream",
		"from its response.created to its response.done"}},
	{"itlproxy_parse_failures_total", typeCounter, []string{"endpoint", "model", "reason"}, []string{
		"could not read, by reason", "forwarded unchanged"}, append([]string{
		"Only the measurement is missing"},
		explained(ParseInvalidJSON, ParseEventTooLarge, ParseTruncated, ParseBodyTooLarge, ParseEncoded, ParseInvalidFrame)...)},
	{"itlproxy_slo_breaches_total", typeCounter, classModelSLOTenant, []string{
		"Observations over the objective of the stream's model and service class"}, []string{
		"slo=" + SLOTTFT + " once per stream whose time to first token exceeds it",
		SLOITL + " once per gap that exceeds it",
		SLOTPOT + " once per stream whose time per output token exceeds it",
		SLOMaxGap + " once per stream whose longest gap exceeds it"}},
	{"itlproxy_slo_observations_total", typeCounter, classModelSLOTenant, []string{
		"Observations judged against an objective of the stream's model and service class",
		"counted only where the objective exists"}, []string{
		"slo=" + SLOTTFT + " once per stream that produced a token", SLOITL + " once per gap",
		SLOTPOT + " once per stream with a time per output token", SLOMaxGap + " once per stream with a gap"}},
	{"itlproxy_slo_objective_seconds", typeGauge, []string{"class", "model", "slo"}, []string{
		"The configured objective of each model label value, service class and kind " + listed(SLOTTFT, SLOITL, SLOTPOT, SLOMaxGap),
		"absent where there is none"}, []string{
		"as each model label value appears", "a reload of the SLO file exports them anew"}},
	{"itlproxy_streams_judged_total", typeCounter, []string{"class", "model", "tenant", "verdict"}, []string{
		"Streams judged against the objectives of their model and service class when they end"}, []string{
		"every outcome but " + OutcomeClientCanceled, "where a ttft, tpot or max_gap objective is set",
		VerdictMet + ": the stream produced a token", "did not end in " + OutcomeUpstreamError + ", " + OutcomeIdleTimeout + " or " + OutcomeRejected,
		"else " + VerdictMissed}},
	{"itlproxy_goodput_tokens_total", typeCounter, []string{"class", "model", "tenant"}, []string{
		"Output tokens of the streams that met their objectives", "counted when they end"}, []string{
		"as itlproxy_output_tokens_total counts them"}},
	{"itlproxy_inter_token_latency_by_load_seconds", typeHistogram, []string{"endpoint", "load", "model"}, []string{
		"Inter-token latency by the load when the gap ended",
		"the same gaps and clock as itlproxy_inter_token_latency_seconds"}, []string{
		"load is the band " + strings.TrimSuffix(listed(loadBandLabels[:4]...), ")") + ", ..., " + loadBandLabels[9] + ", " + loadBandLabels[10] + ")",
		"the number of streams of the model in flight through this proxy when the gap ended, the stream itself included",
		coarseBuckets, "every ITL objective as a bound", "A band's series appear when the load first reaches it"}},
	{"itlproxy_time_to_first_token_by_load_seconds", typeHistogram, []string{"endpoint", "load", "model"}, []string{
		"Time to first token by the load when the stream started",
		"the same clock as itlproxy_time_to_first_token_seconds"}, []string{
		"in flight through this proxy when the stream started, the stream itself included",
		coarseBuckets, "every TTFT objective as a bound"}},
	{"itlproxy_load_band_upper_streams", typeGauge, []string{"load"}, []string{
		"Each load band's upper bound in streams (+Inf for " + loadBandLabels[10] + ")"}, []string{
		"rules can turn a band into a number of streams"}},
	{"itlproxy_stalls_total", typeCounter, []string{"cause", "endpoint", "model"}, []string{
		"Gaps between consecutive token-bearing events longer than the stall threshold (ITLPROXY_STALL_THRESHOLD)", "by cause"}, append([]string{
		"stalls are also events on the request's span", "judged against its own server only"},
		explained(StallPrefill, StallClient, StallUpstream)...)},
	{"itlproxy_stream_max_gap_seconds", typeHistogram, endpointModel, []string{
		"Each stream's longest gap between consecutive token-bearing events", "observed when the stream ends"}, []string{
		coarseBuckets, "every max_gap objective as a bound"}},
	{"itlproxy_stream_gap_spread_ratio", typeHistogram, endpointModel, []string{
		"its p99 gap divided by its median gap",
		fmt.Sprintf("when a stream with at least %d gaps ends", minGapsForSpread)}, []string{
		"the stream's sketch of its gaps", "a smooth stream is near 1"}},
	{"itlproxy_time_to_first_token_by_turn_seconds", typeHistogram, []string{"model", "turn"}, []string{
		"Time to first token by the stream's turn in its conversation", "from t0 to the first token-bearing event"}, []string{
		"turn is the band " + bandList(turnBands) + " of the stream's turn", "read from its request", "session tracker",
		coarseBuckets, "every TTFT objective as a bound"}},
	{"itlproxy_stream_median_gap_by_turn_seconds", typeHistogram, []string{"model", "turn"}, []string{
		"Median gap between token-bearing events of each stream whose turn is known",
		"by its turn in its conversation",
		fmt.Sprintf("when a stream with at least %d gaps ends", minGapsForMedian)}, []string{
		"turn is as in itlproxy_time_to_first_token_by_turn_seconds", "the stream's sketch of its gaps", coarseBuckets}},
	{"itlproxy_session_gap_ratio", typeHistogram, []string{"model"}, []string{
		"A session stream's median gap divided by its session's baseline",
		fmt.Sprintf("each later stream with at least %d gaps ends", minGapsForMedian)}, []string{
		fmt.Sprintf("the session's turns 1 to %d", baselineTurns), "served every baseline turn before it",
		"above 1, the session got slower"}},
	{"itlproxy_session_streams_unjudged_total", typeCounter, []string{"model"}, []string{
		"Session streams not compared with their session's baseline",
		"this proxy did not serve every baseline turn before them"}, []string{
		"session affinity", "itlproxy_session_gap_ratio"}},
	{"itlproxy_sessions_degraded_total", typeCounter, []string{"model"}, []string{
		"Sessions counted once",
		"first exceeds the degradation factor (ITLPROXY_SESSION_DEGRADE_FACTOR) times the session's baseline"}, []string{
		"The baseline is that of itlproxy_session_gap_ratio"}},
	{"itlproxy_sessions_tracked", typeGauge, nil, []string{"Sessions the tracker remembers now", "ITLPROXY_SESSION_MAX"}, []string{
		"the least recently seen goes first", "ITLPROXY_SESSION_TTL"}},
	{"itlproxy_session_evictions_total", typeCounter, nil, []string{
		"Live sessions the tracker forgot", "ITLPROXY_SESSION_MAX"}, []string{
		"The least recently seen session goes first"}},
	{"itlproxy_tokens_per_event", typeHistogram, endpointModel, []string{
		"Output tokens carried by each token-bearing event", "once per event"}, []string{
		"continuous_usage_stats", "final usage divided by its token-bearing events, once per event"}},
	{"itlproxy_tokens_per_response", typeHistogram, []string{"endpoint", "model", "type"}, []string{
		"Tokens of each response by type (" + TokenInput + ", " + TokenOutput + ")", "observed once when it ends",
		"itlproxy_input_tokens_total and itlproxy_output_tokens_total"}, []string{
		"gen_ai.client.token.usage", "one observation per response and type", "never per event",
		"a count the upstream did not report is not observed", coarseBuckets}},
	{"itlproxy_inter_token_latency_per_token_seconds", typeHistogram, endpointModel, []string{
		"A gap between token-bearing events divided by the tokens the later event carries",
		"where the upstream reports tokens per event"}, []string{
		"Not the inter-token latency a reader feels"}},
	{"itlproxy_engine_time_per_output_token_seconds", typeHistogram, endpointModel, []string{
		"Time per output token as the upstream reports it", "from its first decode step to its last"}, []string{
		"Ollama eval_duration / eval_count",
		"llama.cpp server timings.predicted_per_token_ms", "TGI the x-time-per-token response header",
		"it leaves out what the HTTP server, detokenization and the network add"}},
	{"itlproxy_engine_time_to_first_token_seconds", typeHistogram, endpointModel, []string{
		"Time to first token as the upstream reports it", "to the end of the prefill"}, []string{
		"Ollama load_duration + prompt_eval_duration", "llama.cpp server timings.prompt_ms"}},
	{"itlproxy_wire_overhead_ratio", typeHistogram, endpointModel, []string{
		"over the engine's own", "one observation per stream that has both"}, []string{
		"above 1, the difference is added between the engine and the user"}},
	{"itlproxy_build_info", typeGauge, []string{"goversion", "revision", "version"}, []string{
		"Always 1", "the labels name the running build"}, []string{
		"the Go release that built it"}},
}

var (
	endpointModel       = []string{"endpoint", "model"}
	endpointModelTenant = []string{"endpoint", "model", "tenant"}
	classModelSLOTenant = []string{"class", "model", "slo", "tenant"}
)

// listed is values as a Help lists them: "(a, b, c)".
func listed(values ...string) string { return "(" + strings.Join(values, ", ") + ")" }

// bandList lists the bands' labels.
func bandList(bands []band) string {
	var labels []string
	for _, b := range bands {
		labels = append(labels, b.label)
	}
	return listed(labels...)
}

// explained returns, for each value, the start of its explanation in a
// list of docs/metrics.md: "value: ".
func explained(values ...string) []string {
	var out []string
	for _, v := range values {
		out = append(out, v+": ")
	}
	return out
}

// recordEveryFamily drives every recorder path, so that every family has
// a series: two session streams whose second is ten times as slow as the
// first, over every objective and the stall threshold.
func recordEveryFamily(t *testing.T) *prometheus.Registry {
	t.Helper()
	m, reg := newTestMetrics(t, Options{MaxModels: 2, StallThreshold: 50 * time.Millisecond,
		SessionMax: 4, SessionTTL: time.Hour, DegradeFactor: 2,
		SLOs:    SLOs{Default: Objectives{TTFT: time.Second, ITL: 40 * time.Millisecond, TPOT: 30 * time.Millisecond, MaxGap: time.Second}},
		Version: "1.2.3", Revision: "abc", GoVersion: "go1.26"})
	l := m.RequestLabels("m", "chat_completions", "", "")
	for _, gap := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond} {
		s := m.StartStream(l, IDs{Request: "r", Session: "s"})
		s.FirstToken(2 * time.Second)
		for range minGapsForSpread {
			s.Gap(gap, 2)
		}
		s.EventTokens(2)
		s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: 50 * time.Millisecond})
	}
	// A session whose first turns another proxy served: unjudged.
	s := m.StartTurn(l, IDs{Request: "r", Session: "elsewhere"}, 4)
	s.FirstToken(time.Second)
	s.OwnDelay(20 * time.Microsecond)
	now := time.Now()
	s.ClientWrite(now, now.Add(40*time.Microsecond))
	m.RequestForwarded(l.Endpoint, 300*time.Microsecond)
	// A stream balanced to an upstream endpoint.
	m.UpstreamsChanged([]string{"10.0.0.1:8000"}, nil)
	m.UpstreamResolveFailed()
	m.UpstreamEjected("10.0.0.1:8000")
	s.SetUpstream("10.0.0.1:8000")
	for range minGapsForMedian {
		s.Gap(10*time.Millisecond, 0)
	}
	s.End(StreamEnd{Outcome: OutcomeCompleted, TPOT: -1})
	m.Engine(l, 40*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond)
	m.Tokens(l, 5, 7)
	m.Request(l, true, 200, time.Second)
	m.ParseFailure(l, ParseTruncated)
	return reg
}

// TestFamilies: exactly the families of the contract are exported, each
// with its type and the label names of its series.
func TestFamilies(t *testing.T) {
	fs := gather(t, recordEveryFamily(t))
	want := map[string]family{}
	for _, f := range contract {
		want[f.name] = f
	}
	for _, name := range slices.Sorted(maps.Keys(fs)) {
		if _, ok := want[name]; !ok {
			t.Errorf("%s is exported, and not in the contract", name)
		}
	}
	for name, f := range want {
		got := fs[name]
		if got == nil {
			t.Errorf("%s is not exported", name)
			continue
		}
		if got.GetType() != f.typ {
			t.Errorf("%s is a %v, want a %v", name, got.GetType(), f.typ)
		}
		for _, m := range got.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
			if !slices.Equal(labels, f.labels) {
				t.Errorf("%s series labels %q, want %q", name, labels, f.labels)
			}
		}
	}
}

// TestHelp: every family's Help says where its clock starts and stops, or
// what it counts, in the words the contract gives, and its section of
// docs/metrics.md says what the contract gives for it. No family's phrases
// all fit another's Help and section, so a Help or a section given to the
// wrong family fails too.
func TestHelp(t *testing.T) {
	fs := gather(t, recordEveryFamily(t))
	sections := docSections(t)
	families := contract
	for _, f := range families {
		help := fs[f.name].GetHelp()
		for _, phrase := range f.help {
			if !strings.Contains(help, phrase) {
				t.Errorf("%s Help does not say %q:\n%s", f.name, phrase, help)
			}
		}
		section, ok := sections[f.name]
		if !ok {
			t.Errorf("%s has no section in %s", f.name, metricsDoc)
		}
		for _, phrase := range f.doc {
			if !strings.Contains(section, phrase) {
				t.Errorf("%s's section of %s does not say %q:\n%s", f.name, metricsDoc, phrase, section)
			}
		}
	}
	for _, a := range families {
		for _, b := range families {
			if a.name != b.name && containsAll(fs[b.name].GetHelp(), a.help) && containsAll(sections[b.name], a.doc) {
				t.Errorf("the Help and section of %s say all %s's must: the two cannot be told apart", b.name, a.name)
			}
		}
	}
}

// metricsDoc is the reference of the families, whose hand-written sections
// hold what each Help leaves out.
const metricsDoc = "../docs/metrics.md"

// markdownLink is a link of Markdown: its text, then its target.
var markdownLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// docSections reads the section of each family in metricsDoc (the
// "### itlproxy_..." sections after the generated index, up to the next
// "## " heading) as plain text: links become their text, code is
// unquoted, and every run of white space is one space.
func docSections(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- generated:families:end -->\n")
	if !ok {
		t.Fatalf("%s has no end of the generated families", metricsDoc)
	}
	rest, _, _ = strings.Cut(rest, "\n## ")
	out := map[string]string{}
	for _, part := range strings.Split(rest, "\n### ")[1:] {
		name, text, _ := strings.Cut(part, "\n")
		text = strings.ReplaceAll(markdownLink.ReplaceAllString(text, "$1"), "`", "")
		out[strings.TrimSpace(name)] = strings.Join(strings.Fields(text), " ")
	}
	return out
}

func containsAll(s string, phrases []string) bool {
	for _, p := range phrases {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
