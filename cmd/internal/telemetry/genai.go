package telemetry

import (
	"net"
	"path"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
)

// The GenAI semantic conventions' metrics, as version 1.41.0 of the
// OpenTelemetry semantic conventions (the last to hold them) defines them,
// each derived at push time from the family the proxy keeps for it
// (metrics.GenAISourcePrefix: the itlproxy family that measures it, by
// the server that served each stream, and the token usage only as the
// upstream reported it): the same observations, buckets and exemplars,
// under the convention's name, unit and attributes. docs/otlp.md says how
// each maps.
var genAIFamilies = map[string]struct{ name, unit string }{
	metrics.GenAISourcePrefix + "time_to_first_token_seconds":   {genaiconv.ClientOperationTimeToFirstChunk{}.Name(), genaiconv.ClientOperationTimeToFirstChunk{}.Unit()},
	metrics.GenAISourcePrefix + "inter_token_latency_seconds":   {genaiconv.ClientOperationTimePerOutputChunk{}.Name(), genaiconv.ClientOperationTimePerOutputChunk{}.Unit()},
	metrics.GenAISourcePrefix + "time_per_output_token_seconds": {genaiconv.ServerTimePerOutputToken{}.Name(), genaiconv.ServerTimePerOutputToken{}.Unit()},
	metrics.GenAISourcePrefix + "tokens_per_response":           {genaiconv.ClientTokenUsage{}.Name(), genaiconv.ClientTokenUsage{}.Unit()},
}

// genAIScope is the instrumentation scope of the GenAI metrics, whose
// schema is the conventions' version.
func genAIScope(version string) instrumentation.Scope {
	return instrumentation.Scope{Name: "github.com/itlproxy/itlproxy", Version: version, SchemaURL: semconv.SchemaURL}
}

// EndpointAttr is the attribute that keeps each GenAI series one itlproxy
// series: two APIs of the same operation and provider (chat completions
// and the Responses API) would otherwise give two points of one series.
const EndpointAttr = "itlproxy.endpoint"

// GenAI is what the GenAI metrics say of the upstream: the host and port
// requests go to (server.address, server.port), and the provider
// (gen_ai.provider.name).
type GenAI struct {
	// ServerAddress and ServerPort are the upstream URL's, the server of
	// every stream when the proxy does not balance; when it does, each
	// point's are those of the server that served its streams (its
	// upstream label). No server attributes without an address.
	ServerAddress string
	ServerPort    int
	// Provider is gen_ai.provider.name for every request; "" derives it
	// (provider).
	Provider string
}

// derive returns the GenAI metrics of the bridged metrics ms.
func (g GenAI) derive(ms []metricdata.Metrics) []metricdata.Metrics {
	var out []metricdata.Metrics
	for _, m := range ms {
		conv, ok := genAIFamilies[m.Name]
		data, isExp := m.Data.(metricdata.ExponentialHistogram[float64])
		if !ok || !isExp {
			continue // every itlproxy histogram is native
		}
		points := make([]metricdata.ExponentialHistogramDataPoint[float64], 0, len(data.DataPoints))
		for _, p := range data.DataPoints {
			if attrs, ok := g.attributes(p.Attributes); ok {
				p.Attributes = attrs
				points = append(points, p)
			}
		}
		if len(points) > 0 {
			out = append(out, metricdata.Metrics{Name: conv.name, Description: m.Description, Unit: conv.unit,
				Data: metricdata.ExponentialHistogram[float64]{DataPoints: points, Temporality: data.Temporality}})
		}
	}
	return out
}

