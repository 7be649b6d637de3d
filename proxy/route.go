package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
)

func (p *Proxy) routes() chi.Router {
	r := chi.NewRouter()
	routes := p.cfg.Routes
	if routes == nil {
		routes = DefaultRoutes
	}
	for _, rt := range routes {
		r.Post(rt.Path, p.measured(rt.Path, apis[rt.API]))
	}
	r.Get(realtimePath, p.realtime)
	// Everything else is forwarded and counted, not measured: the proxy
	// port serves nothing of its own.
	r.NotFound(p.passthrough)
	r.MethodNotAllowed(p.passthrough)
	return r
}

// measured serves an API whose responses are measured, on route: it
// reads the body (up to the bound) for the model and the stream flag, then
// forwards the same bytes.
func (p *Proxy) measured(route string, api routeAPI) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t0 := startOf(r)
		body, err := readBody(r, p.cfg.MaxRequestBytes)
		if err != nil {
			p.refuse(w, r, p.labels(r, "", api.endpoint), t0, err)
			return
		}
		endpoint, info := api.inspect(body)
		if info.Model == "" {
			info.Model = p.cfg.DefaultModel
		}
		req := request{t0: t0, labels: p.labels(r, info.Model, endpoint), endpoint: endpoint, route: route,
			model: info.Model, user: info.User, wantStream: info.Stream, turn: info.Turn}
		if p.cfg.InjectUsage && info.Stream && (endpoint == events.ChatCompletions || endpoint == events.Completions) {
			if patched := events.WithUsageRequested(body); patched != nil {
				body, req.usageInjected = patched, true
				// The proxy must read the stream to take out what asking
				// added, and it does not decode: the upstream is asked for
				// it uncompressed (identity is acceptable to every client).
				r.Header.Del("Accept-Encoding")
				if r.ContentLength >= 0 {
					r.ContentLength = int64(len(body))
					r.Header.Set("Content-Length", strconv.Itoa(len(body)))
				}
			}
		}
		req.body = &heldBody{b: body}
		r.Body = req.body.reader()
		r.GetBody = func() (io.ReadCloser, error) { return req.body.reader(), nil }
		p.forward(w, r, p.newExchange(r, req))
	}
}

// passthrough serves every other request: forwarded as it comes, counted
// under endpoint "other".
func (p *Proxy) passthrough(w http.ResponseWriter, r *http.Request) {
	t0 := startOf(r)
	labels := p.labels(r, "", events.Other)
	if r.ContentLength > p.cfg.MaxRequestBytes {
		p.refuse(w, r, labels, t0, errBodyTooLarge)
		return
	}
	p.forward(w, r, p.newExchange(r, request{t0: t0, labels: labels, endpoint: events.Other}))
}

// labels are a request's bounded labels: its model (from the body, "" when
// unknown), its endpoint, and the service class and tenant its headers
// name.
func (p *Proxy) labels(r *http.Request, model string, endpoint events.Endpoint) metrics.Labels {
	return p.metrics.RequestLabels(model, endpoint.Label(), firstValue(r.Header, p.classKey), firstValue(r.Header, p.tenantKey))
}

// firstValue is the first value of a header whose key is canonical already
// ("" for none): a lookup without the canonicalization Header.Get does.
func firstValue(h http.Header, key string) string {
	if key == "" {
		return ""
	}
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

var errBodyTooLarge = errors.New("request body too large")

// readBody reads the whole request body, refusing one over max bytes
// without reading more than max+1 of it.
func readBody(r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, errBodyTooLarge
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(buf.Len()) > max {
		return nil, errBodyTooLarge
	}
	return buf.Bytes(), nil
}

// refuse answers a request the proxy does not forward: one that came back
// to it (loop.go), or whose body cannot be forwarded: too large,
// unreadable, or chunked on a request that asks to switch protocols
// (smuggling.go).
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, labels metrics.Labels, t0 time.Time, err error) {
	ex := p.newExchange(r, request{t0: t0, labels: labels, endpoint: events.Other})
	defer func() { ex.finish(r.Context().Err() != nil, p.log) }()
	w.Header().Set(RequestIDHeader, ex.sink.ids.Request)
	switch {
	case errors.Is(err, errLoop):
		ex.code = http.StatusLoopDetected
		writeError(w, ex.code, "upstream_error", "loop_detected", "itlproxy: "+err.Error())
	case errors.Is(err, errUpgradeWithBody):
		ex.code = http.StatusBadRequest
		w.Header().Set("Connection", "close")
		writeError(w, ex.code, "invalid_request_error", "upgrade_with_body", "itlproxy: "+err.Error())
	case errors.Is(err, errBodyTooLarge):
		ex.code = http.StatusRequestEntityTooLarge
		// The rest of the body is not read: close the connection rather
		// than drain it.
		w.Header().Set("Connection", "close")
		writeError(w, ex.code, "invalid_request_error", "request_too_large",
			"itlproxy: the request body is larger than ITLPROXY_MAX_REQUEST_BYTES allows")
	case r.Context().Err() != nil:
		ex.code = statusClientClosed
	default:
		ex.code = http.StatusBadRequest
		writeError(w, ex.code, "invalid_request_error", "unreadable_body",
			"itlproxy: the request body could not be read")
	}
}
