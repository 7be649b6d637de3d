package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/transport"
)

const token = `data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n"

// TestHugeEventLine: an 8 MiB data line passes unchanged; the measurement
// stops buffering it at the bound, counts it, and measures the next events.
func TestHugeEventLine(t *testing.T) {
	huge := "data: " + strings.Repeat("z", 8<<20) + "\n\n"
	stream := token + huge + token + token + "data: [DONE]\n\n"
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var chunks [][]byte
		for rest := []byte(stream); len(rest) > 0; {
			n := min(len(rest), 64<<10)
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		writeChunks(w, r, chunks, nil)
	}), func(c *Config, _ *metrics.Options) { c.MaxEventBytes = 1 << 20 })
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, []byte(stream)) {
		t.Fatalf("client got %d bytes (%v), upstream sent %d", len(got), err, len(stream))
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_parse_failures_total", "reason", metrics.ParseEventTooLarge); n != 1 {
		t.Errorf("event_too_large = %v, want 1", n)
	}
	if n, _ := h.hist("itlproxy_inter_token_latency_seconds"); n != 2 {
		t.Errorf("ITL count %d, want 2: the events after the huge one are measured", n)
	}
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeCompleted); n != 1 {
		t.Errorf("completed streams %v", n)
	}
}

// TestUpstreamResetMidStream: the upstream's connection is reset (TCP RST)
// mid-stream. The client must see an error, not a clean end.
func TestUpstreamResetMidStream(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, token)
		http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_ = conn.(*net.TCPConn).SetLinger(0) // close with RST
		conn.Close()
	}))
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("client read a clean end after %q", got)
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeUpstreamError); n != 1 {
		t.Errorf("upstream_error = %v", n)
	}
}

// TestUpstreamSilentAfterHeaders: headers, one event, then nothing. The
// idle timeout ends the stream, visibly cut for the client, and cancels the
// upstream request.
func TestUpstreamSilentAfterHeaders(t *testing.T) {
	canceled := make(chan struct{})
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeChunks(w, r, [][]byte{[]byte(token)}, nil)
		<-r.Context().Done()
		close(canceled)
	}), func(c *Config, _ *metrics.Options) { c.StreamIdleTimeout = 300 * time.Millisecond })
	start := time.Now()
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	elapsed := time.Since(start)
	if err == nil || string(got) != token {
		t.Errorf("client got %q, %v; want the event, then a cut", got, err)
	}
	if elapsed < 300*time.Millisecond || elapsed > 2*time.Second {
		t.Errorf("the stream ended after %v, want about 300ms", elapsed)
	}
	select {
	case <-canceled:
	case <-time.After(time.Second):
		t.Error("the upstream request was not canceled")
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeIdleTimeout); n != 1 {
		t.Errorf("idle_timeout = %v", n)
	}
}

// TestIdleTimeoutSparesSlowStreams: gaps shorter than the idle timeout,
// however many, do not end the stream.
func TestIdleTimeoutSparesSlowStreams(t *testing.T) {
	var gaps []time.Duration
	var chunks [][]byte
	for range 8 {
		gaps = append(gaps, 150*time.Millisecond)
		chunks = append(chunks, []byte(token))
	}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeChunks(w, r, chunks, gaps) }),
		func(c *Config, _ *metrics.Options) { c.StreamIdleTimeout = 400 * time.Millisecond })
	resp := h.post("/v1/chat/completions", `{"model":"m","stream":true}`)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Count(string(got), "data:") != 8 {
		t.Fatalf("client got %q, %v", got, err)
	}
	h.waitServed(1)
	if n := h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeCompleted); n != 1 {
		t.Errorf("completed = %v", n)
	}
}

// TestUpstreamTLSVerified: an https upstream whose certificate the proxy
// cannot verify gets a 502, never an unverified connection; with its CA it
// works.
func TestUpstreamTLSVerified(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	defer up.Close()
	upURL, _ := url.Parse(up.URL)
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	for _, c := range []struct {
		name string
		tls  *tls.Config
		want int
	}{
		{"system roots", nil, http.StatusBadGateway},
		{"the upstream's CA", &tls.Config{RootCAs: roots}, http.StatusOK},
		{"another CA", &tls.Config{RootCAs: x509.NewCertPool()}, http.StatusBadGateway},
	} {
		h := newHarness(t, nil, func(cfg *Config, _ *metrics.Options) {
			cfg.Upstream = upURL
			cfg.Transport = transport.New(0, c.tls)
		})
		resp := h.post("/v1/chat/completions", `{"model":"m"}`)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
		h.waitServed(1)
	}
}

// TestCardinalityFloods: 10,000 distinct model names and 1,000 random paths
// leave the exported series bounded by the model cap.
func TestCardinalityFloods(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}), func(_ *Config, o *metrics.Options) { o.MaxModels = 32 })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()
	send := func(path, body string) {
		resp, err := client.Post(h.proxy.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	const models, paths = 10_000, 1_000
	for i := range models {
		send("/v1/chat/completions", fmt.Sprintf(`{"model":"flood-%d"}`, i))
	}
	for i := range paths {
		send(fmt.Sprintf("/random/%d/path", i), "")
	}
	h.waitServed(models + paths)
	fs := h.metrics()
	modelsSeen := map[string]bool{}
	series := 0
	for _, f := range fs {
		for _, m := range f.GetMetric() {
			series++
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" {
					modelsSeen[l.GetValue()] = true
				}
			}
		}
	}
	// 32 models under the cap, _other, and _unknown for the paths.
	if len(modelsSeen) != 34 {
		t.Errorf("%d model label values after %d models and %d paths, want 34", len(modelsSeen), models, paths)
	}
	if n := fs.Value("itlproxy_requests_total", "model", metrics.ModelOther); n != models-32 {
		t.Errorf("_other requests %v, want %d", n, models-32)
	}
	t.Logf("%d series after %d distinct models and %d random paths; goroutines %d", series, models, paths, runtime.NumGoroutine())
}

// endless is a request body that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// countingListener counts the bytes its connections read.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return &countingConn{Conn: c, read: &l.read}, err
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// TestEndlessBodyRefusedAtTheBound: a chunked body that never ends gets 413
// at once, and the proxy reads no more of it than the bound plus the
// 256 KiB that Go's server reads (and discards) after any handler, trying
// to keep the connection.
func TestEndlessBodyRefusedAtTheBound(t *testing.T) {
	const bound = 64 << 10
	called := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called <- struct{}{} }))
	defer up.Close()
	upURL, _ := url.Parse(up.URL)
	rec, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(New(Config{Upstream: upURL, MaxRequestBytes: bound, MaxEventBytes: 1 << 20}, rec, zap.NewNop()))
	counting := &countingListener{Listener: srv.Listener}
	srv.Listener = counting
	// Once the server has closed the connection it reads no more of it:
	// the count is final.
	closed := make(chan struct{})
	var once sync.Once
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateClosed {
			once.Do(func() { close(closed) })
		}
	}
	srv.Start()
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", endless{})
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	took := time.Since(start)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("the server still reads the endless body %v after its 413", time.Since(start))
	}
	read := counting.read.Load()
	t.Logf("413 after %v; the proxy read %d KiB of the body (bound %d KiB)", took, read>>10, bound>>10)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || took > 2*time.Second {
		t.Errorf("got %d after %v, want 413 at once", resp.StatusCode, took)
	}
	if limit := int64(bound + 256<<10 + 16<<10); read > limit {
		t.Errorf("the proxy read %d bytes of an endless body, more than %d", read, limit)
	}
	select {
	case <-called:
		t.Error("the upstream was called")
	default:
	}
}
