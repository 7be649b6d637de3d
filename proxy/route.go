package proxy

import (
	"bytes"
	"context"
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
		r.Post(rt.Path, p.measured(apis[rt.API]))
	}
	r.Get(realtimePath, p.realtime)
	// Everything else is forwarded and counted, not measured: the proxy
	// port serves nothing of its own.
	r.NotFound(p.passthrough)
	r.MethodNotAllowed(p.passthrough)
	return r
}

// measured serves an API whose responses are measured: it reads the body
// (up to the bound) for the model and the stream flag, then forwards the
// same bytes.
func (p *Proxy) measured(api routeAPI) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		body, err := readBody(r, p.cfg.MaxRequestBytes)
		if err != nil {
			p.refuseBody(w, r, p.labels(r, "", api.endpoint), t0, err)
			return
		}
		endpoint, info := api.inspect(body)
		if info.Model == "" {
			info.Model = p.cfg.DefaultModel
		}
		injected := false
		if p.cfg.InjectUsage && info.Stream && (endpoint == events.ChatCompletions || endpoint == events.Completions) {
			if patched := events.WithUsageRequested(body); patched != nil {
				body, injected = patched, true
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
		held := &heldBody{b: body}
		r.Body = held.reader()
		r.GetBody = func() (io.ReadCloser, error) { return held.reader(), nil }
		if !partExchange.on() {
			p.bare(w, r)
			return
		}
		ex := p.begin(r, p.labels(r, info.Model, endpoint), t0, endpoint, info.Model, info.User, info.Stream)
		ex.usageInjected = injected
		ex.requestBody = held
		p.forward(w, r, ex)
	}
}

// passthrough serves every other request: forwarded as it comes, counted
// under endpoint "other".
func (p *Proxy) passthrough(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	labels := p.labels(r, "", events.Other)
	if r.ContentLength > p.cfg.MaxRequestBytes {
		p.refuseBody(w, r, labels, t0, errBodyTooLarge)
		return
	}
	if !partExchange.on() {
		p.bare(w, r)
		return
	}
	p.forward(w, r, p.begin(r, labels, t0, events.Other, "", "", false))
}

// labels are a request's bounded labels: its model (from the body, "" when
// unknown), its endpoint, and the service class and tenant its headers
// name.
func (p *Proxy) labels(r *http.Request, model string, endpoint events.Endpoint) metrics.Labels {
	return p.rec.RequestLabels(model, endpoint.Label(), firstValue(r.Header, p.classKey), firstValue(r.Header, p.tenantKey))
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

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, ex *exchange) {
	// finish runs even when ReverseProxy aborts the response with
	// http.ErrAbortHandler: a stream cut mid-way is recorded too.
	defer func() { ex.finish(r.Context().Err() != nil, p.log) }()
	if partRecorder.on() {
		ex.recorder = p.cfg.Recorder
	}
	ctx := r.Context()
	// A measured route's body was read whole and is held; any other is
	// still on its way from the client (duplex.go).
	body := p.fullDuplex(w, r, ex.requestBody != nil)
	if body != nil {
		ctx = context.WithValue(ctx, clientBodyKey{}, body)
		defer body.abandon(w)
	}
	if p.cfg.StreamIdleTimeout > 0 {
		// The outbound request's context, which the idle timer cancels.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		ex.cancelUpstream = cancel
	}
	out := r.WithContext(context.WithValue(ctx, exchangeKey{}, ex))
	if body != nil {
		out.Body = body
	}
	p.rp.ServeHTTP(w, out)
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

// refuseBody answers a request whose body cannot be forwarded: too large,
// unreadable, or framed ambiguously (or in a way the guard could not
// follow: framing.go).
func (p *Proxy) refuseBody(w http.ResponseWriter, r *http.Request, labels metrics.Labels, t0 time.Time, err error) {
	ex := p.begin(r, labels, t0, events.Other, "", "", false)
	defer func() { ex.finish(r.Context().Err() != nil, p.log) }()
	w.Header().Set(RequestIDHeader, ex.ids.Request)
	switch {
	case errors.Is(err, errAmbiguousFraming), errors.Is(err, errUnfollowedFraming):
		ex.code = http.StatusBadRequest
		w.Header().Set("Connection", "close")
		writeError(w, ex.code, "invalid_request_error", "ambiguous_framing", "itlproxy: "+err.Error())
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
