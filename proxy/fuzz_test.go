package proxy

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// cutTransport is an in-memory upstream for fuzzing, where starting
// servers per input would cost more than the code under test: it answers
// every request with body as an event stream, delivered in reads of
// random sizes drawn from seed (seed 0: reads as large as the reader asks).
type cutTransport struct {
	body        []byte
	seed        uint64
	contentType string // "": text/event-stream
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode:    http.StatusOK,
		Header:        http.Header{"Content-Type": {cmp(c.contentType, "text/event-stream")}},
		Body:          io.NopCloser(&cutReader{rest: c.body, seed: c.seed}),
		ContentLength: -1,
		Request:       r,
	}, nil
}

type cutReader struct {
	rest []byte
	seed uint64
	rng  *rand.Rand
}

func (c *cutReader) Read(p []byte) (int, error) {
	if len(c.rest) == 0 {
		return 0, io.EOF
	}
	if c.seed != 0 {
		if c.rng == nil {
			c.rng = rand.New(rand.NewPCG(c.seed, 1))
		}
		p = p[:min(len(p), 1+c.rng.IntN(64))]
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	return n, nil
}

// measured is what one pass of a stream through the proxy produced.
type measured struct {
	body                     string
	ttft, itl, tpot          uint64
	invalid, oversized, trnc float64
	completed, failed        float64
	streams, output          float64
}

func passThrough(t *testing.T, stream []byte, seed uint64) measured {
	return passThroughAt(t, "/v1/chat/completions", `{"model":"m","stream":true}`, cutTransport{stream, seed, ""})
}

// passThroughAt sends a request with body to path through the proxy, to
// the upstream up.
func passThroughAt(t *testing.T, path, body string, up cutTransport) measured {
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg, metrics.Options{MaxModels: 4})
	if err != nil {
		t.Fatal(err)
	}
	upstream, _ := url.Parse("http://upstream")
	p := New(Config{Upstream: upstream, MaxRequestBytes: 1 << 20, MaxEventBytes: 256, Transport: up}, rec, zap.NewNop())
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	h := &harness{t: t, reg: reg}
	m := measured{body: w.Body.String()}
	m.ttft, _ = h.hist("itlproxy_time_to_first_token_seconds")
	m.itl, _ = h.hist("itlproxy_inter_token_latency_seconds")
	m.tpot, _ = h.hist("itlproxy_time_per_output_token_seconds")
	m.invalid = h.counter("itlproxy_parse_failures_total", "reason", metrics.ParseInvalidJSON)
	m.oversized = h.counter("itlproxy_parse_failures_total", "reason", metrics.ParseEventTooLarge)
	m.trnc = h.counter("itlproxy_parse_failures_total", "reason", metrics.ParseTruncated)
	m.completed = h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeCompleted)
	m.failed = h.counter("itlproxy_streams_total", "outcome", metrics.OutcomeUpstreamError)
	m.streams = h.counter("itlproxy_streams_total")
	m.output = h.counter("itlproxy_output_tokens_total")
	return m
}

// FuzzProxyPassthrough sends arbitrary bytes as an event stream through
// the proxy in arbitrary reads: the client must get exactly those bytes,
// nothing may panic, and the measurement must not depend on how the bytes
// were cut (the same events, failures and token counts as in one read).
func FuzzProxyPassthrough(f *testing.F) {
	for i, name := range streamtest.Names() {
		f.Add(streamtest.Read(f, name), uint64(i))
	}
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\r\rdata: [DONE]\r\n\r\n"), uint64(7))
	f.Add([]byte(":c\r\nevent: e\ndata: {\"choices\":[{\"text\":\"a\"}]}\r\ndata: \n\n\xff\x00"), uint64(9))
	f.Add([]byte("data: "+strings.Repeat("z", 600)+"\n\ndata: {\"choices\":[{\"text\":\"a\"}]}\n\n"), uint64(3))
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64) {
		cut := passThrough(t, stream, seed|1)
		if !bytes.Equal([]byte(cut.body), stream) {
			t.Fatalf("client got %q, upstream sent %q", cut.body, stream)
		}
		whole := passThrough(t, stream, 0)
		whole.body = cut.body
		if cut != whole {
			t.Fatalf("measurement depends on the cuts: %+v vs %+v in one piece", cut, whole)
		}
		if cut.streams != 1 || cut.completed+cut.failed != 1 || cut.ttft > 1 || cut.ttft == 0 && cut.itl > 0 {
			t.Fatalf("inconsistent measurement %+v", cut)
		}
	})
}
