package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
)

// BatchModel is the demo's model served by a batch-stepping engine
// without chunked prefill (llmsim.Engine), as vLLM serves a large model
// with it off: its streams stall now and then for another request's long
// prompt, prefilled whole while they wait, and whenever the engine pauses
// on its own (a preemption, a garbage collection). The live page and the
// table show those stalls by cause.
type BatchModel struct {
	Name   string
	Engine llmsim.EngineConfig
	// LongPrompt is the prompt, in tokens, a client sends every
	// LongPromptEvery, the first a third of that after the start.
	LongPrompt      int
	LongPromptEvery time.Duration
	// The engine pauses for Pause every PauseEvery, the first half of
	// that after the start.
	Pause, PauseEvery time.Duration
}

// Batch is the demo's batch-stepping model: a 30 ms decode step, and a
// prefill of 120 µs per prompt token, so that a long prompt of 8,000
// tokens holds its running streams for about a second.
var Batch = BatchModel{
	Name:            "llama-3.3-70b-instruct",
	Engine:          llmsim.EngineConfig{Step: 30 * time.Millisecond, PrefillPerToken: 120 * time.Microsecond},
	LongPrompt:      8000,
	LongPromptEvery: 12 * time.Second,
	Pause:           1200 * time.Millisecond,
	PauseEvery:      17 * time.Second,
}

// StallThreshold is the demo's stall threshold, unless
// ITLPROXY_STALL_THRESHOLD sets one: under the batch model's stalls, over
// its steps and the other models' spikes.
const StallThreshold = 700 * time.Millisecond

// Upstream is the demo's simulated upstream: the profile models (llmsim)
// and the batch model, whose engine pauses on its own until stop. It
// returns the models it serves, the batch model last.
func Upstream() (h http.Handler, models []string, stop func()) {
	sim := llmsim.New(Models...)
	engine := llmsim.NewEngine(Batch.Engine)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		every(ctx, Batch.PauseEvery/2, Batch.PauseEvery, func() { engine.Pause(Batch.Pause) })
	})
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Body != nil {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req struct{ Model string }
			if json.Unmarshal(body, &req) == nil && req.Model == Batch.Name {
				engine.ServeHTTP(w, r)
				return
			}
		}
		sim.ServeHTTP(w, r)
	})
	return h, append(sim.Models(), Batch.Name), func() {
		cancel()
		wg.Wait()
		engine.Close()
	}
}

// every calls f after first, then period after each call returned, until
// ctx is canceled.
func every(ctx context.Context, first, period time.Duration, f func()) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
		t.Reset(period)
	}
}

// batchClients drive the batch model beside the simulated clients: one
// keeps a long stream running, so that each long prompt and each pause
// stalls a stream, and one sends a long prompt every LongPromptEvery.
func batchClients(ctx context.Context, client *http.Client, target string) {
	var wg sync.WaitGroup
	wg.Go(func() {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Tell me a long story."}],"max_tokens":400,"stream":true}`, Batch.Name)
		for ctx.Err() == nil {
			simulatedRequest(ctx, client, target+"/v1/chat/completions", body, -1)
		}
	})
	wg.Go(func() {
		prompt := strings.Repeat("word ", Batch.LongPrompt*4/5)
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":32,"stream":true}`, Batch.Name, prompt)
		every(ctx, Batch.LongPromptEvery/3, Batch.LongPromptEvery, func() {
			simulatedRequest(ctx, client, target+"/v1/chat/completions", body, -1)
		})
	})
	wg.Wait()
}
