package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
)

const upstreamUsageHead = `itlbench upstream serves a simulated OpenAI-compatible LLM server (chat
completions and completions, streamed or not, GET /v1/models) with the
timing given, so that benchmarks of a load run straight at it, through
itlproxy, or through another proxy share one upstream. Timing is fixed
unless -jitter or -spike-prob are set; with -itl-per-stream, gaps lengthen
with the requests in flight by a known law. It serves until interrupted.

usage:
  itlbench upstream [flags]

`

const upstreamUsageTail = `
Every model name is served with the same timing; -models only sets what
GET /v1/models lists (and so what itlbench picks when given no -model).

Examples:
  itlbench upstream -addr 127.0.0.1:8000 -ttft 50ms -itl 20ms -tokens 128
  itlbench upstream -addr 127.0.0.1:8000 -itl 20ms -itl-per-stream 2ms
  itlbench upstream -addr 127.0.0.1:8443 -tls-cert /tmp/upstream.pem
  ITLPROXY_UPSTREAM_URL=https://127.0.0.1:8443 ITLPROXY_UPSTREAM_CA_FILE=/tmp/upstream.pem itlproxy
`

// runUpstream serves the simulated upstream until ctx is canceled.
func runUpstream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("itlbench upstream", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", "127.0.0.1:8000", "listen `address`")
	m := llmsim.Model{}
	fs.DurationVar(&m.TTFT, "ttft", 50*time.Millisecond, "time from the request to the first token")
	fs.DurationVar(&m.ITL, "itl", 20*time.Millisecond, "gap between tokens (of a lone stream, with -itl-per-stream)")
	perStream := fs.Duration("itl-per-stream", 0, "lengthen each gap by this for every other request the server is decoding when\nthe gap begins: gap = -itl + (n-1) × this, n the requests in flight, as an\nengine's decode step slows with its batch (a server whose capacity a sweep can\nfind: itlbench sweep -h); 0: gaps do not depend on the load")
	fs.IntVar(&m.Length, "tokens", 128, "completion length: each completion ends after this many tokens (finish_reason\n\"stop\"), or at the request's max_tokens when that is fewer")
	fs.Float64Var(&m.Jitter, "jitter", 0, "spread TTFT and each gap uniformly by ± this `fraction` of their mean (0 to 1)")
	fs.Float64Var(&m.SpikeProb, "spike-prob", 0, "chance (0 to 1) that a gap is a stall of -spike instead")
	fs.DurationVar(&m.Spike, "spike", time.Second, "length of a stall")
	fs.BoolVar(&m.Stamp, "stamp", false, "put each streamed event's send time into it, as the SSE comment line\n\": sent=<Unix nanoseconds>\" before its data line, so that itlbench on the same\nmachine reports each event's transit (SSE clients ignore comments)")
	models := fs.String("models", "sim", "comma-separated model `names` GET /v1/models lists")
	certFile := fs.String("tls-cert", "", "serve HTTPS (HTTP/2, and HTTP/1.1 to clients that ask for it) with a self-signed\ncertificate for 127.0.0.1, ::1 and localhost made at start, and write it to this `file`\n(PEM) for clients to trust: HTTP/2 carries many streams on one connection")
	if help, err := parseFlags(fs, args, stdout, upstreamUsageHead, upstreamUsageTail); help || err != nil {
		return err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if m.TTFT < 0 || m.ITL < 0 || m.Spike < 0 || *perStream < 0 {
		errs = append(errs, errors.New("-ttft, -itl, -itl-per-stream and -spike: want durations of 0 or more"))
	}
	if *perStream > 0 {
		m.Load = &llmsim.Load{PerStream: *perStream}
	}
	if m.Length < 1 {
		errs = append(errs, fmt.Errorf("-tokens %d: want at least 1", m.Length))
	}
	if m.Jitter < 0 || m.Jitter > 1 || m.SpikeProb < 0 || m.SpikeProb > 1 {
		errs = append(errs, errors.New("-jitter and -spike-prob: want 0 to 1"))
	}
	var sims []llmsim.Model
	for _, name := range strings.Split(*models, ",") {
		if name = strings.TrimSpace(name); name != "" {
			sm := m
			sm.Name = name
			sims = append(sims, sm)
		}
	}
	if len(sims) == 0 {
		errs = append(errs, errors.New("-models: want at least one name"))
	}
	if len(errs) > 0 {
		return &usageError{errors.Join(errs...)}
	}

	srv := &http.Server{
		Handler:           llmsim.New(sims...).ServeAnyModel(m),
		ReadHeaderTimeout: 10 * time.Second,
	}
	scheme := "http"
	if *certFile != "" {
		cert, err := selfSigned(*certFile)
		if err != nil {
			return fmt.Errorf("-tls-cert: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		scheme = "https"
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	stamped, perOther := "", ""
	if m.Stamp {
		stamped = ", events stamped"
	}
	if m.Load != nil {
		perOther = fmt.Sprintf(" + %v per other request in flight", m.Load.PerStream)
	}
	fmt.Fprintf(stderr, "itlbench upstream: serving %s://%s/v1 (ttft %v, itl %v%s, %d tokens, jitter %g, spikes %g of %v%s)\n",
		scheme, ln.Addr(), m.TTFT, m.ITL, perOther, m.Length, m.Jitter, m.SpikeProb, m.Spike, stamped)
	return serveUntil(ctx, srv, ln)
}
