package transport

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// New returns the transport to the upstream: the default one's dialing
// and HTTP/2 over TLS, tlsConfig for an https upstream (nil: the system's
// roots), enough idle connections for many concurrent streams, no
// transparent compression (the client's Accept-Encoding goes through as it
// is, and so does the upstream's encoding), and timeout as the bound on the
// wait for response headers.
func New(timeout time.Duration, tlsConfig *tls.Config) *http.Transport {
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

// NewLean returns the proxy's transport to the upstream: Lean for
// cleartext HTTP/1.1, over New's transport for everything else, with the
// same dialing, idle connections and header timeout.
func NewLean(timeout time.Duration, tlsConfig *tls.Config) *Lean {
	t := New(timeout, tlsConfig)
	l := &Lean{
		Dial:                  t.DialContext,
		ResponseHeaderTimeout: timeout,
		MaxIdlePerHost:        t.MaxIdleConnsPerHost,
		IdleTimeout:           t.IdleConnTimeout,
		Fallback:              t,
	}
	dial := t.DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		l.fallbackDials(addr)
		return dial(ctx, network, addr)
	}
	return l
}
