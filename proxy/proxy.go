package proxy

import (
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/events"
	"github.com/itlproxy/itlproxy/proxy/recorder"
	"github.com/itlproxy/itlproxy/proxy/transport"
	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// Config configures a Proxy.
type Config struct {
	// Upstream is where every request goes: scheme, host and an optional
	// base path that request paths are appended to.
	Upstream *url.URL
	// MaxRequestBytes bounds the request bodies the proxy reads to find the
	// model; larger ones are refused with 413.
	MaxRequestBytes int64
	// MaxEventBytes bounds what the measurement buffers: one SSE event,
	// one non-streamed JSON body, or one Realtime API message (once
	// decompressed). Larger ones pass through unmeasured.
	MaxEventBytes int
	// StreamIdleTimeout ends an event stream whose upstream sends nothing
	// for that long; 0 means never.
	StreamIdleTimeout time.Duration
	// Transport carries requests to the upstream. Nil means
	// transport.NewLean without a timeout.
	Transport http.RoundTripper
	// Servers, when not nil, are the servers the upstream stands for,
	// which the proxy balances over (balance.go), counting each stream on
	// the one that served it; Upstream then gives the scheme, the base path
	// and (for a resolved name) the Host header.
	Servers *upstream.Set
	// SessionHeader names the request header that carries a session id;
	// SessionFromUser falls back to the request body's "user" field.
	SessionHeader   string
	SessionFromUser bool
	// ClassHeader names the request header that carries the service class;
	// TenantHeader the one that carries the tenant ("" for none). The
	// values are bounded by metrics.RequestLabels.
	ClassHeader, TenantHeader string
	// InjectUsage asks for usage on streaming chat and completions
	// requests that do not, and takes it out of the response
	// (events.WithUsageRequested, events.UsageStripper).
	InjectUsage bool
	// Recorder, when not nil, records every stream as it ends, with its
	// gap timeline (proxy/recorder).
	Recorder *recorder.Recorder
	// Tracer, when not nil, starts a span for every request (trace.go).
	Tracer trace.Tracer
	// Routes are the paths whose APIs are measured; nil means
	// DefaultRoutes (ParseRoutes adds to them).
	Routes []Route
	// DefaultModel is the model label of a measured request whose body
	// names none (TGI's and llama.cpp's APIs have no model field), or of a
	// Realtime API connection whose query names none; "" labels it
	// _unknown.
	DefaultModel string
}

// Proxy is the http.Handler of the proxy listener.
type Proxy struct {
	cfg     Config
	metrics *metrics.Metrics
	log     *zap.Logger
	rp      *httputil.ReverseProxy
	router  chi.Router
	// classKey and tenantKey are the canonical forms of the class and
	// tenant headers' names ("" for none).
	classKey, tenantKey string
	// duplexWarning warns once of a writer that is not full duplex.
	duplexWarning sync.Once
	upgrades      upgrades
	// pseudonym marks the requests the proxy forwards (Via), and loopLog
	// bounds the warnings of those that come back (loop.go).
	pseudonym string
	loopLog   logLimit
	// poolLog bounds the warnings of requests the balancer could send
	// nowhere (errors.go).
	poolLog logLimit
	// servers are the records of the upstream servers that streams'
	// stalls are judged against.
	servers *servers
}

// New returns a proxy to cfg.Upstream that records in m and logs to log.
func New(cfg Config, m *metrics.Metrics, log *zap.Logger) *Proxy {
	p := &Proxy{cfg: cfg, metrics: m, log: log, pseudonym: newPseudonym(), servers: newServers(),
		loopLog: logLimit{every: loopLogEvery}, poolLog: logLimit{every: poolLogEvery}}
	if cfg.ClassHeader != "" {
		p.classKey = http.CanonicalHeaderKey(cfg.ClassHeader)
	}
	if cfg.TenantHeader != "" {
		p.tenantKey = http.CanonicalHeaderKey(cfg.TenantHeader)
	}
	rt := cfg.Transport
	if rt == nil {
		rt = transport.NewLean(0, nil)
	}
	if cfg.Servers != nil {
		rt = &balancer{set: cfg.Servers, rt: rt}
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// SetURL also sets the outbound Host to the upstream's, as
			// hosted APIs and TLS virtual hosts require.
			pr.SetURL(cfg.Upstream)
			// Append the client's address to the chain it sent, as nginx's
			// $proxy_add_x_forwarded_for does; the proxy itself trusts none of it.
			if prior := pr.In.Header.Values("X-Forwarded-For"); len(prior) > 0 {
				pr.Out.Header["X-Forwarded-For"] = prior
			}
			pr.SetXForwarded()
			p.markVia(pr.In, pr.Out)
			propagate(pr)
		},
		Transport:      rt,
		BufferPool:     newBufferPool(),
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		ErrorLog:       zapStdLog(log),
	}
	p.router = p.routes()
	return p
}

func zapStdLog(l *zap.Logger) *log.Logger {
	std, err := zap.NewStdLogAt(l, zap.WarnLevel)
	if err != nil { // only for levels zap does not know
		panic(err)
	}
	return std
}

// CloseIdleConnections closes the idle connections to the upstream, as a
// shutdown ends.
func (p *Proxy) CloseIdleConnections() {
	if c, ok := p.rp.Transport.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// ServeHTTP serves one proxied request. Its server must set
// DisableGeneralOptionsHandler, so that OPTIONS * comes here too
// (smuggling.go).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c := arrivalOf(r); c != nil {
		c.handling()
		// The next bytes on the connection are the next request's.
		defer func() { c.served(time.Now()) }()
	}
	if closesAfter(r) {
		w.Header().Set("Connection", "close")
		if isUpgrade(r) {
			p.refuse(w, r, p.labels(r, "", events.Other), startOf(r), errUpgradeWithBody)
			return
		}
	}
	if r.Method == http.MethodOptions && r.RequestURI == "*" {
		answerOptions(w)
		return
	}
	if p.looped(r) {
		p.warnLoop()
		p.refuse(w, r, p.labels(r, "", events.Other), startOf(r), errLoop)
		return
	}
	if isUpgrade(r) {
		// Over once its handler has recorded everything: a shutdown waits
		// for it (upgrades.go).
		ctx, over := p.upgrades.add(r.Context())
		defer over()
		r = r.WithContext(ctx)
	}
	p.router.ServeHTTP(w, r)
}

func (p *Proxy) modifyResponse(resp *http.Response) error {
	ctx := resp.Request.Context()
	exchangeFrom(ctx).respond(resp, p.cfg.MaxEventBytes, p.cfg.StreamIdleTimeout)
	closeAfterResponse(resp.Request, resp.StatusCode, resp.Header)
	if c, _ := ctx.Value(realtimeKey{}).(*realtimeConn); c != nil {
		c.upgraded(resp)
	}
	return nil
}
