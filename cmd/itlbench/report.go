package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// percentileMethod says how the reported percentiles were computed.
var percentileMethod = fmt.Sprintf("nearest rank over a log-linear histogram (%d buckets per power of two of nanoseconds): within %.2f%% of the exact sample, exact below 256ns; count, sum, mean, min and max exact",
	subBuckets, 100*quantileError)

// quantiles are the reported percentiles.
var quantiles = []struct {
	name string
	q    float64
}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p99.9", 0.999}}

// report is the run's outcome, as --json prints it.
type report struct {
	SchemaVersion    int            `json:"schema_version"`
	Target           string         `json:"target"`
	Endpoint         string         `json:"endpoint"`
	Stream           bool           `json:"stream"`
	IncludeUsage     bool           `json:"include_usage"`
	Concurrency      int            `json:"concurrency"`
	Rate             float64        `json:"rate"`
	DurationSeconds  float64        `json:"duration_seconds"`
	MaxRequests      int64          `json:"max_requests"`
	MaxTokens        int            `json:"max_tokens"`
	Models           []weighted     `json:"models"`
	Headers          []string       `json:"headers"`
	SessionHeader    string         `json:"session_header,omitempty"`
	Turns            int            `json:"turns"`
	Started          time.Time      `json:"started"`
	ElapsedSeconds   float64        `json:"elapsed_seconds"`
	PeakInFlight     int64          `json:"peak_in_flight"`      // the most requests in flight at once
	Processes        *processesJSON `json:"processes,omitempty"` // -watch-pid
	PercentileMethod string         `json:"percentile_method"`
	Total            resultJSON     `json:"total"`
	PerModel         []resultJSON   `json:"per_model"`
	Compare          *comparison    `json:"compare,omitempty"`
	CompareError     string         `json:"compare_error,omitempty"`
	compareErr       error          // shown in the text report
	results          []result       // per model, for the text report
	all              result         // merged
	elapsed          time.Duration  // start to the end of the last request
}

// resultJSON is one model's (or every model's) numbers. Durations are in
// seconds; a distribution without samples is all zeros.
type resultJSON struct {
	Model                 string   `json:"model"`
	Requests              requests `json:"requests"`
	RequestsPerSecond     float64  `json:"requests_per_second"`
	OutputTokens          int64    `json:"output_tokens"`
	OutputTokensPerSecond float64  `json:"output_tokens_per_second"`
	TokensFrom            string   `json:"tokens_from"` // usage, events, mixed, none
	TokenEvents           int64    `json:"token_events"`
	InvalidEvents         int64    `json:"invalid_events"`
	EndedWithoutDone      int64    `json:"ended_without_done"` // streams counted ok whose body ended cleanly before [DONE]
	TTFT                  distJSON `json:"ttft"`
	ITL                   distJSON `json:"itl"`
	// Transit is from the upstream's write of each token-bearing event to
	// its arrival, when the upstream stamped its events (count 0 if not).
	Transit  distJSON   `json:"transit"`
	TPOT     distJSON   `json:"tpot"`
	Duration distJSON   `json:"duration"`
	Errors   errorsJSON `json:"errors"`
	// Goodput is present when the run has objectives (a sweep's -slo-ttft,
	// -slo-itl).
	Goodput *goodputJSON `json:"goodput,omitempty"`
}

// goodputJSON is the share of the requests judged that met every
// objective (worker.judge).
type goodputJSON struct {
	Judged int64   `json:"judged"`
	Met    int64   `json:"met"`
	Ratio  float64 `json:"ratio"` // met / judged, 0 when none was judged
}

type requests struct {
	Sent     int64 `json:"sent"`
	OK       int64 `json:"ok"`
	Failed   int64 `json:"failed"`
	Canceled int64 `json:"canceled"`
}

