package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/itlproxy/itlproxy/proxy/transport"
)

const plainProxyUsageHead = `itlbench plainproxy serves Go's httputil.ReverseProxy, measuring nothing:
the baseline that itlproxy's cost is compared with in benchmarks (bench/run.sh).
It rewrites requests as itlproxy does (the upstream's URL and Host,
X-Forwarded-*), uses itlproxy's transport to the upstream and its listener's
settings, and flushes every read at once; the only difference left is
itlproxy's routing, request inspection and measurement. It serves until
interrupted.

usage:
  itlbench plainproxy [flags]

`

const plainProxyUsageTail = `
Example:
  itlbench plainproxy -addr 127.0.0.1:8081 -upstream http://127.0.0.1:8000
`

// runPlainProxy serves a plain reverse proxy until ctx is canceled.
func runPlainProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("itlbench plainproxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", "127.0.0.1:8081", "listen `address`")
	upstream := fs.String("upstream", "http://127.0.0.1:8000", "the upstream's `URL`: http or https, optional base path")
	if help, err := parseFlags(fs, args, stdout, plainProxyUsageHead, plainProxyUsageTail); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	up, err := url.Parse(*upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return &usageError{fmt.Errorf("-upstream %q: want an http or https URL with a host", *upstream)}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	errLog := log.New(stderr, "itlbench plainproxy: ", 0)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.SetXForwarded()
		},
		// itlproxy's transport, with ITLPROXY_UPSTREAM_TIMEOUT's default.
		Transport:     transport.New(10*time.Minute, nil),
		FlushInterval: -1,
		ErrorLog:      errLog,
	}
	// itlproxy's listener settings, at their defaults.
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The transport may still read the request body (to check its
			// length) when the response starts; HTTP/1 closes the body then
			// unless full duplex is on, which cuts the stream of an upstream
			// that answers at once.
			_ = http.NewResponseController(w).EnableFullDuplex()
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          errLog,
	}
	fmt.Fprintf(stderr, "itlbench plainproxy: serving http://%s to %s\n", ln.Addr(), redactedURL(*upstream))
	return serveUntil(ctx, srv, ln)
}

// serveUntil serves on ln (HTTPS when srv has a TLSConfig) until ctx is
// canceled, then gives streams in flight a moment to end and cuts the rest.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	served := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			served <- srv.ServeTLS(ln, "", "")
		} else {
			served <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if srv.Shutdown(shutdownCtx) != nil {
		srv.Close()
	}
	return nil
}
