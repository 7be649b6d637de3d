package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// teeUpstream serves h and keeps what it sent of each response, by
// request id.
type teeUpstream struct {
	h    http.Handler
	mu   sync.Mutex
	sent map[string]*bytes.Buffer
}

func (u *teeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	buf := &bytes.Buffer{}
	u.mu.Lock()
	u.sent[r.Header.Get("X-Request-Id")] = buf
	u.mu.Unlock()
	u.h.ServeHTTP(&teeWriter{ResponseWriter: w, buf: buf, mu: &u.mu}, r)
}

// bytes returns what was sent of the response to request id.
func (u *teeUpstream) bytes(id string) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return bytes.Clone(u.sent[id].Bytes())
}

// teeWriter writes to the response and to buf.
type teeWriter struct {
	http.ResponseWriter
	buf *bytes.Buffer
	mu  *sync.Mutex
}

func (w *teeWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.mu.Lock()
	w.buf.Write(p[:n])
	w.mu.Unlock()
	return n, err
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// switchedReceiver is a metric receiver on one address that a test stops
// and starts again.
type switchedReceiver struct {
	t    *testing.T
	addr string
	rc   *metricReceiver
	srv  *http.Server
}

func (s *switchedReceiver) start() {
	s.t.Helper()
	var ln net.Listener
	waitFor(s.t, "the receiver's address to be free again", 5*time.Second, func() bool {
		var err error
		ln, err = net.Listen("tcp", s.addr)
		return err == nil
	})
	s.srv = &http.Server{Handler: s.rc}
	go func() { _ = s.srv.Serve(ln) }()
}

func (s *switchedReceiver) stop() { _ = s.srv.Close() }

// TestOTLPReceiverDownMidLoad: the receiver stops while streams run, and
// starts again after them. Nothing on the data path is lost (every
// stream's bytes reach its client as the upstream sent them, /metrics
// counts every stream and gap); the exports that fail meanwhile are
// counted and the outage logged once, and so is its end; the next export
// carries every total.
func TestOTLPReceiverDownMidLoad(t *testing.T) {
	gaps := []time.Duration{10 * ms, 10 * ms, 10 * ms, 10 * ms, 10 * ms, 10 * ms, 10 * ms, 10 * ms, 10 * ms}
	up := &teeUpstream{h: scheduledUpstream{schedule: fixedSchedule(10*ms, gaps...)}, sent: map[string]*bytes.Buffer{}}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	recv := &switchedReceiver{t: t, addr: freeAddr(t), rc: &metricReceiver{}}
	recv.start()
	defer recv.stop()
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":       upSrv.URL,
		"OTEL_METRICS_EXPORTER":       "otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + recv.addr,
		"OTEL_METRIC_EXPORT_INTERVAL": "50",
		"OTEL_METRIC_EXPORT_TIMEOUT":  "200",
		"OTEL_TRACES_SAMPLER":         "always_off",
	})
	const streams, clients = 48, 6
	got := make([][]byte, streams)
	var wg sync.WaitGroup
	next := make(chan int)
	for range clients {
		wg.Go(func() {
			for i := range next {
				got[i] = streamBody(t, in.proxy, "m", streamID(i))
			}
		})
	}
	for i := range streams {
		if i == streams/3 {
			recv.stop()
			waitFor(t, "a failed export", 5*time.Second, func() bool {
				return in.scrape().Value("itlproxy_otlp_metric_exports_failed_total") >= 2
			})
		}
		next <- i
	}
	close(next)
	wg.Wait()

	for i := range streams {
		if want := up.bytes(streamID(i)); len(want) == 0 || !bytes.Equal(got[i], want) {
			t.Errorf("stream %d: the client got %d bytes, the upstream sent %d, not the same", i, len(got[i]), len(want))
		}
	}
	waitEnded(t, in, "m", streams)
	fs := in.scrape()
	itl, _ := fs.Histogram("itlproxy_inter_token_latency_seconds", "model", "m")
	ttft, _ := fs.Histogram("itlproxy_time_to_first_token_seconds", "model", "m")
	if completed := fs.Value("itlproxy_streams_total", "outcome", "completed"); completed != streams || ttft != streams || itl != streams*uint64(len(gaps)) {
		t.Errorf("/metrics: %v streams completed, %d first tokens, %d gaps; want %d, %d, %d",
			completed, ttft, itl, streams, streams, streams*len(gaps))
	}
	failedDuring := fs.Value("itlproxy_otlp_metric_exports_failed_total")

	recv.start()
	p := recv.rc.waitPush(t, "a push with every gap after the receiver is back", 10*time.Second, func(p pushed) bool {
		pt := expPoint(p.metrics["itlproxy_inter_token_latency_seconds"], map[string]string{"model": "m"})
		return pt != nil && pt.Count == itl
	})
	if pt := sumPoint(p.metrics["itlproxy_streams_total"], map[string]string{"outcome": "completed"}); pt.GetAsDouble() != streams {
		t.Errorf("the push after the outage counts %v streams, want %d", pt.GetAsDouble(), streams)
	}
	waitFor(t, "the end of the outage logged", 5*time.Second, func() bool {
		return strings.Contains(in.stderr.String(), "OTLP metric export succeeded again")
	})
	failed := in.scrape().Value("itlproxy_otlp_metric_exports_failed_total")
	log := in.stderr.String()
	if n := strings.Count(log, "OTLP metric export failed"); n != 1 || strings.Count(log, "OTLP metric export succeeded again") != 1 {
		t.Errorf("%v exports failed: the outage is logged %d times and its end %d, want once each:\n%s",
			failed, n, strings.Count(log, "succeeded again"), log)
	}
	if failedDuring < 2 || failed < failedDuring {
		t.Errorf("itlproxy_otlp_metric_exports_failed_total: %v during the outage, %v after", failedDuring, failed)
	}
	t.Logf("%v exports failed during the outage", failed)
}

