package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tabulate:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tabulate", flag.ContinueOnError)
	dir := fs.String("dir", "", "the `directory` bench/run.sh wrote (bench/results/<mode>)")
	write := fs.String("write", "", "replace the mode's marked section of this Markdown `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() > 0 {
		return errors.New("usage: tabulate -dir DIR [-write FILE]")
	}
	res, err := load(*dir)
	if err != nil {
		return err
	}
	md := res.markdown()
	if err := os.WriteFile(filepath.Join(*dir, "tables.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dir, "summary.csv"), []byte(res.csv()), 0o644); err != nil {
		return err
	}
	if *write != "" {
		doc, err := os.ReadFile(*write)
		if err != nil {
			return err
		}
		rel := *dir
		absDoc, err1 := filepath.Abs(filepath.Dir(*write))
		absDir, err2 := filepath.Abs(*dir)
		if r, err := filepath.Rel(absDoc, absDir); err1 == nil && err2 == nil && err == nil {
			rel = r
		}
		section := fmt.Sprintf("<!-- The tables below are written by bench/run.sh --%s (bench/tabulate) from its raw results in %s/ (not committed): do not edit them by hand. -->\n\n%s",
			res.env["mode"], filepath.ToSlash(rel), md)
		out, err := replaceSection(doc, res.env["mode"], section)
		if err != nil {
			return fmt.Errorf("%s: %w", *write, err)
		}
		if err := os.WriteFile(*write, out, 0o644); err != nil {
			return err
		}
	}
	_, err = io.WriteString(stdout, md)
	return err
}

