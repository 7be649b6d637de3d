package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/internal/testdns"
	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/transport"
	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// ejections counts the servers a set sets aside.
type ejections struct {
	mu  sync.Mutex
	set []string
}

func (*ejections) Resolved(_, _ []*upstream.Server) {}
func (*ejections) ResolveFailed(error)              {}
func (*ejections) LeftOut([]string)                 {}
func (e *ejections) Ejected(sv *upstream.Server, _ time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.set = append(e.set, sv.Addr)
}

func (e *ejections) addrs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.set...)
}

// closedAddr is a loopback address nothing listens on: a dial to it is
// refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// staticSet is upstream.NewStatic, which the test expects to succeed.
func staticSet(t *testing.T, urls []*url.URL, o upstream.Options) *upstream.Set {
	t.Helper()
	set, err := upstream.NewStatic(urls, o)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A request to a server that refuses the connection goes to another,
// whole (its body sent again from the start), and is counted once, on
// the server that served it; the one that refused is set aside once.
func TestRefusedServerRetriedElsewhere(t *testing.T) {
	var bodies []string
	var mu sync.Mutex
	up := arrivalUpstream(5 * time.Millisecond)
	dead := closedAddr(t)
	ev := &ejections{}
	var good *url.URL
	var set *upstream.Set
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		up.ServeHTTP(w, r)
	}), func(c *Config, _ *metrics.Options) {
		good = c.Upstream
		set = staticSet(t, []*url.URL{mustParse(t, "http://"+dead), good},
			upstream.Options{MaxLabels: 8, EjectFor: time.Minute, Events: ev})
		c.Servers = set
	})
	// As the command's events tell the metrics the set.
	var labels []string
	for _, sv := range set.Servers() {
		labels = append(labels, sv.Label())
	}
	h.rec.UpstreamsChanged(labels, nil)
	const n = 8
	for range n {
		resp := h.post("/v1/chat/completions", arrivalBody)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "[DONE]") {
			t.Fatalf("%s: %s", resp.Status, body)
		}
	}
	h.waitServed(n)
	mu.Lock()
	for _, b := range bodies {
		if b != arrivalBody {
			t.Errorf("the upstream got body %q, want the request's", b)
		}
	}
	mu.Unlock()
	if got := ev.addrs(); len(got) > 1 || len(got) == 1 && got[0] != dead {
		t.Errorf("set aside %v, want at most %s once (set aside for a minute)", got, dead)
	}
	if v := h.counter("itlproxy_upstream_streams_total", "upstream", good.Host); v != n {
		t.Errorf("streams on %s: %v, want %d", good.Host, v, n)
	}
	if v := h.counter("itlproxy_upstream_streams_total", "upstream", dead); v != 0 {
		t.Errorf("streams on the refusing %s: %v, want 0", dead, v)
	}
	if v := h.counter("itlproxy_streams_total"); v != n {
		t.Errorf("streams %v, want %d: a retried request counted once", v, n)
	}
}

// A client that gives up while the proxy still dials a server (one
// slow to accept) sets none aside: the dial failed because of the client.
func TestCanceledClientSetsNoServerAside(t *testing.T) {
	ev := &ejections{}
	var urls []*url.URL
	for range 3 {
		urls = append(urls, mustParse(t, "http://"+closedAddr(t)))
	}
	set := staticSet(t, urls, upstream.Options{MaxLabels: 8, EjectFor: time.Minute, Events: ev})
	lean := transport.NewLean(0, nil)
	var d net.Dialer
	lean.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		<-ctx.Done() // no answer to the connection until the client has gone
		return d.DialContext(ctx, network, addr)
	}
	h := newHarness(t, nil, func(c *Config, _ *metrics.Options) {
		c.Upstream, c.Servers, c.Transport = urls[0], set, lean
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.proxy.URL+"/v1/chat/completions", strings.NewReader(arrivalBody))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	h.waitServed(1)
	if got := ev.addrs(); len(got) != 0 {
		t.Errorf("one client's cancellation set aside %v", got)
	}
}

// Requests to the addresses a name resolves to carry the name as their
// Host header, as a request to the name would.
func TestResolvedServerKeepsTheName(t *testing.T) {
	var host atomic.Value
	d := testdns.Start(t, "llm.test.", "127.0.0.1")
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, network, d.Addr)
	}}
	var port string
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { host.Store(r.Host) }), func(c *Config, _ *metrics.Options) {
		port = c.Upstream.Port()
		c.Upstream = mustParse(t, "http://llm.test.:"+port)
		set, err := upstream.NewResolved(context.Background(), c.Upstream, resolver, time.Minute, upstream.Options{MaxLabels: 4, EjectFor: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c.Servers = set
	})
	resp, err := http.Get(h.proxy.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h.waitServed(1)
	if got, want := host.Load(), "llm.test.:"+port; got != want {
		t.Errorf("the upstream got Host %q, want %q", got, want)
	}
}

// A pool that refuses every connection costs a request maxTries dials,
// whatever its size, and the client a 502 at once; every refusal is
// counted, and logged at a bounded rate: one line for all of them, and
// one for all the 502s.
func TestRefusingPoolBounded(t *testing.T) {
	var urls []*url.URL
	for range 50 {
		urls = append(urls, mustParse(t, "http://"+closedAddr(t)))
	}
	ev := &laterEvents{}
	var set *upstream.Set
	h := newHarness(t, nil, func(c *Config, _ *metrics.Options) {
		set = staticSet(t, urls, upstream.Options{MaxLabels: 8, EjectFor: time.Minute, Events: ev})
		c.Upstream, c.Servers = urls[0], set
	})
	// The proxy's events, on its metrics and its log, as the command's.
	ev.Events = UpstreamEvents(h.rec, zap.New(h.logCore), nil)
	ev.Resolved(set.Servers(), nil)
	const n = 10
	for range n {
		resp := h.post("/v1/chat/completions", arrivalBody)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), `"code":"upstream_unreachable"`) {
			t.Fatalf("%d %s, want 502 upstream_unreachable", resp.StatusCode, body)
		}
	}
	h.waitServed(n)
	if v := h.counter("itlproxy_upstream_ejections_total"); v != n*maxTries {
		t.Errorf("%v refusals counted, want %d: %d tried for each request", v, n*maxTries, maxTries)
	}
	if got := h.logs.FilterMessageSnippet("refused a connection").Len(); got != 1 {
		t.Errorf("%d lines of refusals, want 1", got)
	}
	if got := h.logs.FilterMessageSnippet("upstream unreachable").Len(); got != 1 {
		t.Errorf("%d lines of requests answered 502, want 1", got)
	}
}

// laterEvents hands a set's events to Events once it is set, and drops
// those before.
type laterEvents struct{ upstream.Events }

func (l *laterEvents) Resolved(servers, removed []*upstream.Server) {
	if l.Events != nil {
		l.Events.Resolved(servers, removed)
	}
}

func (l *laterEvents) LeftOut(addrs []string) {
	if l.Events != nil {
		l.Events.LeftOut(addrs)
	}
}
