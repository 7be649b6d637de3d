package llmsim

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// engineClient reads one stream from an Engine and stamps each token's
// arrival.
type engineClient struct {
	id      string
	arrived []time.Time
	err     error
}

func (c *engineClient) run(url string, tokens, promptBytes int) {
	body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
		tokens, strings.Repeat("x", promptBytes))
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Request-Id", c.id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.err = err
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: {") && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			c.arrived = append(c.arrived, time.Now())
		}
	}
	c.err = sc.Err()
}

// TestEngineSteps: streams decode a token per 20 ms step; a long prompt's
// prefill step (600 ms) gives no running stream a token, and ends with its
// first token, before their next; a pause (400 ms) gives none either, and
// a short request that arrived during it is prefilled at its end, its
// first token again before theirs. The trace says each step in order, and
// the clients see the gaps it says.
func TestEngineSteps(t *testing.T) {
	var mu sync.Mutex
	var steps []EngineStep
	e := NewEngine(EngineConfig{Step: 20 * time.Millisecond, PrefillPerToken: 100 * time.Microsecond,
		Trace: func(s EngineStep) { mu.Lock(); steps = append(steps, s); mu.Unlock() }})
	defer e.Close()
	srv := httptest.NewServer(e)
	defer srv.Close()

	var wg sync.WaitGroup
	running := []*engineClient{{id: "a"}, {id: "b"}}
	for _, c := range running {
		wg.Go(func() { c.run(srv.URL, 60, 10) })
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	long := &engineClient{id: "long"}
	wg.Go(func() { long.run(srv.URL, 3, 4*6000-80) }) // about 6,000 prompt tokens: 600 ms
	time.Sleep(1200 * time.Millisecond)
	e.Pause(400 * time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	short := &engineClient{id: "short"}
	wg.Go(func() { short.run(srv.URL, 3, 10) })
	wg.Wait()
	for _, c := range append(running, long, short) {
		if c.err != nil {
			t.Fatalf("%s: %v", c.id, c.err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	var kinds []string
	for _, s := range steps {
		if s.Kind != Decoded {
			kinds = append(kinds, s.Kind.String()+" "+strings.Join(s.Requests, ","))
		}
	}
	want := []string{"arrived a", "prefill a", "arrived b", "prefill b", "arrived long", "prefill long", "pause ", "arrived short", "prefill short"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("steps other than decoding: %q, want %q", kinds, want)
	}
	prefill := steps[slices.IndexFunc(steps, func(s EngineStep) bool { return s.Kind == Prefilled && s.Requests[0] == "long" })]
	pause := steps[slices.IndexFunc(steps, func(s EngineStep) bool { return s.Kind == Paused })]
	if d := prefill.End.Sub(prefill.Start); d < 600*time.Millisecond || d > 900*time.Millisecond {
		t.Errorf("the long prompt's prefill took %v, want 600 ms", d)
	}
	for _, c := range running {
		// The stall: the gap that holds the prefill, and the one that
		// holds the pause; the others a step.
		var stalls []time.Duration
		for i := 1; i < len(c.arrived); i++ {
			if g := c.arrived[i].Sub(c.arrived[i-1]); g > 200*time.Millisecond {
				stalls = append(stalls, g)
			}
		}
		if len(stalls) != 2 || stalls[0] < 620*time.Millisecond || stalls[1] < 420*time.Millisecond {
			t.Errorf("%s's gaps over 200 ms: %v, want the prefill's (620 ms or more) and the pause's (420 ms or more)", c.id, stalls)
		}
		// Each stall ends a step after the first token of the request
		// prefilled at its end.
		for _, first := range []time.Time{long.arrived[0], short.arrived[0]} {
			i := slices.IndexFunc(c.arrived, func(at time.Time) bool { return at.After(first) })
			if i < 0 || c.arrived[i].Sub(first) > 200*time.Millisecond {
				t.Errorf("%s: no token within a few steps after a prefill's first token", c.id)
			}
		}
	}
	if !short.arrived[0].After(pause.End.Add(-time.Millisecond)) {
		t.Errorf("the short request's first token came at %v, before the pause ended at %v", short.arrived[0], pause.End)
	}
}

// TestEngineClientThatStopsReading: a client that reads nothing holds its
// own stream only: the loop keeps its steps, and the other stream's gaps
// stay a step.
func TestEngineClientThatStopsReading(t *testing.T) {
	e := NewEngine(EngineConfig{Step: 10 * time.Millisecond, TokenBytes: 64 << 10})
	defer e.Close()
	srv := httptest.NewServer(e)
	defer srv.Close()
	body := `{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() // never read until the other ends
	other := &engineClient{id: "other"}
	other.run(srv.URL, 50, 10)
	if other.err != nil || len(other.arrived) != 50 {
		t.Fatalf("the other stream: %d tokens, %v", len(other.arrived), other.err)
	}
	for i := 1; i < len(other.arrived); i++ {
		if g := other.arrived[i].Sub(other.arrived[i-1]); g > 150*time.Millisecond {
			t.Errorf("the other stream waited %v between tokens %d and %d", g, i, i+1)
		}
	}
}