type distJSON struct {
	Count uint64  `json:"count"`
	Sum   float64 `json:"sum"`
	Mean  float64 `json:"mean"`
	Min   float64 `json:"min"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Max   float64 `json:"max"`
}

type errorsJSON struct {
	Connect     int64             `json:"connect"`
	HTTPStatus  int64             `json:"http_status"`
	StreamCut   int64             `json:"stream_cut"`
	Timeout     int64             `json:"timeout"`
	StreamError int64             `json:"stream_error"`
	ByStatus    map[string]int64  `json:"by_status"`
	Messages    map[string]string `json:"messages"` // a first message of each kind seen
}

func newReport(b *bench, elapsed time.Duration) *report {
	cfg := b.cfg
	r := &report{
		SchemaVersion:    1,
		Target:           redactedURL(cfg.target),
		Endpoint:         cfg.endpoint.Label(),
		Stream:           cfg.stream,
		IncludeUsage:     cfg.stream && cfg.includeUsage && (cfg.api == "" || cfg.api == "openai"),
		Concurrency:      cfg.concurrency,
		Rate:             cfg.rate,
		DurationSeconds:  cfg.duration.Seconds(),
		MaxRequests:      cfg.requests,
		MaxTokens:        cfg.maxTokens,
		Models:           cfg.models,
		Headers:          slices.Sorted(maps.Keys(cfg.header)),
		Turns:            cfg.turns,
		Started:          b.start.UTC(),
		ElapsedSeconds:   elapsed.Seconds(),
		PeakInFlight:     b.peakInFlight.Load(),
		PercentileMethod: percentileMethod,
		elapsed:          elapsed,
	}
	if cfg.turns > 0 {
		r.SessionHeader = cfg.sessionHeader
	}
	if r.Headers == nil {
		r.Headers = []string{}
	}
	judging := cfg.objectives != objectives{}
	for _, s := range b.stats {
		res := s.result()
		r.results = append(r.results, res)
		r.PerModel = append(r.PerModel, res.json(elapsed, judging))
	}
	r.all = total(r.results)
	r.Total = r.all.json(elapsed, judging)
	return r
}

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func (r result) tokensFrom() string {
	done := r.sent - r.canceled - r.errs[errConnect] - r.errs[errStatus]
	switch {
	case r.outputTokens == 0 && r.withUsage == 0:
		return "none"
	case r.withUsage == 0:
		return "events"
	case r.withUsage >= done:
		return "usage"
	}
	return "mixed"
}

// json is r as the report prints it; judging adds its goodput.
func (r result) json(elapsed time.Duration, judging bool) resultJSON {
	out := resultJSON{
		Model:                 r.model,
		Requests:              requests{Sent: r.sent, OK: r.ok, Failed: r.failed(), Canceled: r.canceled},
		RequestsPerSecond:     perSecond(r.ok, elapsed),
		OutputTokens:          r.outputTokens,
		OutputTokensPerSecond: perSecond(r.outputTokens, elapsed),
		TokensFrom:            r.tokensFrom(),
		TokenEvents:           r.tokenEvents,
		InvalidEvents:         r.invalidEvents,
		EndedWithoutDone:      r.noDone,
		TTFT:                  r.ttft.json(),
		ITL:                   r.itl.json(),
		Transit:               r.transit.json(),
		TPOT:                  r.tpot.json(),
		Duration:              r.duration.json(),
		Errors: errorsJSON{
			Connect:     r.errs[errConnect],
			HTTPStatus:  r.errs[errStatus],
			StreamCut:   r.errs[errStreamCut],
			Timeout:     r.errs[errTimeout],
			StreamError: r.errs[errStreamError],
			ByStatus:    map[string]int64{},
			Messages:    r.firstErr,
		},
	}
	for c, n := range r.statusCodes {
		out.Errors.ByStatus[strconv.Itoa(c)] = n
	}
	if out.Errors.Messages == nil {
		out.Errors.Messages = map[string]string{}
	}
	if judging {
		out.Goodput = &goodputJSON{Judged: r.judged, Met: r.met}
		if r.judged > 0 {
			out.Goodput.Ratio = float64(r.met) / float64(r.judged)
		}
	}
	return out
}

func (d dist) json() distJSON {
	return distJSON{
		Count: d.count,
		Sum:   d.sum.Seconds(),
		Mean:  d.mean().Seconds(),
		Min:   d.min.Seconds(),
		P50:   d.quantile(0.5).Seconds(),
		P90:   d.quantile(0.9).Seconds(),
		P99:   d.quantile(0.99).Seconds(),
		P999:  d.quantile(0.999).Seconds(),
		Max:   d.max.Seconds(),
	}
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeText prints the human report.
func (r *report) writeText(w io.Writer) error {
	if _, err := io.WriteString(w, r.summary()); err != nil {
		return err
	}
	if err := r.writeTable(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\npercentiles: %s.\n", percentileMethod)
	if err != nil {
		return err
	}
	if r.Compare != nil {
		return r.Compare.writeText(w)
	}
	if r.compareErr != nil {
		_, err = fmt.Fprintf(w, "\ncompare-metrics: %v\n", r.compareErr)
	}
	return err
}

// summary is the report's opening: the run, its requests, tokens,
// processes, errors and warnings.
func (r *report) summary() string {
	a := r.all
	mode := "streaming"
	if !r.Stream {
		mode = "not streaming"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "itlbench: %d requests to %s in %s (concurrency %d, %s", a.sent, r.Target, fmtDuration(r.elapsed), r.Concurrency, mode)
	if r.Rate > 0 {
		fmt.Fprintf(&b, ", at most %g/s", r.Rate)
	}
	if r.Turns > 0 {
		fmt.Fprintf(&b, ", %d turns per session", r.Turns)
	}
	b.WriteString(")\n")
	fmt.Fprintf(&b, "requests  ok %d, failed %d, canceled %d: %.1f requests/s, at most %d in flight\n",
		a.ok, a.failed(), a.canceled, perSecond(a.ok, r.elapsed), r.PeakInFlight)
	fmt.Fprintf(&b, "tokens    %d output tokens (from %s), %d token events: %.1f tokens/s\n",
		a.outputTokens, a.tokensFrom(), a.tokenEvents, perSecond(a.outputTokens, r.elapsed))
	if p := r.Processes; p != nil {
		fmt.Fprintf(&b, "processes %s: %.2fs CPU", strings.Trim(strings.Join(strings.Fields(fmt.Sprint(p.PIDs)), ","), "[]"), p.CPUSeconds)
		if a.tokenEvents > 0 {
			fmt.Fprintf(&b, " (%.3g ms per 1,000 token events)", 1e6*p.CPUSeconds/float64(a.tokenEvents))
		}
		fmt.Fprintf(&b, ", RSS %.1f MiB before the run, %.1f MiB at its peak\n", float64(p.RSSBeforeBytes)/(1<<20), float64(p.RSSPeakBytes)/(1<<20))
		if p.Error != "" {
			fmt.Fprintf(&b, "warning   -watch-pid: %s\n", p.Error)
		}
	}
	writeErrors(&b, a)
	if a.noDone > 0 {
		fmt.Fprintf(&b, "warning   %d streams counted ok ended without [DONE]: the server ended them so, or something between cut them between two events\n", a.noDone)
	}
	if a.invalidEvents > 0 {
		fmt.Fprintf(&b, "warning   %d events or bodies could not be read (not JSON, or over %d bytes)\n", a.invalidEvents, maxEventBytes)
	}
	b.WriteByte('\n')
	return b.String()
}

// writeErrors writes the failed requests by kind, and the first message
// of each kind.
func writeErrors(b *strings.Builder, a result) {
	if a.failed() == 0 {
		return
	}
	b.WriteString("errors   ")
	for k, name := range errKindNames {
		fmt.Fprintf(b, " %s %d", name, a.errs[k])
		if errKind(k) == errStatus && len(a.statusCodes) > 0 {
			var codes []string
			for _, c := range slices.Sorted(maps.Keys(a.statusCodes)) {
				codes = append(codes, fmt.Sprintf("%d×%d", c, a.statusCodes[c]))
			}
			fmt.Fprintf(b, " (%s)", strings.Join(codes, " "))
		}
		if k < len(errKindNames)-1 {
			b.WriteByte(',')
		}
	}
	b.WriteByte('\n')
	for _, k := range slices.Sorted(maps.Keys(a.firstErr)) {
		fmt.Fprintf(b, "  first %s: %s\n", k, a.firstErr[k])
	}
}

// writeTable writes the latency distributions, of all models and of each.
func (r *report) writeTable(w io.Writer) error {
	sets := []result{r.all}
	if len(r.results) > 1 {
		sets = append(sets, r.results...)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "\tcount\tmean\tmin"
	for _, q := range quantiles {
		header += "\t" + q.name
	}
	fmt.Fprintln(tw, header+"\tmax\t")
	for _, res := range sets {
		if len(sets) > 1 {
			fmt.Fprintf(tw, "%s:\t\t\t\t\t\t\t\t\t\n", res.model)
		}
		rows := []struct {
			name string
			d    dist
		}{{"TTFT", res.ttft}, {"ITL", res.itl}, {"transit", res.transit}, {"TPOT", res.tpot}, {"duration", res.duration}}
		for _, row := range rows {
			if !r.Stream && row.name != "duration" || row.name == "transit" && row.d.count == 0 {
				continue
			}
			if row.d.count == 0 {
				fmt.Fprintf(tw, "%s\t0%s\t\n", row.name, strings.Repeat("\t-", 3+len(quantiles)))
				continue
			}
			line := fmt.Sprintf("%s\t%d\t%s\t%s", row.name, row.d.count, fmtDuration(row.d.mean()), fmtDuration(row.d.min))
			for _, q := range quantiles {
				line += "\t" + fmtDuration(row.d.quantile(q.q))
			}
			fmt.Fprintln(tw, line+"\t"+fmtDuration(row.d.max)+"\t")
		}
	}
	return tw.Flush()
}

// fmtDuration prints d with four significant digits, in a unit that
// keeps it readable.
func fmtDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Microsecond:
		return d.String()
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e3, 'f', digits(float64(d)/1e3), 64) + "µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/1e6, 'f', digits(float64(d)/1e6), 64) + "ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', digits(d.Seconds()), 64) + "s"
}

// digits is how many decimals leave four significant digits of v >= 1.
func digits(v float64) int {
	switch {
	case v >= 1000:
		return 0
	case v >= 100:
		return 1
	case v >= 10:
		return 2
	}
	return 3
}
