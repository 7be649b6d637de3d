package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/itlproxy/itlproxy/proxy/events"
)

// bench is one load run: the workers, what they share, and the stats.
type bench struct {
	cfg    config
	client *http.Client
	header http.Header // every request's headers but the session id
	runID  string      // in session ids, so that runs do not share them

	stats    []*modelStats // in the order of cfg.models
	bodies   [][]byte      // each model's request body
	schedule []int         // model indexes, one weighted round-robin cycle
	picks    atomic.Uint64

	start, deadline time.Time // deadline: zero without -duration
	started         atomic.Int64
	inFlight        atomic.Int64
	peakInFlight    atomic.Int64 // of the measured run
	sessions        atomic.Int64
	pacer           *pacer // nil without -rate
}

func newBench(cfg config) (*bench, error) {
	b := &bench{cfg: cfg, header: cfg.header.Clone()}
	b.client = &http.Client{
		Transport: newTransport(cfg),
		// A redirect would measure another request than the one sent.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if b.header.Get("Content-Type") == "" {
		b.header.Set("Content-Type", "application/json")
	}
	if b.header.Get("User-Agent") == "" {
		b.header.Set("User-Agent", "itlbench/"+version)
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	b.runID = hex.EncodeToString(id)
	for _, m := range cfg.models {
		body, err := requestBody(cfg, m.Name)
		if err != nil {
			return nil, err
		}
		b.bodies = append(b.bodies, body)
		b.stats = append(b.stats, newModelStats(m.Name))
	}
	b.schedule = roundRobin(cfg.models)
	if cfg.rate > 0 {
		b.pacer = &pacer{every: time.Duration(float64(time.Second) / cfg.rate)}
	}
	return b, nil
}

// newTransport is HTTP/1.1 keep-alive (HTTP/2 where TLS offers it) with
// an idle connection kept for every worker, no transparent compression
// (the events must be read as the server wrote them), and no proxy from
// the environment (it would sit inside the measurement).
func newTransport(cfg config) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:   true,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: cfg.insecure}, //nolint:gosec // only when asked
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: cfg.concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// requestBody is the JSON body of every request to model.
func requestBody(cfg config, model string) ([]byte, error) {
	if cfg.api != "" && cfg.api != "openai" {
		return nativeRequestBody(cfg, model)
	}
	body := map[string]any{"model": model, "stream": cfg.stream}
	if cfg.endpoint == events.ChatCompletions {
		body["messages"] = []map[string]string{{"role": "user", "content": cfg.prompt}}
	} else {
		body["prompt"] = cfg.prompt
	}
	if cfg.maxTokens > 0 {
		body["max_tokens"] = cfg.maxTokens
	}
	if cfg.stream && cfg.includeUsage {
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	for k, v := range cfg.extraBody {
		body[k] = v
	}
	return json.Marshal(body)
}

// roundRobin returns one cycle of smooth weighted round-robin (as nginx
// balances upstreams): each model appears as often as its weight, spread
// out rather than in runs.
func roundRobin(models []weighted) []int {
	total := 0
	for _, m := range models {
		total += m.Weight
	}
	current := make([]int, len(models))
	out := make([]int, 0, total)
	for range total {
		best := 0
		for i, m := range models {
			current[i] += m.Weight
			if current[i] > current[best] {
				best = i
			}
		}
		current[best] -= total
		out = append(out, best)
	}
	return out
}

func (b *bench) pick() int {
	return b.schedule[(b.picks.Add(1)-1)%uint64(len(b.schedule))]
}

// discoverModel asks the server for its models and returns the first.
func discoverModel(ctx context.Context, cfg config) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.base.String()+"/models", nil)
	if err != nil {
		return "", err
	}
	req.Header = cfg.header.Clone()
	resp, err := (&http.Client{Transport: newTransport(cfg)}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s/models: %s", cfg.base.Redacted(), resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&list); err != nil {
		return "", fmt.Errorf("GET %s/models: %v", cfg.base.Redacted(), err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("GET %s/models lists no model", cfg.base.Redacted())
	}
	return list.Data[0].ID, nil
}

// warmup sends -warmup requests, c at a time, and forgets their stats.
func (b *bench) warmup(ctx context.Context) {
	n := int64(b.cfg.warmup)
	var claimed atomic.Int64
	b.workers(ctx, int(min(int64(b.cfg.concurrency), n)), func(w *worker) {
		for ctx.Err() == nil && claimed.Add(1) <= n {
			w.do(ctx, w.next())
		}
	})
	b.reset()
}

// reset forgets the stats and the counts of the requests sent so far.
func (b *bench) reset() {
	b.picks.Store(0)
	b.sessions.Store(0)
	b.peakInFlight.Store(0)
	for i, s := range b.stats {
		b.stats[i] = newModelStats(s.name)
	}
}

// run drives the load until the duration or the request count is reached
// and every request in flight has ended, or until ctx is canceled.
func (b *bench) run(ctx context.Context) {
	b.start = time.Now()
	if b.cfg.duration > 0 {
		b.deadline = b.start.Add(b.cfg.duration)
	}
	b.workers(ctx, b.cfg.concurrency, func(w *worker) {
		for b.more(ctx) {
			w.do(ctx, w.next())
		}
	})
}

// workers runs n workers, started evenly over -ramp, each running loop
// (which sends requests one after another), and waits for them.
func (b *bench) workers(ctx context.Context, n int, loop func(*worker)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if b.cfg.ramp > 0 && !sleep(ctx, b.cfg.ramp*time.Duration(i)/time.Duration(n)) {
				return
			}
			loop(newWorker(b))
		})
	}
	wg.Wait()
}

// enter counts a request in flight.
func (b *bench) enter() {
	n := b.inFlight.Add(1)
	for peak := b.peakInFlight.Load(); n > peak && !b.peakInFlight.CompareAndSwap(peak, n); peak = b.peakInFlight.Load() {
	}
}

// more claims the next request, or reports that the run is over.
func (b *bench) more(ctx context.Context) bool {
	if ctx.Err() != nil || !b.deadline.IsZero() && !time.Now().Before(b.deadline) {
		return false
	}
	if b.cfg.requests > 0 && b.started.Add(1) > b.cfg.requests {
		return false
	}
	return b.pacer == nil || b.pacer.wait(ctx, b.deadline)
}

// pacer spaces request starts evenly at the -rate. It caps the rate: when
// every worker is busy the schedule slips rather than bursting later.
type pacer struct {
	every time.Duration
	mu    sync.Mutex
	next  time.Time
}

// wait sleeps until the caller's turn; false if the turn would come after
// deadline (when not zero) or ctx ends first.
func (p *pacer) wait(ctx context.Context, deadline time.Time) bool {
	p.mu.Lock()
	now := time.Now()
	turn := p.next
	if turn.Before(now) {
		turn = now
	}
	p.next = turn.Add(p.every)
	p.mu.Unlock()
	if !deadline.IsZero() && !turn.Before(deadline) {
		return false
	}
	return sleep(ctx, time.Until(turn))
}

// sleep waits for d; false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
