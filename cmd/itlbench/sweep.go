package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// sweepReport is a sweep's outcome, as -json prints it.
type sweepReport struct {
	SchemaVersion int        `json:"schema_version"`
	Target        string     `json:"target"`
	Endpoint      string     `json:"endpoint"`
	Models        []weighted `json:"models"`
	MaxTokens     int        `json:"max_tokens"`
	// DurationSeconds is each level's measured window.
	DurationSeconds float64        `json:"duration_seconds"`
	Objectives      objectivesJSON `json:"objectives"`
	Started         time.Time      `json:"started"`
	ElapsedSeconds  float64        `json:"elapsed_seconds"`
	Levels          []levelJSON    `json:"levels"`
	Capacity        capacityJSON   `json:"capacity"`
	// Interrupted: the sweep was stopped (Ctrl-C) during
	// InterruptedLevel, which is left out; the levels before it are done.
	Interrupted      bool   `json:"interrupted"`
	InterruptedLevel int    `json:"interrupted_level,omitempty"`
	MetricsURL       string `json:"metrics_url,omitempty"`
	// CapacityError says why itlproxy's capacity is missing, with
	// -compare-metrics.
	CapacityError    string `json:"capacity_error,omitempty"`
	PercentileMethod string `json:"percentile_method"`

	objectives objectives
	levels     []int
}

// objectivesJSON are the objectives in seconds; null for none.
type objectivesJSON struct {
	TTFTSeconds *float64 `json:"ttft_seconds"`
	ITLSeconds  *float64 `json:"itl_seconds"`
}

// levelJSON is one level done: a load run's report of its measured
// requests (concurrency, total, per model, ...), and its verdict. Its
// elapsed_seconds, over which its rates are, is the time its requests
// took per stream (level.perStream); its duration_seconds the window.
// With -compare-metrics, its compare is of every request of the level,
// settle, fill and drain included, as the proxy cannot tell them apart.
type levelJSON struct {
	report
	// Met: the level met every objective; Missed: what it missed (ttft,
	// itl, errors).
	Met    bool     `json:"met"`
	Missed []string `json:"missed"`
	// SettleSeconds is from the level's start to its window's;
	// FillSeconds from the window's end to the end of its last request,
	// while the load was kept at the level; DrainSeconds from then to the
	// end of the level's last request.
	SettleSeconds float64 `json:"settle_seconds"`
	FillSeconds   float64 `json:"fill_seconds"`
	DrainSeconds  float64 `json:"drain_seconds"`
}

func newSweepReport(sc sweepConfig) *sweepReport {
	r := &sweepReport{
		SchemaVersion:    1,
		Target:           redactedURL(sc.target),
		Endpoint:         sc.endpoint.Label(),
		Models:           sc.models,
		MaxTokens:        sc.maxTokens,
		DurationSeconds:  sc.duration.Seconds(),
		Started:          time.Now().UTC(),
		Levels:           []levelJSON{},
		MetricsURL:       redactedURL(sc.compareURL),
		PercentileMethod: percentileMethod,
		objectives:       sc.objectives,
		levels:           sc.levels,
	}
	if o := sc.objectives; o.ttft > 0 {
		r.Objectives.TTFTSeconds = ptr(o.ttft.Seconds())
	}
	if o := sc.objectives; o.itl > 0 {
		r.Objectives.ITLSeconds = ptr(o.itl.Seconds())
	}
	return r
}

// runSweep is `itlbench sweep`: each level in turn, then the reports.
func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sc, help, err := parseSweepFlags(args, stdout)
	if err != nil || help {
		return err
	}
	if err := prepare(ctx, &sc.config, stderr); err != nil {
		return err
	}
	// sc.concurrency is the highest level: the transport keeps an idle
	// connection for each of its streams.
	b, err := newBench(sc.config)
	if err != nil {
		return err
	}
	rep := newSweepReport(sc)
	err = sweepLevels(ctx, sc, b, rep, stderr)
	rep.ElapsedSeconds = time.Since(rep.Started).Seconds()
	if err != nil {
		return err
	}
	if sc.jsonOut {
		err = rep.writeJSON(stdout)
	} else {
		err = rep.writeText(stdout)
	}
	if err == nil && sc.report != "" {
		err = rep.writeHTML(sc.report)
	}
	if err == nil && !rep.Interrupted && !rep.anyOK() {
		err = errNoSuccess
	}
	return err
}