// attributes maps an itlproxy series' labels to the conventions'
// attributes: the endpoint to the operation and the provider, the model
// label to the request model (none for _unknown, a request that named no
// model), the type label to the token type, the upstream label to the
// server (none for _other, the servers past the label cap); false for a
// series of no measured API.
func (g GenAI) attributes(labels attribute.Set) (attribute.Set, bool) {
	label, _ := labels.Value("endpoint")
	e, ok := events.EndpointOf(label.AsString())
	if !ok || e == events.Other {
		return attribute.Set{}, false
	}
	kvs := []attribute.KeyValue{
		semconv.GenAIOperationNameKey.String(e.GenAIOperation()),
		semconv.GenAIProviderNameKey.String(g.provider(e)),
		attribute.String(EndpointAttr, label.AsString()),
	}
	if model, ok := labels.Value("model"); ok && model.AsString() != metrics.ModelUnknown {
		kvs = append(kvs, semconv.GenAIRequestModelKey.String(model.AsString()))
	}
	if typ, ok := labels.Value("type"); ok {
		kvs = append(kvs, semconv.GenAITokenTypeKey.String(typ.AsString()))
	}
	if host, port := g.server(labels); host != "" {
		kvs = append(kvs, semconv.ServerAddressKey.String(host), semconv.ServerPortKey.Int(port))
	}
	return attribute.NewSet(kvs...), true
}

// server is the host and port of the server a series' streams went to:
// its upstream label's (host:port), or the upstream URL's for a series of
// no balancing; "" when it is not known.
func (g GenAI) server(labels attribute.Set) (string, int) {
	label, _ := labels.Value("upstream")
	if label.AsString() == "" {
		return g.ServerAddress, g.ServerPort
	}
	host, p, err := net.SplitHostPort(label.AsString())
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil {
		return "", 0 // _other
	}
	return host, port
}

// provider is the gen_ai.provider.name of a request to endpoint e: the
// one configured; else the provider whose API host the upstream is; else
// the one whose API the endpoint speaks, as a client library of that API
// would name it (the conventions' "instrumentation's best knowledge"):
// OpenAI's for the OpenAI-compatible routes, Anthropic's for its Messages
// API, a native server's own name (no well-known value) for its API.
func (g GenAI) provider(e events.Endpoint) string {
	if g.Provider != "" {
		return g.Provider
	}
	if p := hostProvider(g.ServerAddress); p != "" {
		return p
	}
	switch e {
	case events.Messages:
		return semconv.GenAIProviderNameAnthropic.Value.AsString()
	case events.OllamaChat, events.OllamaGenerate:
		return "ollama"
	case events.TGIGenerate:
		return "tgi"
	case events.LlamaCppCompletion:
		return "llama_cpp"
	case events.SGLangGenerate:
		return "sglang"
	}
	return semconv.GenAIProviderNameOpenAI.Value.AsString()
}

// hostProvider is the provider whose API is served at host, "" for a
// host that is no well-known provider's.
func hostProvider(host string) string {
	host = strings.ToLower(host)
	for _, p := range providerHosts {
		if ok, _ := path.Match(p.pattern, host); ok {
			return p.provider.Value.AsString()
		}
	}
	return ""
}

// providerHosts are the API hosts of the conventions' well-known
// providers, as path.Match patterns (a * spans dots too).
var providerHosts = []struct {
	pattern  string
	provider attribute.KeyValue
}{
	{"api.openai.com", semconv.GenAIProviderNameOpenAI},
	{"*.openai.azure.com", semconv.GenAIProviderNameAzureAIOpenAI},
	{"api.anthropic.com", semconv.GenAIProviderNameAnthropic},
	{"generativelanguage.googleapis.com", semconv.GenAIProviderNameGCPGemini},
	{"aiplatform.googleapis.com", semconv.GenAIProviderNameGCPVertexAI},
	{"*-aiplatform.googleapis.com", semconv.GenAIProviderNameGCPVertexAI},
	{"bedrock-runtime.*.amazonaws.com", semconv.GenAIProviderNameAWSBedrock},
	{"api.mistral.ai", semconv.GenAIProviderNameMistralAI},
	{"api.groq.com", semconv.GenAIProviderNameGroq},
	{"api.deepseek.com", semconv.GenAIProviderNameDeepseek},
	{"api.x.ai", semconv.GenAIProviderNameXAI},
	{"api.perplexity.ai", semconv.GenAIProviderNamePerplexity},
	{"api.cohere.com", semconv.GenAIProviderNameCohere},
	{"*.ml.cloud.ibm.com", semconv.GenAIProviderNameIBMWatsonxAI},
}
