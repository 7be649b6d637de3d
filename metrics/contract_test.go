package metrics

import (
	"fmt"
	"maps"
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
// type, the label names of its series, and what its Help must say (where
// its clock starts and stops, or what it counts).
type family struct {
	name   string
	typ    dto.MetricType
	labels []string // sorted
	help   []string
}

// contract lists every family itlproxy exports. The band, outcome and
// reason lists and the thresholds are taken from the code, so that the
// Help cannot drift from what the code does.
var contract = []family{
	{"itlproxy_time_to_first_token_seconds", typeHistogram, endpointModel, []string{
		"from the proxy receiving the request headers (t0)",
		"to the first token-bearing SSE event (or NDJSON line) fully read from the upstream",
		"for a Realtime API response (endpoint realtime), from the client's response.create passing the proxy",
		"to the response's first output delta",
		"One observation per stream that produced a token"}},
	{"itlproxy_inter_token_latency_seconds", typeHistogram, endpointModel, []string{
		"the gap between two consecutive token-bearing SSE events (or NDJSON lines, or output deltas of a Realtime API response) of a stream",
		"each stamped when fully read from the upstream",
		"One observation per gap", "in the same read are 0 s apart"}},
	{"itlproxy_inter_token_latency_by_position_seconds", typeHistogram, []string{"endpoint", "model", "position"}, []string{
		"position is the band " + bandList(positionBands),
		"of the output position of the token event that ends the gap",
		"Same gaps and clock as itlproxy_inter_token_latency_seconds; " + coarseBuckets}},
	{"itlproxy_time_per_output_token_seconds", typeHistogram, endpointModel, []string{
		"the time from a stream's first token-bearing event to its last", "divided by N - 1",
		"One observation per stream with N >= 2, when it ends"}},
	{"itlproxy_time_per_output_token_by_context_seconds", typeHistogram, []string{"context", "endpoint", "model"}, []string{
		"Time per output token by the length of the stream's context",
		"context is the band (" + contextBandsHelp() + ") of the input tokens the upstream reported, cached ones included",
		"Anthropic's input_tokens + cache_read_input_tokens + cache_creation_input_tokens",
		"or " + contextUnknown + " when it reported none",
		"each one in exactly one band; " + coarseBuckets}},
	{"itlproxy_request_duration_seconds", typeHistogram, []string{"endpoint", "model", "streaming"}, []string{
		"from the proxy receiving the request headers (t0)",
		"to the last byte of the response handed to the client, or to the request failing",
		"Every request, streamed or not"}},
	{"itlproxy_requests_total", typeCounter, []string{"code", "endpoint", "model", "streaming", "tenant"}, []string{
		"counted when the response ends", "by the status returned to the client",
		"499: the client went away before any response"}},
	{"itlproxy_streams_total", typeCounter, []string{"endpoint", "model", "outcome", "tenant"}, append([]string{"Streams ended, by outcome",
		"whose end marker arrived", "is " + OutcomeCompleted + " even if the client leaves before the connection ends"},
		explained(OutcomeCompleted, OutcomeClientCanceled, OutcomeUpstreamError, OutcomeRejected, OutcomeIdleTimeout, OutcomeIncomplete)...)},
	{"itlproxy_output_tokens_total", typeCounter, endpointModelTenant, []string{
		"Output tokens, counted when a response ends", "usage.completion_tokens",
		"output_tokens from the Responses and Messages APIs",
		"else, for streams, the number of token-bearing events"}},
	{"itlproxy_input_tokens_total", typeCounter, endpointModelTenant, []string{
		"Input (prompt) tokens", "when it reported usage", "cached or not", "usage.prompt_tokens",
		"input_tokens of the Responses API", "Anthropic's input_tokens + cache_read_input_tokens + cache_creation_input_tokens"}},
	{"itlproxy_active_streams", typeGauge, endpointModel, []string{
		"Streams in flight", "from the proxy receiving a stream request's headers",
		"the upstream's event-stream headers", "to the end of the response"}},
	{"itlproxy_parse_failures_total", typeCounter, []string{"endpoint", "model", "reason"}, []string{
		"could not read, by reason " + listed(ParseInvalidJSON, ParseEventTooLarge, ParseTruncated, ParseBodyTooLarge, ParseEncoded, ParseInvalidFrame),
		"The bytes were forwarded unchanged"}},
	{"itlproxy_slo_breaches_total", typeCounter, classModelSLOTenant, []string{
		"Observations over the objective of the stream's model and service class",
		"slo=" + SLOTTFT + " once per stream whose time to first token exceeds it",
		SLOITL + " once per gap that exceeds it",
		SLOTPOT + " once per stream whose time per output token exceeds it",
		SLOMaxGap + " once per stream whose longest gap exceeds it"}},
	{"itlproxy_slo_observations_total", typeCounter, classModelSLOTenant, []string{
		"Observations judged against an objective of the stream's model and service class",
		"slo=" + SLOTTFT + " once per stream that produced a token", SLOITL + " once per gap",
		SLOTPOT + " once per stream with a time per output token", SLOMaxGap + " once per stream with a gap",
		"counted only where the objective exists"}},
	{"itlproxy_slo_objective_seconds", typeGauge, []string{"class", "model", "slo"}, []string{
		"The configured objective of each model label value, service class and kind " + listed(SLOTTFT, SLOITL, SLOTPOT, SLOMaxGap),
		"absent where there is none"}},
	{"itlproxy_streams_judged_total", typeCounter, []string{"class", "model", "tenant", "verdict"}, []string{
		"Streams judged against the objectives of their model and service class when they end",
		"every outcome but " + OutcomeClientCanceled, "where a ttft, tpot or max_gap objective is set",
		VerdictMet + ": the stream produced a token", "did not end in " + OutcomeUpstreamError + ", " + OutcomeIdleTimeout + " or " + OutcomeRejected,
		"else " + VerdictMissed}},
	{"itlproxy_goodput_tokens_total", typeCounter, []string{"class", "model", "tenant"}, []string{
		"Output tokens of the streams that met their objectives", "counted when they end"}},
	{"itlproxy_inter_token_latency_by_load_seconds", typeHistogram, []string{"endpoint", "load", "model"}, []string{
		"Inter-token latency by the load when the gap ended",
		"load is the band " + strings.TrimSuffix(listed(loadBandLabels[:4]...), ")") + ", ..., " + loadBandLabels[9] + ", " + loadBandLabels[10] + ")",
		"the number of streams of the model in flight through this proxy, the stream itself included",
		"Same gaps and clock as itlproxy_inter_token_latency_seconds; " + coarseBuckets,
		"every ITL objective a bound", "A band's series appear when the load first reaches it"}},
	{"itlproxy_time_to_first_token_by_load_seconds", typeHistogram, []string{"endpoint", "load", "model"}, []string{
		"Time to first token by the load when the stream started",
		"Same clock as itlproxy_time_to_first_token_seconds; " + coarseBuckets}},
	{"itlproxy_load_band_upper_streams", typeGauge, []string{"load"}, []string{
		"Each load band's upper bound in streams (+Inf for " + loadBandLabels[10] + ")"}},
	{"itlproxy_stalls_total", typeCounter, endpointModel, []string{
		"Gaps between consecutive token-bearing events longer than the stall threshold (ITLPROXY_STALL_THRESHOLD)"}},
	{"itlproxy_stream_max_gap_seconds", typeHistogram, endpointModel, []string{
		"Each stream's longest gap between consecutive token-bearing events", "observed when the stream ends"}},
	{"itlproxy_stream_gap_spread_ratio", typeHistogram, endpointModel, []string{
		"its p99 gap divided by its median gap",
		fmt.Sprintf("when a stream with at least %d gaps ends", minGapsForSpread)}},
	{"itlproxy_time_to_first_token_by_turn_seconds", typeHistogram, []string{"model", "turn"}, []string{
		"Time to first token of streams that carry a session id",
		"by the stream's turn in its session " + bandList(turnBands),
		"from the proxy receiving the request headers to the first token-bearing event"}},
	{"itlproxy_stream_median_gap_by_turn_seconds", typeHistogram, []string{"model", "turn"}, []string{
		"Median gap between token-bearing events of each stream that carries a session id",
		"by the stream's turn in its session " + bandList(turnBands),
		fmt.Sprintf("when a stream with at least %d gaps ends", minGapsForMedian)}},
	{"itlproxy_session_gap_ratio", typeHistogram, []string{"model"}, []string{
		"A stream's median gap divided by its session's baseline",
		fmt.Sprintf("the session's first %d streams", baselineTurns),
		fmt.Sprintf("each later stream with at least %d gaps ends", minGapsForMedian)}},
	{"itlproxy_sessions_degraded_total", typeCounter, []string{"model"}, []string{
		"Sessions counted once",
		"first exceeds the degradation factor (ITLPROXY_SESSION_DEGRADE_FACTOR) times the session's baseline"}},
	{"itlproxy_sessions_tracked", typeGauge, nil, []string{"Sessions the tracker remembers now", "ITLPROXY_SESSION_MAX"}},
	{"itlproxy_session_evictions_total", typeCounter, nil, []string{
		"Live sessions the tracker forgot", "ITLPROXY_SESSION_MAX"}},
	{"itlproxy_tokens_per_event", typeHistogram, endpointModel, []string{
		"Output tokens carried by each token-bearing event", "continuous_usage_stats",
		"final usage divided by its token-bearing events, once per event"}},
	{"itlproxy_inter_token_latency_per_token_seconds", typeHistogram, endpointModel, []string{
		"A gap between token-bearing events divided by the tokens the later event carries",
		"where the upstream reports tokens per event"}},
	{"itlproxy_engine_time_per_output_token_seconds", typeHistogram, endpointModel, []string{
		"Time per output token as the upstream reports it", "Ollama eval_duration / eval_count",
		"llama.cpp server timings.predicted_per_token_ms", "TGI the x-time-per-token response header",
		"it leaves out what the HTTP server, detokenization and the network add"}},
	{"itlproxy_engine_time_to_first_token_seconds", typeHistogram, endpointModel, []string{
		"Time to first token as the upstream reports it", "Ollama load_duration + prompt_eval_duration",
		"llama.cpp server timings.prompt_ms"}},
	{"itlproxy_wire_overhead_ratio", typeHistogram, endpointModel, []string{
		"over the engine's own", "one observation per stream that has both",
		"above 1, the difference is added between the engine and the user"}},
	{"itlproxy_build_info", typeGauge, []string{"goversion", "revision", "version"}, []string{
		"Always 1", "the labels name the running build"}},
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
// Help: "value (".
func explained(values ...string) []string {
	var out []string
	for _, v := range values {
		out = append(out, v+" (")
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
// what it counts, in the words the contract gives. No family's phrases all
// fit another's Help, so a Help given to the wrong family fails too.
func TestHelp(t *testing.T) {
	fs := gather(t, recordEveryFamily(t))
	families := contract
	for _, f := range families {
		help := fs[f.name].GetHelp()
		for _, phrase := range f.help {
			if !strings.Contains(help, phrase) {
				t.Errorf("%s Help does not say %q:\n%s", f.name, phrase, help)
			}
		}
	}
	for _, a := range families {
		for _, b := range families {
			if a.name != b.name && containsAll(fs[b.name].GetHelp(), a.help) {
				t.Errorf("the Help of %s says all %s's Help must: the two cannot be told apart", b.name, a.name)
			}
		}
	}
}

func containsAll(s string, phrases []string) bool {
	for _, p := range phrases {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