// sweepLevels runs each level of sc on b into rep, until the last or
// until ctx is canceled, and then judges them. It fails only when
// -compare-metrics cannot read the proxy before the first level.
func sweepLevels(ctx context.Context, sc sweepConfig, b *bench, rep *sweepReport, stderr io.Writer) error {
	compare := sc.compareURL != ""
	// itlproxy before the first level, and before the level interrupted
	// (after the levels done, with nothing of it) when there was one.
	var first, beforeInterrupted *proxyScrape
	for _, n := range sc.levels {
		var before proxyScrape
		var beforeErr error
		if compare && ctx.Err() == nil {
			before, beforeErr = scrapeProxy(ctx, sc.compareURL, rep.Endpoint)
			if beforeErr != nil && first == nil && ctx.Err() == nil {
				return fmt.Errorf("-compare-metrics: %w", beforeErr)
			}
			if beforeErr == nil && first == nil {
				first = &before
			}
		}
		var l *level
		if ctx.Err() == nil {
			l = newLevel(b, n, sc.duration)
			stopProgress := startProgress(b, stderr, sc.progress)
			l.run(ctx)
			stopProgress()
		}
		if ctx.Err() != nil {
			rep.Interrupted, rep.InterruptedLevel = true, n
			if compare && beforeErr == nil {
				beforeInterrupted = &before
			}
			break
		}
		lv := levelReport(l, sc.objectives)
		if compare && beforeErr == nil {
			lv.compareLevel(context.WithoutCancel(ctx), l, sc.compareURL, before)
		} else if compare {
			lv.compareErr, lv.CompareError = beforeErr, beforeErr.Error()
		}
		rep.Levels = append(rep.Levels, lv)
		if showProgress(stderr, sc.progress) {
			fmt.Fprintf(stderr, "itlbench sweep: %s\n", lv.progressLine(sc.objectives))
		}
	}
	rep.Capacity = findCapacity(rep.Levels, sc.objectives)
	if !compare || len(rep.Levels) == 0 || first == nil {
		return nil
	}
	last := beforeInterrupted
	if last == nil {
		after, err := scrapeProxy(context.WithoutCancel(ctx), sc.compareURL, rep.Endpoint)
		if err != nil {
			rep.CapacityError = fmt.Sprintf("itlproxy's capacity: %v", err)
			return nil
		}
		last = &after
	}
	rep.Capacity.Proxy = proxyCapacities(sc.models, first.capacity, last.capacity)
	return nil
}

// showProgress reports whether progress goes to stderr, in mode
// (-progress).
func showProgress(stderr io.Writer, mode string) bool {
	return mode == "always" || mode == "auto" && isTerminal(stderr)
}

// levelReport is the report of l's measured requests and its verdict
// against o.
func levelReport(l *level, o objectives) levelJSON {
	b := l.b
	b.start = l.measured
	lv := levelJSON{report: *newReport(b, l.perStream())}
	lv.Missed = o.missed(lv.all)
	lv.Met = o.any() && len(lv.Missed) == 0
	lv.SettleSeconds = l.measured.Sub(l.start).Seconds()
	lv.FillSeconds = max(l.end.Sub(l.measured.Add(l.window)), 0).Seconds()
	lv.DrainSeconds = l.drained.Sub(l.end).Seconds()
	return lv
}

// compareLevel compares every request of l (all its phases: the proxy
// saw them all) with what itlproxy measured between before and the end
// of the level, as a load run compares its own.
func (lv *levelJSON) compareLevel(ctx context.Context, l *level, metricsURL string, before proxyScrape) {
	whole := &report{Endpoint: lv.Endpoint, results: l.results()}
	whole.all = total(whole.results)
	whole.compareWith(ctx, metricsURL, before)
	lv.Compare, lv.CompareError, lv.compareErr = whole.Compare, whole.CompareError, whole.compareErr
}

// progressLine is a level's line on stderr as it ends.
func (lv *levelJSON) progressLine(o objectives) string {
	a := lv.all
	line := fmt.Sprintf("%s: %d requests, TTFT p99 %s, ITL p99 %s, %.0f tokens/s", streams(lv.Concurrency), a.sent,
		fmtDuration(a.ttft.quantile(0.99)), fmtDuration(a.itl.quantile(0.99)), perSecond(a.outputTokens, lv.elapsed))
	switch {
	case lv.Met:
		line += ": met " + o.String()
	case o.any():
		line += ": missed (" + o.why(*lv) + ")"
	}
	return line
}

// anyOK reports whether some level had a request succeed.
func (r *sweepReport) anyOK() bool {
	for _, l := range r.Levels {
		if l.all.ok > 0 {
			return true
		}
	}
	return false
}

func (r *sweepReport) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
