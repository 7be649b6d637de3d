package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// LoadUpstream streams chat completions whose gap between tokens grows
// with the streams it serves at once, as a decode step shared by every
// sequence of a batch does: Base + PerStream x streams. Its streams run in
// rounds (Round): a round's streams all arrive before any sends a token,
// and none ends before every client has read its last token, so every gap
// a proxy in front of it measures ends with exactly the round's streams in
// flight.
type LoadUpstream struct {
	Base, PerStream time.Duration
	// Tokens is the token-bearing events of each stream of the next Round;
	// it then sends its usage (completion_tokens = Tokens) and [DONE].
	Tokens int

	mu    sync.Mutex
	round *round
}

// round is one Round's gates.
type round struct {
	n       int
	tokens  int
	gap     time.Duration
	arrived atomic.Int64
	allIn   chan struct{} // closed when n streams have arrived
	read    atomic.Int64
	allRead chan struct{} // closed when n clients have read their last token
}

// Gap is the upstream's gap between tokens with n streams in flight.
func (u *LoadUpstream) Gap(n int) time.Duration { return u.Base + time.Duration(n)*u.PerStream }

func (u *LoadUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	rd := u.round
	u.mu.Unlock()
	if rd == nil {
		http.Error(w, "no round", http.StatusServiceUnavailable)
		return
	}
	if rd.arrived.Add(1) == int64(rd.n) {
		close(rd.allIn)
	}
	<-rd.allIn
	w.Header().Set("Content-Type", "text/event-stream")
	flusher := w.(http.Flusher)
	for i := range rd.tokens {
		if i > 0 {
			time.Sleep(rd.gap)
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
		flusher.Flush()
	}
	select {
	case <-rd.allRead:
	case <-r.Context().Done():
		return
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", rd.tokens)
	flusher.Flush()
}

// Round sends n concurrent streams of model through the proxy at base
// (http://host:port) and returns when every response has ended. Each
// client checks that it read every token, the usage and [DONE].
func (u *LoadUpstream) Round(t testing.TB, base, model string, n int) {
	t.Helper()
	rd := &round{n: n, tokens: u.Tokens, gap: u.Gap(n), allIn: make(chan struct{}), allRead: make(chan struct{})}
	u.mu.Lock()
	u.round = rd
	u.mu.Unlock()
	body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, model)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			tokens, done := 0, false
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				line := sc.Bytes()
				switch {
				case bytes.Contains(line, []byte(`"content":"t`)):
					if tokens++; tokens == rd.tokens && rd.read.Add(1) == int64(n) {
						close(rd.allRead)
					}
				case bytes.Equal(line, []byte("data: [DONE]")):
					done = true
				}
			}
			if err := sc.Err(); err != nil || tokens != rd.tokens || !done {
				t.Errorf("stream of %s: %d tokens of %d, [DONE] %v, %v", model, tokens, rd.tokens, done, err)
			}
		})
	}
	wg.Wait()
}
