package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/metrics"
)

// The stall tests' shape: every duration well above a loaded machine's
// scheduling noise. A decode step of 25 ms; stalls of 600 ms (a prefill
// of 6,000 prompt tokens, a pause, a client that stops reading); a
// threshold of 250 ms; a second or more between stalls.
const (
	stallStep      = 25 * time.Millisecond
	stallPerToken  = 100 * time.Microsecond
	stallThreshold = 250 * time.Millisecond
	stallLength    = 600 * time.Millisecond
	// longPrompt is a request body of about 6,000 prompt tokens (the
	// engine counts one per 4 bytes): a 600 ms prefill.
	longPromptBytes = 4 * int(stallLength/stallPerToken)
	// stallTokenBytes pads each token to 8 KiB, so that a client that
	// stops reading fills the sockets (a 16 KiB send buffer, a 4 KiB
	// receive buffer) within a few tokens.
	stallTokenBytes = 8 << 10
)

// engineLog keeps what an engine did, step by step.
type engineLog struct {
	mu    sync.Mutex
	steps []llmsim.EngineStep
	// arrived, when set, hears each request the engine takes, as it takes
	// it.
	arrived func(id string)
}

func (l *engineLog) trace(s llmsim.EngineStep) {
	l.mu.Lock()
	l.steps = append(l.steps, s)
	arrived := l.arrived
	l.mu.Unlock()
	if s.Kind == llmsim.Arrived && arrived != nil {
		arrived(s.Requests[0])
	}
}

// stallSeen is a stall as expected or as recorded: its cause, the
// request of its prefill, and (expected) when it ended.
type stallSeen struct {
	cause, prefill string
	at             time.Time
}

func (s stallSeen) String() string {
	if s.cause == metrics.StallPrefill {
		return "prefill of " + s.prefill
	}
	return s.cause
}

// stalls are the stalls the engine made, by request: each gap between two
// tokens of a stream longer than the threshold, its cause the longest
// step within it: a prefill (of the request it prefilled), or a pause or
// a step the machine made late (the upstream's). A gap within 30% of the
// threshold, which the proxy's stamps could put on either side of it, is
// a test that cannot judge: it fails.
func (l *engineLog) stalls(t *testing.T) map[string][]stallSeen {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	tokens := map[string][]time.Time{}
	for _, s := range l.steps {
		if s.Kind == llmsim.Prefilled || s.Kind == llmsim.Decoded {
			for _, id := range s.Requests {
				tokens[id] = append(tokens[id], s.End)
			}
		}
	}
	out := map[string][]stallSeen{}
	for id, times := range tokens {
		for i := 1; i < len(times); i++ {
			from, to := times[i-1], times[i]
			gap := to.Sub(from)
			if gap > stallThreshold*7/10 && gap < stallThreshold*13/10 {
				t.Fatalf("%s: a gap of %v the engine made, too near the threshold of %v to tell what the proxy must count", id, gap, stallThreshold)
			}
			if gap <= stallThreshold {
				continue
			}
			var longest llmsim.EngineStep
			for _, s := range l.steps {
				if s.Kind != llmsim.Arrived && !s.Start.Before(from) && !s.End.After(to) && s.End.Sub(s.Start) > longest.End.Sub(longest.Start) {
					longest = s
				}
			}
			st := stallSeen{cause: metrics.StallUpstream, at: to}
			if longest.Kind == llmsim.Prefilled {
				st.cause, st.prefill = metrics.StallPrefill, longest.Requests[0]
			}
			out[id] = append(out[id], st)
		}
	}
	return out
}

// count is how many times the engine did k.
func (l *engineLog) count(k llmsim.StepKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.steps {
		if s.Kind == k {
			n++
		}
	}
	return n
}

// startEngine serves a batch-stepping engine whose steps l keeps.
func startEngine(t *testing.T, l *engineLog) (*llmsim.Engine, string) {
	e := llmsim.NewEngine(llmsim.EngineConfig{Step: stallStep, PrefillPerToken: stallPerToken, TokenBytes: stallTokenBytes, Trace: l.trace})
	srv := httptest.NewServer(e)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		e.Close()
	})
	return e, srv.URL
}

// stallClient streams one chat completion through the proxy over a
// connection with a 4 KiB receive buffer, and can stop reading for a
// while.
type stallClient struct {
	id      string
	first   chan struct{} // closed at its first token
	stopped chan time.Duration
	// stops are when it stopped and started reading again.
	stops [][2]time.Time
	err   error
}

func newStallClient(id string) *stallClient {
	return &stallClient{id: id, first: make(chan struct{}), stopped: make(chan time.Duration, 1)}
}

// stop makes the client read nothing for d, from its next read on.
func (c *stallClient) stop(d time.Duration) { c.stopped <- d }

