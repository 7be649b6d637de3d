package proxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/itlproxy/itlproxy/proxy/events"
)

// Route maps a request path to the API the proxy measures on it. Servers
// mounted under other paths (a gateway's /ollama/api/chat, a TGI behind
// /tgi/) are measured by naming their paths (Config.Routes).
type Route struct {
	Path string
	API  string // a key of apis
}

// routeAPI is what a route serves: the endpoint whose reader measures it
// (or, for a path two servers share, that the body tells it), and how a
// request says it wants a stream.
type routeAPI struct {
	endpoint events.Endpoint
	// byBody: TGI's or SGLang's /generate, as the body says (generateAPI);
	// endpoint is unused.
	byBody bool
	stream streamRule
}

type streamRule uint8

const (
	streamIfAsked  streamRule = iota // "stream": true
	streamUnlessNo                   // unless "stream": false (Ollama)
	streamAlways                     // the path streams (TGI's /generate_stream)
)

// apis are the API names a route may name.
var apis = map[string]routeAPI{
	"chat_completions":    {endpoint: events.ChatCompletions},
	"completions":         {endpoint: events.Completions},
	"responses":           {endpoint: events.Responses},
	"messages":            {endpoint: events.Messages},
	"ollama_chat":         {endpoint: events.OllamaChat, stream: streamUnlessNo},
	"ollama_generate":     {endpoint: events.OllamaGenerate, stream: streamUnlessNo},
	"tgi_generate":        {endpoint: events.TGIGenerate},
	"tgi_generate_stream": {endpoint: events.TGIGenerate, stream: streamAlways},
	"llamacpp_completion": {endpoint: events.LlamaCppCompletion},
	"sglang_generate":     {endpoint: events.SGLangGenerate},
	"generate":            {byBody: true},
}

// DefaultRoutes are the paths each server serves its API on. TGI and
// SGLang both serve /generate: "generate" tells them apart by the
// request body (generateAPI); a deployment that runs only one of them can
// name it instead.
var DefaultRoutes = []Route{
	{"/v1/chat/completions", "chat_completions"},
	{"/v1/completions", "completions"},
	{"/v1/responses", "responses"},
	{"/v1/messages", "messages"},
	{"/api/chat", "ollama_chat"},
	{"/api/generate", "ollama_generate"},
	{"/generate_stream", "tgi_generate_stream"},
	{"/generate", "generate"},
	{"/completion", "llamacpp_completion"},
	{"/completions", "llamacpp_completion"},
}

// ParseRoutes reads a comma-separated list of path=api pairs (api one of
// the names in apis) and returns DefaultRoutes with them added, a path
// named again taking its new API.
func ParseRoutes(spec string) ([]Route, error) {
	routes := slices.Clone(DefaultRoutes)
	var errs []error
	for pair := range strings.SplitSeq(spec, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		path, api, _ := strings.Cut(pair, "=")
		path, api = strings.TrimSpace(path), strings.TrimSpace(api)
		switch _, known := apis[api]; {
		case !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "{}* "):
			errs = append(errs, fmt.Errorf("%q: the path must start with / and hold no pattern", pair))
			continue
		case !known:
			errs = append(errs, fmt.Errorf("%q: unknown API %q (one of %s)", pair, api, strings.Join(apiNames(), ", ")))
			continue
		}
		if i := slices.IndexFunc(routes, func(r Route) bool { return r.Path == path }); i >= 0 {
			routes[i].API = api
		} else {
			routes = append(routes, Route{path, api})
		}
	}
	return routes, errors.Join(errs...)
}

func apiNames() []string {
	var names []string
	for name := range apis {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// inspect reads a request body for the route's API: the endpoint that
// measures it, the model, and whether it asks for a stream.
func (a routeAPI) inspect(body []byte) (events.Endpoint, events.Request) {
	info, _ := events.InspectRequest(body)
	endpoint := a.endpoint
	if a.byBody {
		endpoint = generateAPI(info)
	}
	switch a.stream {
	case streamUnlessNo:
		info.Stream = !info.NoStream
	case streamAlways:
		info.Stream = true
	}
	return endpoint, info
}

// generateAPI tells TGI's /generate from SGLang's by the request's shape:
// TGI's has "inputs" (and "parameters"), SGLang's "text" or "input_ids".
func generateAPI(info events.Request) events.Endpoint {
	if info.Inputs {
		return events.TGIGenerate
	}
	return events.SGLangGenerate
}
