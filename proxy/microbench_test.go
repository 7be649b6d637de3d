//go:build unix

package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
	"github.com/itlproxy/itlproxy/proxy/transport"
)

// BenchmarkProxyStream puts whole streams through the proxy in-process,
// next to Go's plain httputil.ReverseProxy measuring nothing and to no
// proxy at all, so that what measuring adds per event shows as a
// difference and a ratio; proxy/events' benchmarks measure each stage of
// the measuring path alone (the SSE splitter, the chunk reader).
// Everything is reported per event (streamtest.PerEvent), and bench/run.sh
// tabulates it in BENCHMARKS.md.

// e2eStream is the stream the end-to-end benchmark's upstream sends: a
// role chunk, 64 content chunks, a finish chunk, usage and [DONE], in
// vLLM's shape; 68 events.
func e2eStream() [][]byte {
	head := `data: {"id":"chatcmpl-4b1e3f0c9a","object":"chat.completion.chunk","created":1763700000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[`
	out := [][]byte{[]byte(head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")}
	for i := range 64 {
		out = append(out, fmt.Appendf(nil, "%s{\"index\":0,\"delta\":{\"content\":\" word%d\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n", head, i))
	}
	return append(out,
		[]byte(head+`{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}`+"\n\n"),
		[]byte(head+`],"usage":{"prompt_tokens":12,"total_tokens":76,"completion_tokens":64}}`+"\n\n"),
		[]byte("data: [DONE]\n\n"))
}

// e2eUpstream writes the stream, flushing each event. In lockstep it waits
// for the client to have read each event but the last before writing the
// next, so that
// every hop reads one event at a time, as when tokens are milliseconds
// apart; otherwise it writes them back to back.
type e2eUpstream struct {
	stream   [][]byte
	lockstep bool
	ack      chan struct{} // the client read an event
}

func (u *e2eUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for i, ev := range u.stream {
		if _, err := w.Write(ev); err != nil || rc.Flush() != nil {
			return
		}
		if u.lockstep && i < len(u.stream)-1 {
			select {
			case <-u.ack:
			case <-r.Context().Done():
				return
			}
		}
	}
}

// e2eClient sends one streaming request and reads the response to its
// end, acknowledging each complete event (a blank line) in lockstep.
type e2eClient struct {
	c    *http.Client
	url  string
	body []byte
	buf  []byte
	ack  chan struct{} // nil: no lockstep
}

func (c *e2eClient) stream(b *testing.B, want int) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, c.url, bytes.NewReader(c.body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	got, prev := 0, byte(0)
	for {
		n, err := resp.Body.Read(c.buf)
		for _, ch := range c.buf[:n] {
			if ch == '\n' && prev == '\n' {
				got++
				if c.ack != nil && got < want {
					c.ack <- struct{}{}
				}
			}
			prev = ch
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if got != want {
		b.Fatalf("read %d events, want %d", got, want)
	}
}

// BenchmarkProxyStream streams whole responses in-process, client →
// proxy → upstream over loopback, through itlproxy (proxy.New, as
// cmd/itlproxy wires it), through Go's plain httputil.ReverseProxy
// measuring nothing (the same transport, flushing every read), and
// direct. Per event: (itlproxy − direct) / (plain − direct) is what
// measuring costs relative to proxying at all. The client and upstream
// run in the same process, so ns/event and cpu-ns/event include their
// share; B/event and allocs/event too.
func BenchmarkProxyStream(b *testing.B) {
	stream := e2eStream()
	body := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	for _, mode := range []string{"lockstep", "burst"} {
		for _, via := range []string{"itlproxy", "plain", "direct"} {
			b.Run(mode+"/"+via, func(b *testing.B) {
				up := &e2eUpstream{stream: stream, lockstep: mode == "lockstep", ack: make(chan struct{})}
				upSrv := httptest.NewServer(up)
				defer upSrv.Close()
				target := upSrv.URL
				if via != "direct" {
					proxySrv := httptest.NewServer(benchProxy(b, via, upSrv.URL))
					defer proxySrv.Close()
					target = proxySrv.URL
				}
				tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}
				defer tr.CloseIdleConnections()
				c := &e2eClient{c: &http.Client{Transport: tr}, url: target + "/v1/chat/completions", body: body, buf: make([]byte, 32<<10)}
				if up.lockstep {
					c.ack = up.ack
				}
				c.stream(b, len(stream)) // connections open, pools warm
				streamtest.PerEvent(b, len(stream), func() { c.stream(b, len(stream)) })
			})
		}
	}
}

// benchProxy is itlproxy's handler, or the plain reverse proxy, to
// upstream.
func benchProxy(b *testing.B, via, upstream string) http.Handler {
	u, err := url.Parse(upstream)
	if err != nil {
		b.Fatal(err)
	}
	if via == "plain" {
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(u)
				pr.SetXForwarded()
			},
			Transport:     transport.New(0, nil),
			FlushInterval: -1,
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Without it, an upstream that answers at once races the
			// transport's last read of the request body, and the stream is
			// cut; itlbench plainproxy does the same.
			_ = http.NewResponseController(w).EnableFullDuplex()
			rp.ServeHTTP(w, r)
		})
	}
	rec, err := metrics.New(prometheus.NewRegistry(), metrics.Options{MaxModels: 4})
	if err != nil {
		b.Fatal(err)
	}
	return New(Config{
		Upstream:        u,
		MaxRequestBytes: 32 << 20,
		MaxEventBytes:   1 << 20,
		Transport:       transport.New(0, nil),
		SessionHeader:   "X-Session-Id",
	}, rec, zap.NewNop())
}