func (c *stallClient) run(proxy string, tokens, promptBytes int) {
	dialer := &net.Dialer{Control: func(_, _ string, raw syscall.RawConn) error {
		return raw.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		})
	}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}}
	body := fmt.Sprintf(`{"model":"batch","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
		tokens, strings.Repeat("x", promptBytes))
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+proxy+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Request-Id", c.id)
	resp, err := client.Do(req)
	if err != nil {
		c.err = err
		close(c.first)
		return
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 4<<10)
	firstSeen := false
	for {
		select {
		case d := <-c.stopped:
			from := time.Now()
			time.Sleep(d)
			c.stops = append(c.stops, [2]time.Time{from, time.Now()})
		default:
		}
		line, err := r.ReadString('\n')
		if !firstSeen && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			firstSeen = true
			close(c.first)
		}
		if err != nil {
			if err != io.EOF {
				c.err = err
			}
			if !firstSeen {
				c.err = fmt.Errorf("the stream ended without a token: %v", err)
				close(c.first)
			}
			return
		}
	}
}

// recordedStalls reads the recorded stream id's stalls from the proxy at
// admin.
func recordedStalls(t *testing.T, admin, id string) []stallSeen {
	t.Helper()
	var e struct {
		Stalls []struct {
			Cause     string  `json:"cause"`
			Seconds   float64 `json:"seconds"`
			RequestID string  `json:"request_id"`
		} `json:"stalls"`
	}
	if code := getJSON(t, "http://"+admin+"/debug/streams/"+id, &e); code != http.StatusOK {
		t.Fatalf("/debug/streams/%s: %d", id, code)
	}
	var out []stallSeen
	for _, s := range e.Stalls {
		if s.Seconds <= stallThreshold.Seconds() {
			t.Errorf("%s: a stall of %.3fs recorded, not over the threshold", id, s.Seconds)
		}
		out = append(out, stallSeen{cause: s.Cause, prefill: s.RequestID})
	}
	return out
}

// checkStalls compares what the proxy counted and recorded with what was
// expected of each stream, stall for stall, in order.
func checkStalls(t *testing.T, proxy *e2e.Process, want map[string][]stallSeen, ids []string) {
	t.Helper()
	e2e.WaitFor(t, "every stream counted", 10*time.Second, func() bool {
		return scrapeAdmin(t, proxy.Admin).Value("itlproxy_streams_total") == float64(len(ids))
	})
	fs := scrapeAdmin(t, proxy.Admin)
	wantBy := map[string]int{}
	for _, id := range ids {
		for _, s := range want[id] {
			wantBy[s.cause]++
		}
		var w []string
		for _, s := range want[id] {
			w = append(w, s.String())
		}
		var got []string
		for _, s := range recordedStalls(t, proxy.Admin, id) {
			got = append(got, s.String())
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s: recorded stalls %q, want %q", id, got, w)
		} else {
			t.Logf("%s: %q", id, got)
		}
	}
	for _, cause := range []string{metrics.StallPrefill, metrics.StallClient, metrics.StallUpstream} {
		if got := fs.Value("itlproxy_stalls_total", "cause", cause); got != float64(wantBy[cause]) {
			t.Errorf("itlproxy_stalls_total{cause=%q} = %v, want %d", cause, got, wantBy[cause])
		}
	}
}

// withClientStalls adds each client's stops to the stalls expected of its
// stream, in order: each stop is one stall of the client.
func withClientStalls(want map[string][]stallSeen, clients ...*stallClient) {
	for _, c := range clients {
		for _, stop := range c.stops {
			want[c.id] = append(want[c.id], stallSeen{cause: metrics.StallClient, at: stop[1]})
		}
		slices.SortFunc(want[c.id], func(a, b stallSeen) int { return a.at.Compare(b.at) })
	}
}

// TestStallCauses runs a batch-stepping engine behind the real binary:
// four streams run while a long prompt arrives (its prefill stalls them),
// the engine pauses on its own (a short request arriving in the middle of
// the pause, whose first token lands at its end), two clients stop
// reading for 600 ms, and a second long prompt arrives. Every stall the
// engine made and every one the clients did is counted by its cause,
// stall for stall, and recorded in order in each stream's entry, a
// prefill naming the request prefilled; the live page shows the causes.
func TestStallCauses(t *testing.T) {
	var log engineLog
	engine, url := startEngine(t, &log)
	proxy := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":       url,
		"ITLPROXY_STALL_THRESHOLD":    stallThreshold.String(),
		"ITLPROXY_CLIENT_SEND_BUFFER": "16KiB",
	})
	var wg sync.WaitGroup
	run := func(c *stallClient, tokens, prompt int) {
		wg.Go(func() { c.run(proxy.Proxy, tokens, prompt) })
	}
	var running []*stallClient
	for i := range 4 {
		c := newStallClient(fmt.Sprintf("steady-%d", i+1))
		running = append(running, c)
		run(c, 260, 40)
		<-c.first
	}
	time.Sleep(time.Second)
	prefills := []*stallClient{newStallClient("prefill-1"), newStallClient("prefill-2")}
	run(prefills[0], 4, longPromptBytes)
	time.Sleep(1500 * time.Millisecond)
	engine.Pause(stallLength)
	time.Sleep(stallLength / 2)
	short := newStallClient("short-1")
	run(short, 4, 40)
	time.Sleep(1400 * time.Millisecond)
	running[0].stop(stallLength)
	running[1].stop(stallLength)
	time.Sleep(1600 * time.Millisecond)
	run(prefills[1], 4, longPromptBytes)
	wg.Wait()
	ids := []string{"short-1"}
	for _, c := range append(append(running, prefills...), short) {
		if c.err != nil {
			t.Fatalf("%s: %v", c.id, c.err)
		}
		if c != short {
			ids = append(ids, c.id)
		}
	}
	if log.count(llmsim.Paused) != 1 || log.count(llmsim.Prefilled) < 7 {
		t.Fatalf("the engine paused %d times and prefilled %d times, want once and 7", log.count(llmsim.Paused), log.count(llmsim.Prefilled))
	}
	want := log.stalls(t)
	withClientStalls(want, running[:2]...)
	for _, c := range running {
		if n := len(want[c.id]); n < 3 {
			t.Fatalf("%s: the engine and its client made %v, not the two prefills and the pause at least", c.id, want[c.id])
		}
	}
	checkStalls(t, proxy, want, ids)

	dom := chromiumDOMIn(t, "stalls", "http://"+proxy.Admin+"/")
	for _, cause := range []string{metrics.StallPrefill, metrics.StallClient, metrics.StallUpstream} {
		if !regexp.MustCompile(`<span class="stall" data-gap="\d+" data-cause="`+cause+`">`).MatchString(dom) ||
			!strings.Contains(dom, `data-cause="`+cause+`" x="`) {
			t.Errorf("the live page shows no %s stall:\n%s", cause, dom)
		}
	}
	if !strings.Contains(dom, `(prefill of <a href="/debug/streams/prefill-1">prefill-1</a>)`) {
		t.Errorf("the live page does not name the prefill:\n%s", dom)
	}
}

