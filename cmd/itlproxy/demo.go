package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/demo"
	"github.com/itlproxy/itlproxy/cmd/internal/envconfig"
)

// runDemo serves the proxy in front of an in-process simulated upstream,
// drives it with a few streaming clients, and prints a table of what the
// proxy measured until ctx is canceled.
func (s *server) runDemo(ctx context.Context, stdout io.Writer) error {
	sim, models, stopSim := demo.Upstream()
	defer stopSim()
	simLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("simulated upstream: %w", err)
	}
	simSrv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = simSrv.Serve(simLn) }()
	defer simSrv.Close()
	s.cfg.UpstreamURL = "http://" + simLn.Addr().String()

	return s.run(ctx, func(proxyAddr, adminAddr net.Addr) func() {
		target := "http://" + loopback(proxyAddr)
		if s.recorder != nil {
			fmt.Fprintf(stdout, "live page: %s://%s/ (open it in a browser)\n", s.cfg.web.Scheme(), loopback(adminAddr))
		}
		fmt.Fprintf(stdout, "itlproxy demo: proxy on %s, simulated upstream on %s, %d clients\n", target, simLn.Addr(), s.cfg.DemoClients)
		fmt.Fprintf(stdout, "metrics: curl -s %s://%s/metrics | grep itlproxy_\n", s.cfg.web.Scheme(), loopback(adminAddr))
		fmt.Fprintf(stdout, "try:     curl -N %s/v1/chat/completions -d '{\"model\":%q,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n\n",
			target, models[0])
		return demo.Run(ctx, target, models, s.cfg.DemoClients, s.reg, stdout, s.log)
	})
}

// demoVariables are the variables demoUsage shows: those that shape the
// demo (the others of itlproxy -h apply too).
var demoVariables = []string{"ITLPROXY_DEMO_CLIENTS", "ITLPROXY_LISTEN_ADDR", "ITLPROXY_ADMIN_ADDR",
	"ITLPROXY_SLO_TTFT", "ITLPROXY_SLO_ITL", "ITLPROXY_SLO_TPOT", "ITLPROXY_SLO_MAX_GAP", "ITLPROXY_SLO_FILE", "ITLPROXY_STALL_THRESHOLD"}

// demoUsage is what `itlproxy demo -h` shows: what the demo runs, its
// models and their objectives, and the variables that shape it.
func demoUsage() string {
	var b strings.Builder
	fmt.Fprintf(&b, `itlproxy demo: the proxy in front of a simulated OpenAI-compatible upstream,
driven by a few streaming clients, so that its metrics, objectives and live
page fill within seconds; no LLM server needed. It prints the live page's
address, then every %s a table of what the proxy measured, until it is
interrupted (Ctrl-C).

Usage:
  itlproxy demo      run the demo
  itlproxy demo -h   print this help

The simulated models, with jitter and occasional stalls, and the objectives
the demo judges them by (setting any ITLPROXY_SLO_* variable or an SLO file
replaces these with yours):
`, demo.TableEvery)
	for _, m := range demo.Models {
		o := demo.Objectives[m.Name]
		fmt.Fprintf(&b, "  %-22s TTFT %-6v ITL %-5v   objectives: TTFT %v, ITL %v, TPOT %v, max gap %v\n",
			m.Name, m.TTFT, m.ITL, o.TTFT, o.ITL, o.TPOT, o.MaxGap)
	}
	bm, o := demo.Batch, demo.Objectives[demo.Batch.Name]
	fmt.Fprintf(&b, `  %-22s a batch-stepping engine without chunked prefill: one decode
  %-22s step of %v gives each of its streams a token; a prompt's prefill
  %-22s takes %v a token, and gives them none: a prompt of %d
  %-22s tokens every %v, and a pause of %v every %v, stall
  %-22s them   objectives: TTFT %v, ITL %v, TPOT %v, max gap %v
Gaps over %v are stalls, counted by cause (prefill, client, upstream)
unless ITLPROXY_STALL_THRESHOLD sets another threshold.
`, bm.Name, "", bm.Engine.Step, "", bm.Engine.PrefillPerToken, bm.LongPrompt, "", bm.LongPromptEvery, bm.Pause, bm.PauseEvery,
		"", o.TTFT, o.ITL, o.TPOT, o.MaxGap, demo.StallThreshold)
	b.WriteString(`
Configuration, from the environment: every variable of 'itlproxy -h' but
ITLPROXY_UPSTREAM_*, whose place the simulated upstream takes; these shape
the demo:
`)
	envconfig.UsageOf(&b, reflect.TypeFor[config](), demoVariables...)
	return b.String()
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
