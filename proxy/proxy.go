// Package proxy is itlproxy's data path: it routes each request, reads the
// model and stream flag from the body of the endpoints it measures, forwards
// everything through httputil.ReverseProxy unchanged, and measures the
// response as it passes (see DESIGN.md, "Data path").
package proxy

import (
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
)

// Config configures a Proxy.
type Config struct {
	// Upstream is where every request goes: scheme, host and an optional
	// base path that request paths are appended to.
	Upstream *url.URL
	// MaxRequestBytes bounds the request bodies the proxy reads to find the
	// model; larger ones are refused with 413.
	MaxRequestBytes int64
	// MaxEventBytes bounds what the measurement buffers: one SSE event, or
	// one non-streamed JSON body. Larger ones pass through unmeasured.
	MaxEventBytes int
	// UpstreamTimeout bounds the wait for the upstream's response headers
	// (for a non-streamed request, the whole generation); 0 means none. It
	// is used only when Transport is nil.
	UpstreamTimeout time.Duration
	// StreamIdleTimeout ends an event stream whose upstream sends nothing
	// for that long; 0 means never.
	StreamIdleTimeout time.Duration
	// Transport carries requests to the upstream. Nil means NewTransport.
	Transport http.RoundTripper
	// SessionHeader names the request header that carries a session id;
	// SessionFromUser falls back to the request body's "user" field.
	SessionHeader   string
	SessionFromUser bool
	// InjectUsage asks for usage on streaming chat and completions
	// requests that do not, and takes it out of the response (inject.go).
	InjectUsage bool
}

// Proxy is the http.Handler of the proxy listener.
type Proxy struct {
	cfg    Config
	rec    *metrics.Metrics
	log    *zap.Logger
	rp     *httputil.ReverseProxy
	router chi.Router
}

// New returns a proxy to cfg.Upstream that reports to rec and logs to log.
func New(cfg Config, rec *metrics.Metrics, log *zap.Logger) *Proxy {
	p := &Proxy{cfg: cfg, rec: rec, log: log}
	transport := cfg.Transport
	if transport == nil {
		transport = NewTransport(cfg.UpstreamTimeout, nil)
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
		},
		Transport:      transport,
		BufferPool:     newBufferPool(),
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.handleUpstreamError,
		ErrorLog:       zapStdLog(log),
	}
	p.router = p.routes()
	return p
}

// NewTransport returns the transport to the upstream: the default one's
// dialing and HTTP/2 over TLS, tlsConfig for an https upstream (nil: the
// system's roots), enough idle connections for many concurrent streams, no
// transparent compression (the client's Accept-Encoding goes through as it
// is, and so does the upstream's encoding), and timeout as the bound on the
// wait for response headers.
func NewTransport(timeout time.Duration, tlsConfig *tls.Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.DisableCompression = true
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = 1024
	t.ResponseHeaderTimeout = timeout
	// The write buffer serves only to send the request, yet every
	// connection keeps it for its life: a stream in flight holds one.
	t.WriteBufferSize = 2 << 10
	if tlsConfig != nil {
		t.TLSClientConfig = tlsConfig
	}
	return t
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

// ServeHTTP serves one proxied request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every request takes its own framing verdict (framing.go).
	if err := checkFraming(r); err != nil {
		labels := metrics.Labels{Model: metrics.ModelUnknown, Endpoint: metrics.EndpointOther}
		p.refuseBody(w, r, labels, time.Now(), err)
		return
	}
	p.router.ServeHTTP(w, r)
}

func (p *Proxy) modifyResponse(resp *http.Response) error {
	exchangeFrom(resp.Request.Context()).respond(resp, p.cfg.MaxEventBytes, p.cfg.StreamIdleTimeout)
	return nil
}