// TestStallCausesPerServer balances over two engines: as one prefills a
// long prompt, the other pauses for as long, so that the prefill's first
// token lands at the end of the other's stall too. Each stall is judged
// against its own server: the first's streams stalled for the prefill,
// the second's on their own.
func TestStallCausesPerServer(t *testing.T) {
	var logs [2]engineLog
	var engines [2]*llmsim.Engine
	var urls [2]string
	for i := range engines {
		engines[i], urls[i] = startEngine(t, &logs[i])
	}
	var paused atomic.Int32
	for i := range logs {
		other := engines[1-i]
		logs[i].arrived = func(id string) {
			if id == "prefill-1" && paused.CompareAndSwap(0, int32(i+1)) {
				other.Pause(stallLength)
			}
		}
	}
	proxy := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":    urls[0] + "," + urls[1],
		"ITLPROXY_STALL_THRESHOLD": stallThreshold.String(),
	})
	var wg sync.WaitGroup
	var clients []*stallClient
	for i := range 4 {
		c := newStallClient(fmt.Sprintf("steady-%d", i+1))
		clients = append(clients, c)
		wg.Go(func() { c.run(proxy.Proxy, 120, 40) })
		<-c.first
	}
	time.Sleep(time.Second)
	prefill := newStallClient("prefill-1")
	clients = append(clients, prefill)
	wg.Go(func() { prefill.run(proxy.Proxy, 4, longPromptBytes) })
	wg.Wait()
	var ids []string
	for _, c := range clients {
		if c.err != nil {
			t.Fatalf("%s: %v", c.id, c.err)
		}
		ids = append(ids, c.id)
	}
	prefilled := int(paused.Load()) - 1
	if prefilled < 0 || logs[1-prefilled].count(llmsim.Paused) != 1 {
		t.Fatal("no engine prefilled the long prompt while the other paused")
	}
	want := map[string][]stallSeen{}
	for i := range logs {
		for id, stalls := range logs[i].stalls(t) {
			want[id] = append(want[id], stalls...)
		}
	}
	causes := map[string]bool{}
	for _, stalls := range want {
		for _, s := range stalls {
			causes[s.String()] = true
		}
	}
	if !causes["prefill of prefill-1"] || !causes[metrics.StallUpstream] {
		t.Fatalf("the engines made %v: not a prefill on one and a pause on the other", want)
	}
	checkStalls(t, proxy, want, ids)
}
