package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The OpenTelemetry GenAI conventions' metrics, which the OTLP push
// derives (cmd/internal/telemetry), say two things /metrics's families do
// not keep: the server that served each point's streams (server.address,
// server.port), which the token clocks' families do not break down by
// when the proxy balances over several; and token usage only as the
// upstream reported it (an instrumentation that cannot obtain the count
// must not report it, while itlproxy_tokens_per_response counts a
// stream's token-bearing events when it reported none). With
// Options.GenAI, each stream's time to first token, gaps and time per
// output token, and each response's reported usage, are observed once
// more into the families below, by upstream label too (the address of
// the server that served it, "" when the proxy does not balance), on a
// registry of their own that /metrics does not serve (GenAIGatherer).
// Their series of a server go with its per-server series.

// GenAISourcePrefix begins the names of the families GenAIGatherer
// gathers: each is the itlproxy family of the same name without
// "genai_", with the upstream label added (and, for the tokens, only the
// usage the upstream reported).
const GenAISourcePrefix = namespace + "_genai_"

// genAISource is the families the GenAI metrics are derived from.
type genAISource struct {
	reg                     *prometheus.Registry
	ttft, itl, tpot, tokens *prometheus.HistogramVec
}

// newGenAISource builds the families, with the buckets of those they
// copy.
func newGenAISource(slos SLOs, itlBounds []float64) (*genAISource, error) {
	g := &genAISource{reg: prometheus.NewRegistry()}
	r := &registrar{reg: g.reg}
	g.ttft = r.histogram("genai_time_to_first_token_seconds", "Time to first token of each stream, by the server that served it.",
		withBounds(ttftBuckets, slos.bounds(SLOTTFT)...), "model", "endpoint", "upstream")
	g.itl = r.histogram("genai_inter_token_latency_seconds", "Inter-token latency of each gap, by the server that served the stream.",
		withBounds(gapBuckets, itlBounds...), "model", "endpoint", "upstream")
	g.tpot = r.histogram("genai_time_per_output_token_seconds", "Time per output token of each stream, by the server that served it.",
		withBounds(tpotBuckets, slos.bounds(SLOTPOT)...), "model", "endpoint", "upstream")
	g.tokens = r.histogram("genai_tokens_per_response", "Tokens of each response by type, as the upstream reported them, by the server that served it.",
		responseTokenBuckets, "model", "endpoint", "type", "upstream")
	return g, r.err
}

// GenAIGatherer gathers the families the OTLP push derives the GenAI
// conventions' metrics from; nil without Options.GenAI.
func (m *Metrics) GenAIGatherer() prometheus.Gatherer {
	if m.genAI == nil {
		return nil
	}
	return m.genAI.reg
}

// genAIStream is a stream's observers of the GenAI families, resolved for
// its server.
type genAIStream struct {
	ttft, itl prometheus.Observer
}

// genAIObservers returns the stream's observers of the GenAI families,
// resolved at their first use for the server it was sent to (a label
// whose series stay while the stream counts on it); nil without them.
func (s *Stream) genAIObservers() *genAIStream {
	if s.gen == nil && s.m.genAI != nil {
		l := s.labels
		s.gen = &genAIStream{
			ttft: s.m.genAI.ttft.WithLabelValues(l.Model, l.Endpoint, s.ids.Upstream),
			itl:  s.m.genAI.itl.WithLabelValues(l.Model, l.Endpoint, s.ids.Upstream),
		}
	}
	return s.gen
}

// ReportedTokens observes a response's token usage as the upstream
// reported it, served by the server labelled upstream ("": the proxy does
// not balance); negative counts were not reported, and are not observed.
// A response of a server whose series have gone (it left the set, and no
// stream counts on it) is not observed, rather than given series no one
// deletes.
func (m *Metrics) ReportedTokens(l Labels, upstream string, input, output int64) {
	if m.genAI == nil || !m.upstreamKnown(upstream) {
		return
	}
	if input >= 0 {
		m.genAI.tokens.WithLabelValues(l.Model, l.Endpoint, TokenInput, upstream).Observe(float64(input))
	}
	if output >= 0 {
		m.genAI.tokens.WithLabelValues(l.Model, l.Endpoint, TokenOutput, upstream).Observe(float64(output))
	}
}

// forget deletes the series of a server that left.
func (g *genAISource) forget(label string) {
	if g == nil {
		return
	}
	match := prometheus.Labels{"upstream": label}
	for _, h := range []*prometheus.HistogramVec{g.ttft, g.itl, g.tpot, g.tokens} {
		h.DeletePartialMatch(match)
	}
}

// upstreamKnown reports whether label has series: "" (no balancing), a
// server in the set, or one with streams still counted on it.
func (m *Metrics) upstreamKnown(label string) bool {
	if label == "" || label == upstreamOther {
		return true
	}
	m.up.mu.Lock()
	defer m.up.mu.Unlock()
	return m.up.present[label] || m.up.state[label] != nil
}
