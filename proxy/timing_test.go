package proxy

import (
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
)

// pipeListener is a listener whose connections are in-memory pipes, so
// that an HTTP client, the proxy and an upstream can all run inside a
// synctest bubble, where time is fake and only passes when every goroutine
// waits.
type pipeListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// TestStreamTimingExact runs client, proxy and upstream on fake time: the
// upstream's schedule is the only thing that makes time pass, so TTFT, every
// ITL gap, TPOT and the duration must equal it exactly.
// scheduledStream is an upstream that sends a role-only chunk at once,
// then token after ttft and again after each of gaps, then usage (6
// completion tokens) and [DONE] 10 ms later.
func scheduledStream(ttft time.Duration, gaps []time.Duration, token string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n")
		_ = rc.Flush()
		time.Sleep(ttft)
		_, _ = io.WriteString(w, token)
		_ = rc.Flush()
		for _, g := range gaps {
			time.Sleep(g)
			_, _ = io.WriteString(w, token)
			_ = rc.Flush()
		}
		time.Sleep(10 * time.Millisecond)
		_, _ = io.WriteString(w, `data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":6}}`+"\n\ndata: [DONE]\n\n")
	}
}

func TestStreamTimingExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttft = 230 * time.Millisecond
		gaps := []time.Duration{17 * time.Millisecond, 0, 45 * time.Millisecond, 3 * time.Millisecond, 120 * time.Millisecond}
		token := `data: {"choices":[{"index":0,"delta":{"content":"t"}}]}` + "\n\n"

		upLn, proxyLn := newPipeListener(), newPipeListener()
		upstream := &http.Server{Handler: scheduledStream(ttft, gaps, token)}
		go func() { _ = upstream.Serve(upLn) }()

		reg := prometheus.NewRegistry()
		rec, err := metrics.New(reg, metrics.Options{MaxModels: 4})
		if err != nil {
			t.Fatal(err)
		}
		upURL, _ := url.Parse("http://upstream")
		toUpstream := &http.Transport{DialContext: upLn.dial}
		p := New(Config{Upstream: upURL, MaxRequestBytes: 1 << 20, MaxEventBytes: 1 << 20, Transport: toUpstream}, rec, zap.NewNop())
		proxySrv := &http.Server{Handler: p}
		go func() { _ = proxySrv.Serve(proxyLn) }()

		toProxy := &http.Transport{DialContext: proxyLn.dial}
		client := &http.Client{Transport: toProxy}
		start := time.Now()
		resp, err := client.Post("http://proxy/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		elapsed := time.Since(start)

		// Let the proxy finish recording, then stop everything so the bubble
		// can end.
		synctest.Wait()
		toProxy.CloseIdleConnections()
		toUpstream.CloseIdleConnections()
		_ = proxySrv.Close()
		_ = upstream.Close()

		var itlSum time.Duration
		for _, g := range gaps {
			itlSum += g
		}
		tpot := itlSum / 5 // (last - first) / (6 completion tokens - 1)
		h := &harness{t: t, reg: reg}
		for _, c := range []struct {
			name  string
			count uint64
			sum   time.Duration
		}{
			{"itlproxy_time_to_first_token_seconds", 1, ttft},
			{"itlproxy_inter_token_latency_seconds", uint64(len(gaps)), itlSum},
			{"itlproxy_time_per_output_token_seconds", 1, tpot},
			{"itlproxy_request_duration_seconds", 1, elapsed},
		} {
			n, sum := h.hist(c.name, "model", "m")
			if n != c.count || math.Abs(sum-c.sum.Seconds()) > 1e-9 {
				t.Errorf("%s: count %d sum %vs, want %d and exactly %vs", c.name, n, sum, c.count, c.sum.Seconds())
			}
		}
		if n := h.counter("itlproxy_output_tokens_total"); n != 6 {
			t.Errorf("output tokens %v, want 6 (from usage)", n)
		}
	})
}
