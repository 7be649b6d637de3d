package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
	"github.com/itlproxy/itlproxy/metrics"
)

// demoModels are the simulated upstream's models: a fast small one, a
// slower large one, and one whose stream stalls now and then, so the table
// shows three different shapes of latency.
var demoModels = []llmsim.Model{
	{Name: "llama-3.1-8b-instruct", TTFT: 120 * time.Millisecond, ITL: 12 * time.Millisecond, Jitter: 0.3, SpikeProb: 0.002, Spike: 150 * time.Millisecond},
	{Name: "qwen2.5-72b-instruct", TTFT: 450 * time.Millisecond, ITL: 38 * time.Millisecond, Jitter: 0.3, SpikeProb: 0.005, Spike: 300 * time.Millisecond},
	{Name: "mixtral-8x7b-instruct", TTFT: 250 * time.Millisecond, ITL: 22 * time.Millisecond, Jitter: 0.4, SpikeProb: 0.02, Spike: 600 * time.Millisecond},
}

// demoObjectives judge the demo's models, so that the SLO counters,
// goodput and the live page's attainment fill as soon as streams end. Two
// models meet theirs with room to spare. mixtral's TTFT (250 ms ± 40%,
// uniform) is over its 300 ms objective for about one stream in four, and
// its 600 ms spikes break its ITL objective: by design, the model an
// operator would be paged for.
var demoObjectives = map[string]metrics.Objectives{
	"llama-3.1-8b-instruct": {TTFT: 500 * time.Millisecond, ITL: 50 * time.Millisecond, TPOT: 30 * time.Millisecond, MaxGap: time.Second},
	"qwen2.5-72b-instruct":  {TTFT: time.Second, ITL: 100 * time.Millisecond, TPOT: 60 * time.Millisecond, MaxGap: time.Second},
	"mixtral-8x7b-instruct": {TTFT: 300 * time.Millisecond, ITL: 100 * time.Millisecond, TPOT: 60 * time.Millisecond, MaxGap: time.Second},
}

// demoSLOs returns the objectives the demo runs with: the operator's when
// the environment or an SLO file sets any, else demoObjectives.
func demoSLOs(set metrics.SLOs) metrics.SLOs {
	if set.Default != (metrics.Objectives{}) || len(set.Models) > 0 || len(set.Classes) > 0 {
		return set
	}
	return metrics.SLOs{Models: demoObjectives}
}

// demoTableEvery is how often the demo prints its table.
const demoTableEvery = 5 * time.Second

// runDemo serves the proxy in front of an in-process simulated upstream,
// drives it with a few streaming clients, and prints a table of what the
// proxy measured until ctx is canceled.
func (s *server) runDemo(ctx context.Context, stdout io.Writer) error {
	sim := llmsim.New(demoModels...)
	simLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("simulated upstream: %w", err)
	}
	simSrv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = simSrv.Serve(simLn) }()
	defer simSrv.Close()
	s.cfg.UpstreamURL = "http://" + simLn.Addr().String()

	return s.run(ctx, func(proxyAddr, adminAddr net.Addr) func() {
		loadCtx, cancel := context.WithCancel(ctx)
		target := "http://" + loopback(proxyAddr)
		if s.recorder != nil {
			fmt.Fprintf(stdout, "live page: %s://%s/ (open it in a browser)\n", s.cfg.adminScheme(), loopback(adminAddr))
		}
		fmt.Fprintf(stdout, "itlproxy demo: proxy on %s, simulated upstream on %s, %d clients\n", target, simLn.Addr(), s.cfg.DemoClients)
		fmt.Fprintf(stdout, "metrics: curl -s %s://%s/metrics | grep itlproxy_\n", s.cfg.adminScheme(), loopback(adminAddr))
		fmt.Fprintf(stdout, "try:     curl -N %s/v1/chat/completions -d '{\"model\":%q,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n\n",
			target, sim.Models()[0])
		var wg sync.WaitGroup
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: s.cfg.DemoClients}}
		for i := range s.cfg.DemoClients {
			wg.Go(func() { demoClient(loadCtx, client, target, sim.Models(), i) })
		}
		wg.Go(func() { s.printTables(loadCtx, stdout, sim.Models()) })
		return func() {
			cancel()
			wg.Wait()
			client.CloseIdleConnections()
		}
	})
}

// loopback returns addr with an unspecified host replaced by 127.0.0.1,
// so that it can be dialed.
func loopback(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// demoClient sends requests until ctx is canceled: mostly streams, with
// and without usage, some non-streamed, and a few it abandons half-way, as
// impatient users do.
func demoClient(ctx context.Context, client *http.Client, target string, models []string, n int) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(time.Now().UnixNano())))
	for i := 0; ctx.Err() == nil; i++ {
		model := models[(n+i)%len(models)]
		path, promptField := "/v1/chat/completions", `"messages":[{"role":"user","content":"Tell me about latency."}]`
		if rng.IntN(5) == 0 {
			path, promptField = "/v1/completions", `"prompt":"Latency is"`
		}
		stream := rng.IntN(10) > 0
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
		demoRequest(reqCtx, client, target+path, body, abandonAfter)
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(100+rng.IntN(400)) * time.Millisecond):
		}
	}
}

// demoRequest sends one request and reads the response; it cancels the
// request after abandonAfter events when that is not negative.
func demoRequest(ctx context.Context, client *http.Client, url, body string, abandonAfter int) {
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

// printTables prints the table every demoTableEvery until ctx is canceled.
func (s *server) printTables(ctx context.Context, w io.Writer, models []string) {
	start := time.Now()
	t := time.NewTicker(demoTableEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		snap, err := snapshotOf(s.reg)
		if err != nil {
			s.log.Warn("demo table", zap.Error(err))
			continue
		}
		fmt.Fprint(w, snap.table(models, time.Since(start)))
	}
}
