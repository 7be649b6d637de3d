package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/internal/testdns"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// gatewayTokens is the token events of each answer of a podServer.
const gatewayTokens = 10

// gatewayAnswer is every podServer's answer, byte for byte.
var gatewayAnswer = func() string {
	var b strings.Builder
	for i := range gatewayTokens {
		fmt.Fprintf(&b, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
	}
	return b.String() + "data: [DONE]\n\n"
}()

// podServer is one model server pod: a chat completions server on its own
// loopback address, its gap between tokens settable, counting the
// streams it began.
type podServer struct {
	addr   string // ip:port
	gap    atomic.Int64
	served atomic.Int64
	active atomic.Int64 // requests being answered
	srv    *http.Server
	ln     net.Listener
}

func startPod(t *testing.T, ip string, port int, gap time.Duration) *podServer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
	if err != nil {
		t.Skipf("cannot listen on %s:%d (%v): this test needs the loopback range 127.0.0.0/8", ip, port, err)
	}
	p := &podServer{addr: ln.Addr().String(), ln: ln}
	p.gap.Store(int64(gap))
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

func (p *podServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.active.Add(1)
	defer p.active.Add(-1)
	_, _ = io.Copy(io.Discard, r.Body)
	p.served.Add(1)
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	events := strings.SplitAfter(gatewayAnswer, "\n\n")
	for i, ev := range events {
		if i > 0 && i < gatewayTokens {
			time.Sleep(time.Duration(p.gap.Load()))
		}
		if _, err := io.WriteString(w, ev); err != nil || rc.Flush() != nil {
			return
		}
	}
}

// kill stops the pod at once, its listener and every connection, and
// returns how many requests it was answering.
func (p *podServer) kill() int64 {
	active := p.active.Load()
	_ = p.srv.Close()
	return active
}

// gatewayLoad runs clients streaming through the proxy for d, each
// checking its answer byte for byte; it returns how many streams ended
// with the whole answer, and the others' errors.
func gatewayLoad(proxyAddr string, clients int, d time.Duration) (ok int64, failed []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	for range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				resp, err := client.Post("http://"+proxyAddr+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
				if err == nil {
					var body []byte
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && (resp.StatusCode != http.StatusOK || string(body) != gatewayAnswer) {
						err = fmt.Errorf("%s: %d bytes, not the answer", resp.Status, len(body))
					}
				}
				mu.Lock()
				if err != nil {
					failed = append(failed, err)
				} else {
					ok++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ok, failed
}

// freePortOn returns a TCP port free on every ip.
func freePortOn(t *testing.T, ips ...string) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Skipf("cannot listen on %s: %v", ips[0], err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		free := true
		for _, ip := range ips[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return port
		}
	}
	t.Fatal("no port free on every address")
	return 0
}

// upstreamSeries reads the proxy's per-server figures: streams ended and
// p99 ITL, by upstream label.
func upstreamSeries(t *testing.T, fs scrape.Families) (streams, p99 map[string]float64) {
	t.Helper()
	streams, p99 = map[string]float64{}, map[string]float64{}
	for _, m := range fs.Series("itlproxy_upstream_streams_total") {
		streams[scrape.Label(m, "upstream")] += m.GetCounter().GetValue()
	}
	for label := range streams {
		p99[label] = scrape.HistogramQuantile(0.99, fs.Buckets("itlproxy_upstream_inter_token_latency_seconds", "upstream", label))
	}
	return streams, p99
}

// TestGatewayBalancesOverAName runs itlproxy in gateway mode in front of
// three model server pods, the addresses of one name (a DNS server of the
// test's), one of them slow: every stream is counted on the pod that
// served it, the slow pod stands out on the per-server histograms and
// fires the alert in a real Prometheus; with equal speeds streams spread
// evenly; a pod killed mid-run loses no stream that had not started, and
// its series go once its streams have ended; a fourth address takes
// streams within the re-resolve interval; every answer arrives byte for
// byte.
func TestGatewayBalancesOverAName(t *testing.T) {
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	port := freePortOn(t, ips...)
	pods := []*podServer{
		startPod(t, ips[0], port, 5*time.Millisecond),
		startPod(t, ips[1], port, 5*time.Millisecond),
		startPod(t, ips[2], port, 40*time.Millisecond), // the slow one
	}
	dnsServer := testdns.Start(t, "llm.test.", ips[:3]...)
	proxy := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":              fmt.Sprintf("http://llm.test:%d", port),
		"ITLPROXY_UPSTREAM_RESOLVE":          "dns",
		"ITLPROXY_UPSTREAM_RESOLVER":         dnsServer.Addr,
		"ITLPROXY_UPSTREAM_RESOLVE_INTERVAL": "1s",
	})
	prom := e2e.StartPrometheus(t, proxy.Admin, "../../deploy/prometheus/rules.yaml")
	scrapeProxy := func() scrape.Families { return scrapeAdmin(t, proxy.Admin) }

	// One slow pod among three.
	if ok, failed := gatewayLoad(proxy.Proxy, 12, 8*time.Second); len(failed) > 0 || ok == 0 {
		t.Fatalf("%d streams whole, %d failed: %v", ok, len(failed), failed[:min(3, len(failed))])
	}
	streams, p99 := upstreamSeries(t, scrapeProxy())
	for _, p := range pods {
		if got := streams[p.addr]; got != float64(p.served.Load()) {
			t.Errorf("%s: the proxy counted %v streams, the pod served %d", p.addr, got, p.served.Load())
		}
	}
	slow := pods[2].addr
	t.Logf("streams by server %v, p99 ITL by server %v", streams, p99)
	for _, p := range pods[:2] {
		if !(p99[slow] > 2*p99[p.addr]) {
			t.Errorf("p99 ITL of the slow pod %v, of %s %v: it does not stand out", p99[slow], p.addr, p99[p.addr])
		}
	}
	e2e.WaitFor(t, "the slow-server alert to hold for the slow pod", 30*time.Second, func() bool {
		for _, a := range prom.Alerts() {
			if a.Labels["alertname"] == "ItlproxyUpstreamEndpointSlow" && a.Labels["upstream"] == slow {
				return true
			}
		}
		return false
	})
	for _, a := range prom.Alerts() {
		if a.Labels["alertname"] == "ItlproxyUpstreamEndpointSlow" && a.Labels["upstream"] != slow {
			t.Errorf("the slow-server alert holds for %s", a.Labels["upstream"])
		}
	}

	// Equal speeds: streams spread within 10% of even.
	pods[2].gap.Store(int64(5 * time.Millisecond))
	var before [3]int64
	for i, p := range pods {
		before[i] = p.served.Load()
	}
	if _, failed := gatewayLoad(proxy.Proxy, 12, 5*time.Second); len(failed) > 0 {
		t.Fatalf("%d streams failed: %v", len(failed), failed[:min(3, len(failed))])
	}
	var spread [3]float64
	total := 0.0
	for i, p := range pods {
		spread[i] = float64(p.served.Load() - before[i])
		total += spread[i]
	}
	for i, n := range spread {
		if math.Abs(n-total/3) > 0.1*total/3 {
			t.Errorf("equal speeds: %v streams by pod, %s's %v is not within 10%% of even", spread, pods[i].addr, n)
		}
	}

	// A pod killed mid-run, and gone from the name.
	type result struct {
		ok     int64
		failed []error
	}
	done := make(chan result)
	go func() {
		ok, failed := gatewayLoad(proxy.Proxy, 12, 4*time.Second)
		done <- result{ok, failed}
	}()
	time.Sleep(time.Second)
	killed := pods[1]
	inFlight := killed.kill()
	dnsServer.Set(ips[0], ips[2])
	r := <-done
	for _, err := range r.failed {
		if !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "not the answer") {
			t.Errorf("a stream failed other than cut mid-way: %v", err)
		}
	}
	// The streams the pod was answering are cut; so, at most, is one whose
	// request had reached the pod and not yet its handler (sent: not safe
	// to send again). Any other failure is a stream that had not started.
	if n := int64(len(r.failed)); n > inFlight+1 {
		t.Errorf("%d streams failed when %d were in flight on the killed pod: streams that had not started were lost: %v", n, inFlight, r.failed)
	}
	t.Logf("killed %s with %v streams in flight: %d streams cut, %d whole", killed.addr, inFlight, len(r.failed), r.ok)
	e2e.WaitFor(t, "the killed pod's series to go", 10*time.Second, func() bool {
		return len(scrapeProxy().Series("itlproxy_upstream_inter_token_latency_seconds", "upstream", killed.addr)) == 0
	})

	// A fourth address, added to the name.
	fourth := startPod(t, ips[3], port, 5*time.Millisecond)
	dnsServer.Set(ips[0], ips[2], ips[3])
	time.Sleep(1500 * time.Millisecond) // the re-resolve interval, and some
	if _, failed := gatewayLoad(proxy.Proxy, 6, 2*time.Second); len(failed) > 0 {
		t.Fatalf("%d streams failed: %v", len(failed), failed[:min(3, len(failed))])
	}
	if fourth.served.Load() == 0 {
		t.Error("the fourth address took no stream within the re-resolve interval")
	}
	if n := scrapeProxy().Value("itlproxy_upstream_endpoints"); n != 3 {
		t.Errorf("%v servers, want 3", n)
	}
}