// replaceSection replaces what lies between the mode's begin and end
// markers.
func replaceSection(doc []byte, mode, section string) ([]byte, error) {
	begin := []byte("<!-- bench:" + mode + ":begin -->\n")
	end := []byte("<!-- bench:" + mode + ":end -->")
	i := bytes.Index(doc, begin)
	j := bytes.Index(doc, end)
	if i < 0 || j < i {
		return nil, fmt.Errorf("no %q ... %q markers", bytes.TrimSpace(begin), end)
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(begin)])
	out.WriteString(section)
	if !strings.HasSuffix(section, "\n") {
		out.WriteByte('\n')
	}
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// report is the part of an itlbench -json report the tables use.
type report struct {
	Concurrency    int     `json:"concurrency"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	PeakInFlight   int64   `json:"peak_in_flight"`
	Total          struct {
		Requests struct {
			Sent, OK, Failed, Canceled int64
		} `json:"requests"`
		TokenEvents      int64 `json:"token_events"`
		EndedWithoutDone int64 `json:"ended_without_done"`
		TTFT             dist  `json:"ttft"`
		ITL              dist  `json:"itl"`
		Transit          dist  `json:"transit"`
		Errors           struct {
			Messages map[string]string `json:"messages"`
		} `json:"errors"`
	} `json:"total"`
	// Compare is itlbench's -compare-metrics, given for itlproxy only:
	// its own account of the run.
	Compare *struct {
		Own *ownAccount `json:"own"`
	} `json:"compare"`
	Processes *struct {
		CPUSeconds     float64 `json:"cpu_seconds"`
		RSSBeforeBytes int64   `json:"rss_before_bytes"`
		RSSPeakBytes   int64   `json:"rss_peak_bytes"`
		HWMBytes       int64   `json:"hwm_bytes"`
		Error          string  `json:"error"`
	} `json:"processes"`
}

type dist struct {
	Count          uint64  `json:"count"`
	Mean, P50, P99 float64 // seconds
}

// row is one target at one number of streams, in one of the two runs:
// "load" (the comparison at the fast upstream) or "paced" (the slow one).
type row struct {
	run     string
	streams int
	target  string
	rep     report
}

// results is everything one run of bench/run.sh left.
type results struct {
	env     map[string]string
	rows    []row // by run, streams, then in targetOrder
	big     *report
	micro   []bench
	profile string
	memory  *memory
	parts   *partsResults // where the cost goes, when the run measured it
}

// targetOrder is the order of the tables' rows.
var targetOrder = []string{"direct", "itlproxy", "plain", "nginx", "haproxy", "caddy"}

var targetNames = map[string]string{
	"direct":   "direct",
	"itlproxy": "itlproxy",
	"plain":    "plain Go proxy",
	"nginx":    "nginx",
	"haproxy":  "HAProxy",
	"caddy":    "Caddy",
}

func load(dir string) (*results, error) {
	res := &results{env: map[string]string{}}
	envText, err := os.ReadFile(filepath.Join(dir, "env.txt"))
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(string(envText)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			res.env[k] = v
		}
	}
	for _, run := range []string{"load", "paced"} {
		files, err := filepath.Glob(filepath.Join(dir, run+"-*.json"))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			// <run>-<streams>-<target>.json
			parts := strings.SplitN(strings.TrimSuffix(filepath.Base(f), ".json"), "-", 3)
			streams, err := strconv.Atoi(parts[1])
			if len(parts) != 3 || err != nil {
				return nil, fmt.Errorf("%s: want %s-<streams>-<target>.json", f, run)
			}
			var r report
			if err := readJSON(f, &r); err != nil {
				return nil, err
			}
			res.rows = append(res.rows, row{run: run, streams: streams, target: parts[2], rep: r})
		}
	}
	slices.SortStableFunc(res.rows, func(a, b row) int {
		if a.run != b.run {
			return strings.Compare(a.run, b.run)
		}
		if a.streams != b.streams {
			return a.streams - b.streams
		}
		return slices.Index(targetOrder, a.target) - slices.Index(targetOrder, b.target)
	})
	if res.parts, err = loadParts(dir); err != nil {
		return nil, err
	}
	if f := filepath.Join(dir, "big.json"); exists(f) {
		res.big = &report{}
		if err := readJSON(f, res.big); err != nil {
			return nil, err
		}
	}
	if f := filepath.Join(dir, "micro.txt"); exists(f) {
		text, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		res.micro = parseBenchmarks(string(text))
	}
	if f := filepath.Join(dir, "memory.txt"); exists(f) {
		m, err := readMemory(dir)
		if err != nil {
			return nil, err
		}
		res.memory = m
	}
	if f := filepath.Join(dir, "profile-top.txt"); exists(f) {
		text, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		res.profile = string(text)
	}
	return res, nil
}

func readJSON(file string, v any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("%s is empty: its itlbench run failed (see its .log)", file)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

func exists(f string) bool {
	_, err := os.Stat(f)
	return err == nil
}

// find returns the row of target at streams in the run.
func (res *results) find(run string, streams int, target string) *row {
	for i := range res.rows {
		if r := &res.rows[i]; r.run == run && r.streams == streams && r.target == target {
			return r
		}
	}
	return nil
}

// of returns the rows of one run.
func (res *results) of(run string) []row {
	var out []row
	for _, r := range res.rows {
		if r.run == run {
			out = append(out, r)
		}
	}
	return out
}

// streams returns the numbers of streams of the run, ascending.
func (res *results) streams(run string) []int {
	var out []int
	for _, r := range res.of(run) {
		if !slices.Contains(out, r.streams) {
			out = append(out, r.streams)
		}
	}
	return out
}

// cpuPer1k is the proxy's CPU milliseconds per 1,000 token events
// delivered (numerically, µs per event); ok is false without a reading.
func (r *row) cpuPer1k() (float64, bool) {
	p := r.rep.Processes
	if p == nil || r.rep.Total.TokenEvents == 0 {
		return 0, false
	}
	return 1e6 * p.CPUSeconds / float64(r.rep.Total.TokenEvents), true
}

// rssPerStream is the proxy's peak RSS during the run less its idle RSS,
// per stream, in KiB.
func (r *row) rssPerStream() (float64, bool) {
	p := r.rep.Processes
	if p == nil || r.streams == 0 {
		return 0, false
	}
	return float64(p.RSSPeakBytes-p.RSSBeforeBytes) / 1024 / float64(r.streams), true
}

func (r *row) errors() int64 { return r.rep.Total.Requests.Failed }

// ratio divides a figure of r by the same figure of another target at the
// same number of streams in the same run.
func (res *results) ratio(r *row, other string, figure func(*row) (float64, bool)) (float64, bool) {
	o := res.find(r.run, r.streams, other)
	if o == nil || o == r {
		return 0, false
	}
	a, ok1 := figure(r)
	b, ok2 := figure(o)
	if !ok1 || !ok2 || b <= 0 {
		return 0, false
	}
	return a / b, true
}
