package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Model is how Upstream answers for one model.
type Model struct {
	TTFT   time.Duration // from the request to the first token
	Tokens int
	// Gap returns the wait before each token after the first; turn is the
	// request's turn in its session (X-Session-Id), 1 without one.
	Gap func(turn int) time.Duration
	// FailEvery, when positive, answers every FailEvery-th request for the
	// model with a 503.
	FailEvery int
	// Malformed sends an event that is not JSON after the first token.
	Malformed bool
	// TokensPerEvent, when above 1, makes each chat chunk carry that many
	// tokens and report the count so far in its usage, as vLLM does with
	// continuous_usage_stats under speculative decoding.
	TokensPerEvent int
}

// Uniform returns a Model.Gap drawn uniformly from [lo, hi) at every turn.
func Uniform(lo, hi time.Duration) func(int) time.Duration {
	return func(int) time.Duration { return lo + rand.N(hi-lo) }
}

// Upstream is an OpenAI-compatible server for its Models: chat
// completions and completions, streamed ("stream":true, ending with usage
// and [DONE]) or whole; and Ollama's native /api/chat, streamed (native.go). It answers 400 for a model it does not know.
type Upstream struct {
	Models map[string]Model

	mu       sync.Mutex
	turns    map[string]int // by session id
	requests map[string]int // by model
}

var modelField = regexp.MustCompile(`"model":"([^"]+)"`)

func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/realtime" {
		u.realtime(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	match := modelField.FindSubmatch(body)
	if match == nil {
		http.Error(w, "no model", http.StatusBadRequest)
		return
	}
	name := string(match[1])
	m, ok := u.Models[name]
	if !ok {
		http.Error(w, "unknown model", http.StatusBadRequest)
		return
	}
	n, turn := u.count(name, r.Header.Get("X-Session-Id"))
	if m.FailEvery > 0 && n%m.FailEvery == 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error"}}`)
		return
	}
	if r.URL.Path == "/api/chat" { // Ollama's, streamed by default
		m.ollamaChat(w, r, name, turn)
		return
	}
	if !strings.Contains(string(body), `"stream":true`) {
		time.Sleep(m.TTFT)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"done"}}],"usage":{"prompt_tokens":9,"completion_tokens":%d}}`, name, m.Tokens)
		return
	}
	m.stream(w, r, strings.HasSuffix(r.URL.Path, "/chat/completions"), turn)
}

// realtime serves the Realtime API for the model the query names: each
// response is audio with its transcript, the model's Tokens deltas
// apart by its Gap (each response a turn of the connection's session),
// the first its TTFT after the response.create.
func (u *Upstream) realtime(w http.ResponseWriter, r *http.Request) {
	m, ok := u.Models[r.URL.Query().Get("model")]
	if !ok {
		http.Error(w, "unknown model", http.StatusBadRequest)
		return
	}
	plan := RealtimePlan{Kind: "audio", Deltas: m.Tokens, TTFT: m.TTFT, Gap: m.Gap}
	(&RealtimeUpstream{Compression: websocket.CompressionContextTakeover, Default: plan}).ServeHTTP(w, r)
}

// count counts a request for model, and one more turn of session; it
// returns the model's request count and the turn.
func (u *Upstream) count(model, session string) (n, turn int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.requests == nil {
		u.requests, u.turns = map[string]int{}, map[string]int{}
	}
	u.requests[model]++
	turn = 1
	if session != "" {
		u.turns[session]++
		turn = u.turns[session]
	}
	return u.requests[model], turn
}

func (m Model) stream(w http.ResponseWriter, r *http.Request, chat bool, turn int) {
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	send := func(data string) bool {
		_, err := io.WriteString(w, "data: "+data+"\n\n")
		return err == nil && rc.Flush() == nil
	}
	wait := m.TTFT
	for i := range m.Tokens {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(wait):
		}
		wait = m.Gap(turn)
		chunk := fmt.Sprintf(`{"choices":[{"index":0,"text":"t%d"}]}`, i)
		switch {
		case chat && m.TokensPerEvent > 1:
			chunk = fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":"t%d"}}],"usage":{"prompt_tokens":9,"completion_tokens":%d}}`, i, (i+1)*m.TokensPerEvent)
		case chat:
			chunk = fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":"t%d"}}]}`, i)
		}
		if !send(chunk) || m.Malformed && i == 0 && !send(`{"choices":[{"delta":`) {
			return
		}
	}
	send(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":%d}}`, m.Tokens*max(m.TokensPerEvent, 1)))
	send("[DONE]")
}

// Client is one client of Load: it posts Body to Path, one request after
// another; or, with Realtime set, it speaks the Realtime API.
type Client struct {
	Path, Body string
	Session    string // the X-Session-Id header, when not empty
	Abandon    bool   // reads 64 bytes of each answer, then hangs up
	// Realtime names a model: the client opens one Realtime API
	// WebSocket for it and asks for one response after another.
	Realtime string
}

// Load runs clients against the proxy at addr until d has passed: each
// sends at least one request, and finishes the one it has in flight at
// the end.
func Load(t testing.TB, addr string, d time.Duration, clients ...Client) {
	t.Helper()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			if c.Realtime != "" {
				if err := realtimeLoad(context.Background(), addr, c.Realtime, deadline); err != nil {
					t.Errorf("realtime client of %s: %v", c.Realtime, err)
				}
				return
			}
			for first := true; first || time.Now().Before(deadline); first = false {
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+c.Path, strings.NewReader(c.Body))
				req.Header.Set("Content-Type", "application/json")
				if c.Session != "" {
					req.Header.Set("X-Session-Id", c.Session)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				if c.Abandon {
					_, _ = io.ReadFull(resp.Body, make([]byte, 64))
				} else {
					_, _ = io.Copy(io.Discard, resp.Body)
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

// Streams returns n clients streaming chat completions of each model.
func Streams(n int, models ...string) []Client {
	var out []Client
	for _, model := range models {
		for range n {
			out = append(out, Client{Path: "/v1/chat/completions", Body: fmt.Sprintf(`{"model":%q,"stream":true}`, model)})
		}
	}
	return out
}
