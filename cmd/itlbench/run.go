package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// errNoSuccess is returned, after the report, when no request succeeded.
var errNoSuccess = errors.New("no request succeeded")

// run is the whole program: main only adds signals and the exit status.
// A load run and a sweep return when they are over (or ctx is canceled),
// after the report; `upstream`, `plainproxy` and `otlpsink` serve until ctx
// is canceled.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "upstream":
			return runUpstream(ctx, args[1:], stdout, stderr)
		case "plainproxy":
			return runPlainProxy(ctx, args[1:], stdout, stderr)
		case "otlpsink":
			return runOTLPSink(ctx, args[1:], stdout, stderr)
		case "sweep":
			return runSweep(ctx, args[1:], stdout, stderr)
		}
	}
	cfg, help, err := parseLoadFlags(args, stdout)
	if err != nil || help {
		return err
	}
	if err := prepare(ctx, &cfg, stderr); err != nil {
		return err
	}
	b, err := newBench(cfg)
	if err != nil {
		return err
	}
	var watch *procWatch
	if len(cfg.watchPIDs) > 0 {
		if watch, err = newProcWatch(cfg.watchPIDs); err != nil {
			return fmt.Errorf("-watch-pid: %w", err)
		}
	}
	if cfg.warmup > 0 {
		b.warmup(ctx)
	}
	var before proxyScrape
	if cfg.compareURL != "" {
		if before, err = scrapeProxy(ctx, cfg.compareURL, cfg.endpoint.Label()); err != nil {
			return fmt.Errorf("-compare-metrics: %w", err)
		}
	}

	stopProgress := startProgress(b, stderr, cfg.progress)
	if watch != nil {
		watch.startRun()
	}
	b.run(ctx)
	elapsed := time.Since(b.start)
	stopProgress()

	rep := newReport(b, elapsed)
	if watch != nil {
		rep.Processes = watch.stopRun()
	}
	if cfg.compareURL != "" {
		rep.compareWith(context.WithoutCancel(ctx), cfg.compareURL, before)
	}
	if cfg.jsonOut {
		err = rep.writeJSON(stdout)
	} else {
		err = rep.writeText(stdout)
	}
	if err == nil && rep.all.ok == 0 && ctx.Err() == nil {
		err = errNoSuccess
	}
	return err
}

// prepare completes cfg's models (asking the server when none is given)
// and raises the open-file limit for cfg.concurrency streams.
func prepare(ctx context.Context, cfg *config, stderr io.Writer) error {
	if len(cfg.models) == 0 && cfg.api != "" && cfg.api != "openai" {
		cfg.models = []weighted{{Name: nativeDefaultModel, Weight: 1}}
	}
	if len(cfg.models) == 0 {
		name, err := discoverModel(ctx, *cfg)
		if err != nil {
			return fmt.Errorf("no -model given, and asking the server failed: %w", err)
		}
		cfg.models = []weighted{{Name: name, Weight: 1}}
	}
	// Each stream holds a connection: a socket each, and a few more
	// descriptors for the process itself.
	switch raised, err := raiseFileLimit(uint64(cfg.concurrency) + 64); {
	case err != nil:
		fmt.Fprintln(stderr, "itlbench: warning:", err)
	case raised != "":
		fmt.Fprintln(stderr, "itlbench:", raised)
	}
	return nil
}

// compareWith scrapes the proxy after the run and compares; a failure is
// reported with the results, not instead of them.
func (r *report) compareWith(ctx context.Context, metricsURL string, before proxyScrape) {
	a := r.all
	// The requests that surely reached the proxy and ended there.
	want := a.ok + a.errs[errStatus] + a.errs[errStreamCut] + a.errs[errStreamError]
	endpoint := r.Endpoint
	after, err := settle(ctx, metricsURL, endpoint, before, want, 3*time.Second)
	if err == nil {
		r.Compare, err = compare(metricsURL, endpoint, before, after, a, r.results)
	}
	if err != nil {
		r.compareErr = err
		r.CompareError = err.Error()
		return
	}
	if got := after.requests[""] - before.requests[""]; got != float64(a.sent-a.canceled) {
		r.Compare.Note = fmt.Sprintf("itlproxy counted %.0f requests on %s during the run, the client sent %d: other traffic, or requests that never reached it, are in its numbers",
			got, endpoint, a.sent-a.canceled)
	}
}

// redactedURL hides a URL's password, for printing.
func redactedURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	return u.Redacted()
}