// streamID is the request id of stream i.
func streamID(i int) string { return fmt.Sprintf("s%03d", i) }

// streamBody sends one streaming chat request and returns its whole body.
func streamBody(t *testing.T, proxyAddr, model, id string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+proxyAddr+"/v1/chat/completions", strings.NewReader(`{"model":"`+model+`","stream":true}`))
	req.Header.Set("X-Request-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Error(err)
	}
	return body
}

// deadListener accepts connections and never answers them, until the
// test ends.
func deadListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln
}

// unhurtStreams is how many streams unhurtBy sends each way.
const unhurtStreams = 20

// unhurtBy sends the same streams through a proxy without and with the
// settings with (an exporter whose other end never answers, named what),
// and fails the test when they make the streams slower: a data path that
// waited for an export would wait for its timeout. It returns the proxy
// with them, still running.
func unhurtBy(t *testing.T, what string, with map[string]string) *instance {
	t.Helper()
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(10*ms, 5*ms, 5*ms, 5*ms)})
	t.Cleanup(up.Close)
	base := map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_SHUTDOWN_TIMEOUT": "1s"}
	for k, v := range base {
		with[k] = v
	}
	const n = unhurtStreams
	durations := func(in *instance) []time.Duration {
		var ds []time.Duration
		for range n {
			ds = append(ds, timedStream(t, in.proxy, "m", nil))
		}
		slices.Sort(ds)
		return ds
	}
	plain := durations(start(t, nil, base))
	in := start(t, nil, with)
	withDead := durations(in)
	if worst := withDead[n-1]; worst > time.Second {
		t.Errorf("slowest stream with %s took %v", what, worst)
	}
	if p50, base := withDead[n/2], plain[n/2]; p50 > base+50*ms {
		t.Errorf("median stream %v with %s, %v without", p50, what, base)
	}
	return in
}

// TestOTLPMetricsDeadReceiver: a receiver that accepts connections and
// never answers adds no latency to streams; each export gives up at
// OTEL_METRIC_EXPORT_TIMEOUT, is counted, and the outage is logged once;
// the last push at shutdown is bounded too.
func TestOTLPMetricsDeadReceiver(t *testing.T) {
	dead := deadListener(t)
	in := unhurtBy(t, "a dead receiver", map[string]string{
		"OTEL_METRICS_EXPORTER":               "otlp",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://" + dead.Addr().String() + "/v1/metrics",
		"OTEL_METRIC_EXPORT_INTERVAL":         "50",
		"OTEL_METRIC_EXPORT_TIMEOUT":          "150",
	})
	waitFor(t, "exports to time out and be counted", 5*time.Second, func() bool {
		return in.scrape().Value("itlproxy_otlp_metric_exports_failed_total") >= 2
	})
	if log := in.stderr.String(); strings.Count(log, "OTLP metric export failed") != 1 {
		t.Errorf("the outage is logged %d times, want once:\n%s", strings.Count(log, "OTLP metric export failed"), log)
	}
	stopped := time.Now()
	in.stop()
	if err := in.wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Streams are done: the shutdown is the last push, which gives up at
	// the export timeout, far within telemetry.MetricFlushTimeout.
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("shutdown took %v with a dead receiver", took)
	}
}
