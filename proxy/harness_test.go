package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/metrics/scrape"
	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// harness is a real proxy server in front of a real upstream server.
type harness struct {
	t        testing.TB
	reg      *prometheus.Registry
	rec      *metrics.Metrics
	upstream *httptest.Server
	proxy    *httptest.Server
	logs     *observer.ObservedLogs
	logCore  zapcore.Core // where the proxy logs, which logs observes
	served   chan struct{}
	// proxyCloseIdle closes the proxy's idle connections to the upstream.
	proxyCloseIdle func()
	// waitUpgraded is the proxy's WaitUpgraded, as a shutdown calls it.
	waitUpgraded func(context.Context) int
}

type harnessOption func(*Config, *metrics.Options)

// newHarness starts upstream (nil: none, for tests that set Config.Upstream
// themselves) and a proxy to it.
func newHarness(t *testing.T, upstream http.Handler, opts ...harnessOption) *harness {
	t.Helper()
	return startHarness(t, upstream, nil, opts...)
}

// startHarness is newHarness for fuzz targets too, with the proxy's
// http.Server changed by server (when not nil) before it starts.
func startHarness(t testing.TB, upstream http.Handler, server func(*http.Server), opts ...harnessOption) *harness {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	// served must hold every request a test sends before it waits: a full
	// channel would block handlers.
	h := &harness{t: t, reg: prometheus.NewRegistry(), logs: logs, logCore: core, served: make(chan struct{}, 1<<16)}
	cfg := Config{MaxRequestBytes: 1 << 20, MaxEventBytes: 1 << 20}
	mopts := metrics.Options{MaxModels: 32, Version: "test"}
	if upstream != nil {
		h.upstream = httptest.NewServer(upstream)
		t.Cleanup(h.upstream.Close)
		cfg.Upstream, _ = url.Parse(h.upstream.URL)
	}
	for _, o := range opts {
		o(&cfg, &mopts)
	}
	rec, err := metrics.New(h.reg, mopts)
	if err != nil {
		t.Fatal(err)
	}
	h.rec = rec
	p := New(cfg, rec, zap.New(core))
	t.Cleanup(p.CloseIdleConnections)
	h.proxyCloseIdle = p.CloseIdleConnections
	h.waitUpgraded = p.WaitUpgraded
	// The proxy serves as the command serves it.
	h.proxy = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { h.served <- struct{}{} }()
		p.ServeHTTP(w, r)
	}))
	h.proxy.Config.DisableGeneralOptionsHandler = true
	// Each request's t0 is when its first bytes arrived.
	h.proxy.Listener = Listener(h.proxy.Listener, 0)
	h.proxy.Config.ConnContext = ConnContext
	// And accepts cleartext HTTP/2 beside HTTP/1.1, as with ITLPROXY_H2C.
	h.proxy.Config.Protocols = new(http.Protocols)
	h.proxy.Config.Protocols.SetHTTP1(true)
	h.proxy.Config.Protocols.SetUnencryptedHTTP2(true)
	if server != nil {
		server(h.proxy.Config)
	}
	h.proxy.Start()
	t.Cleanup(h.proxy.Close)
	return h
}

// waitServed waits until the proxy's handler has returned n more times, so
// that the requests are recorded.
func (h *harness) waitServed(n int) {
	h.t.Helper()
	for range n {
		select {
		case <-h.served:
		case <-time.After(10 * time.Second):
			h.t.Fatal("the proxy did not finish serving in 10s")
		}
	}
}

func (h *harness) post(path, body string, header ...string) *http.Response {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.proxy.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}

// metrics reads the registry.
func (h *harness) metrics() scrape.Families {
	h.t.Helper()
	fs, err := scrape.Gather(h.reg)
	if err != nil {
		h.t.Fatal(err)
	}
	return fs
}

// counter sums the matching counter (or gauge) series.
func (h *harness) counter(name string, labels ...string) float64 {
	h.t.Helper()
	return h.metrics().Value(name, labels...)
}

// hist sums the matching histogram series' counts and sums.
func (h *harness) hist(name string, labels ...string) (count uint64, sum float64) {
	h.t.Helper()
	return h.metrics().Histogram(name, labels...)
}

// writeChunks is an upstream that sends an event stream: it waits gaps[i]
// (when given) before writing chunks[i], and flushes after each.
func writeChunks(w http.ResponseWriter, r *http.Request, chunks [][]byte, gaps []time.Duration) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for i, c := range chunks {
		if i < len(gaps) && gaps[i] > 0 {
			select {
			case <-time.After(gaps[i]):
			case <-r.Context().Done():
				return
			}
		}
		if _, err := w.Write(c); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// chunkings returns the ways a test feeds in (streamtest.Cuts).
func chunkings(in []byte) map[string][][]byte { return streamtest.Cuts(in) }
