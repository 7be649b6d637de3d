package demo

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
	"github.com/itlproxy/itlproxy/metrics"
)

// Models are the simulated upstream's models: a fast small one, a
// slower large one, and one whose stream stalls now and then, so the table
// shows three different shapes of latency.
var Models = []llmsim.Model{
	{Name: "llama-3.1-8b-instruct", TTFT: 120 * time.Millisecond, ITL: 12 * time.Millisecond, Jitter: 0.3, SpikeProb: 0.002, Spike: 150 * time.Millisecond},
	{Name: "qwen2.5-72b-instruct", TTFT: 450 * time.Millisecond, ITL: 38 * time.Millisecond, Jitter: 0.3, SpikeProb: 0.005, Spike: 300 * time.Millisecond},
	{Name: "mixtral-8x7b-instruct", TTFT: 250 * time.Millisecond, ITL: 22 * time.Millisecond, Jitter: 0.4, SpikeProb: 0.02, Spike: 600 * time.Millisecond},
}

// Objectives judge the demo's models, so that the SLO counters,
// goodput and the live page's attainment fill as soon as streams end. Two
// models meet theirs with room to spare. mixtral's TTFT (250 ms ± 40%,
// uniform) is over its 300 ms objective for about one stream in four, and
// its 600 ms spikes break its ITL objective: by design, the model an
// operator would be paged for.
var Objectives = map[string]metrics.Objectives{
	"llama-3.1-8b-instruct": {TTFT: 500 * time.Millisecond, ITL: 50 * time.Millisecond, TPOT: 30 * time.Millisecond, MaxGap: time.Second},
	"qwen2.5-72b-instruct":  {TTFT: time.Second, ITL: 100 * time.Millisecond, TPOT: 60 * time.Millisecond, MaxGap: time.Second},
	"mixtral-8x7b-instruct": {TTFT: 300 * time.Millisecond, ITL: 100 * time.Millisecond, TPOT: 60 * time.Millisecond, MaxGap: time.Second},
	Batch.Name:              {TTFT: 2 * time.Second, ITL: 100 * time.Millisecond, TPOT: 60 * time.Millisecond, MaxGap: 1500 * time.Millisecond},
}

// SLOs returns the objectives the demo runs with: the operator's when the
// environment or an SLO file sets any, else Objectives.
func SLOs(set metrics.SLOs) metrics.SLOs {
	if set.Default != (metrics.Objectives{}) || len(set.Models) > 0 || len(set.Classes) > 0 {
		return set
	}
	return metrics.SLOs{Models: Objectives}
}

// TableEvery is how often the demo prints its table.
const TableEvery = 5 * time.Second

// Run drives the proxy at target with n simulated clients of models, and
// prints a table of what the proxy measured (read from g, the registry
// its /metrics serves) to w every TableEvery, until stop is called.
func Run(ctx context.Context, target string, models []string, n int, g prometheus.Gatherer, w io.Writer, log *zap.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	for i := range n {
		wg.Go(func() { simulatedClient(ctx, client, target, models, i) })
	}
	if slices.Contains(models, Batch.Name) {
		wg.Go(func() { batchClients(ctx, client, target) })
	}
	wg.Go(func() { printTables(ctx, w, g, models, log) })
	return func() {
		cancel()
		wg.Wait()
		client.CloseIdleConnections()
	}
}

// simulatedClient sends requests until ctx is canceled: mostly streams, with
// and without usage, some non-streamed, and a few it abandons half-way, as
// impatient users do.
func simulatedClient(ctx context.Context, client *http.Client, target string, models []string, n int) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(time.Now().UnixNano())))
	for i := 0; ctx.Err() == nil; i++ {
		model := models[(n+i)%len(models)]
		path, promptField := "/v1/chat/completions", `"messages":[{"role":"user","content":"Tell me about latency."}]`
		if rng.IntN(5) == 0 {
			path, promptField = "/v1/completions", `"prompt":"Latency is"`
		}
		stream := rng.IntN(10) > 0 || model == Batch.Name // the engine serves streams only
		body := fmt.Sprintf(`{"model":%q,%s,"max_tokens":%d,"stream":%t`, model, promptField, 24+rng.IntN(160), stream)
		if stream && rng.IntN(2) == 0 {
			body += `,"stream_options":{"include_usage":true}`
		}
		body += "}"
		reqCtx, cancel := context.WithCancel(ctx)
		abandonAfter := -1
		if stream && rng.IntN(30) == 0 {
			abandonAfter = 5 + rng.IntN(20)
		}
		simulatedRequest(reqCtx, client, target+path, body, abandonAfter)
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(100+rng.IntN(400)) * time.Millisecond):
		}
	}
}

// simulatedRequest sends one request and reads the response; it cancels the
// request after abandonAfter events when that is not negative.
func simulatedRequest(ctx context.Context, client *http.Client, url, body string, abandonAfter int) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for events := 0; sc.Scan(); {
		if bytes.HasPrefix(sc.Bytes(), []byte("data:")) {
			events++
			if events == abandonAfter {
				return
			}
		}
	}
}

// printTables prints the table every TableEvery until ctx is canceled.
func printTables(ctx context.Context, w io.Writer, g prometheus.Gatherer, models []string, log *zap.Logger) {
	start := time.Now()
	every(ctx, TableEvery, TableEvery, func() {
		snap, err := snapshotOf(g)
		if err != nil {
			log.Warn("demo table", zap.Error(err))
			return
		}
		fmt.Fprint(w, snap.table(models, time.Since(start)))
	})
}
