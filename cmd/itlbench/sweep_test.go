package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/cmdtest"
	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
	"github.com/itlproxy/itlproxy/internal/e2e"
)

// The law of the simulated server the sweep tests run against: a lone
// stream's gap is lawITL, and each other request in flight adds
// lawPerStream (llmsim.Load). Gaps of 60 ms and more keep what a
// machine's scheduler adds to a timer (a few milliseconds at its p99 on a
// small virtual machine) within a few percent of them.
const (
	lawTTFT      = 20 * time.Millisecond
	lawITL       = 60 * time.Millisecond
	lawPerStream = 6 * time.Millisecond
	lawTokens    = 10
)

// timerSlack is the granularity of the simulated server's timers: Go's
// poller waits in whole milliseconds.
const timerSlack = time.Millisecond

// lawGap is the law's gap at n streams.
func lawGap(n int) time.Duration {
	return (&llmsim.Load{PerStream: lawPerStream}).Gap(lawITL, n)
}

// lawCapacity is the capacity the law gives for an ITL objective over
// levels: the highest level whose gap is within it.
func lawCapacity(levels []int, objective time.Duration) (capacity, missedAt int) {
	for _, n := range levels {
		if lawGap(n) <= objective {
			capacity = n
		} else if missedAt == 0 {
			missedAt = n
		}
	}
	return capacity, missedAt
}

// startLawUpstream serves the law with `itlbench upstream -itl-per-stream`
// and returns its base URL.
func startLawUpstream(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	base := startServing(t, ctx, "upstream", "-addr", "127.0.0.1:0", "-models", "law",
		"-ttft", lawTTFT.String(), "-itl", lawITL.String(), "-itl-per-stream", lawPerStream.String(),
		"-tokens", fmt.Sprint(lawTokens))
	t.Cleanup(cancel) // before startServing's, which waits for the upstream to stop
	return base
}

// joinLevels writes levels as -levels takes them.
func joinLevels(levels []int) string {
	var s []string
	for _, n := range levels {
		s = append(s, fmt.Sprint(n))
	}
	return strings.Join(s, ",")
}

// sweepJSON is the part of a sweep's -json output the tests read, decoded
// as a script would.
type sweepJSON struct {
	Levels []struct {
		Concurrency     int         `json:"concurrency"`
		Started         time.Time   `json:"started"`
		DurationSeconds float64     `json:"duration_seconds"`
		Total           resultJSON  `json:"total"`
		Met             bool        `json:"met"`
		Missed          []string    `json:"missed"`
		Compare         *comparison `json:"compare"`
	} `json:"levels"`
	Capacity         capacityJSON `json:"capacity"`
	Interrupted      bool         `json:"interrupted"`
	InterruptedLevel int          `json:"interrupted_level"`
}

// writeLog is a server's record of when it wrote each token event of
// each request.
type writeLog struct {
	mu      sync.Mutex
	streams []*written
}

// written is one request: when it arrived, and when each of its token
// events was written.
type written struct {
	arrived time.Time
	tokens  []time.Time
}

// wrap records what h writes: each chunk with content is a token event.
func (l *writeLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &written{arrived: time.Now()}
		l.mu.Lock()
		l.streams = append(l.streams, s)
		l.mu.Unlock()
		h.ServeHTTP(&loggingWriter{ResponseWriter: w, log: l, s: s}, r)
	})
}

type loggingWriter struct {
	http.ResponseWriter
	log *writeLog
	s   *written
}

func (w *loggingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if bytes.Contains(p, []byte(`"delta":{"content":"`)) && !bytes.Contains(p, []byte(`"content":""`)) {
		w.log.mu.Lock()
		w.s.tokens = append(w.s.tokens, time.Now())
		w.log.mu.Unlock()
	}
	return n, err
}

// Unwrap lets http.ResponseController flush the writer underneath.
func (w *loggingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// gaps returns the gaps written between the token events of the requests
// that arrived within [from, to).
func (l *writeLog) gaps(from, to time.Time) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for _, s := range l.streams {
		if s.arrived.Before(from) || !s.arrived.Before(to) {
			continue
		}
		for i := 1; i < len(s.tokens); i++ {
			out = append(out, s.tokens[i].Sub(s.tokens[i-1]))
		}
	}
	return out
}

// nearestRank is the q-quantile of ds by nearest rank, as itlbench
// reports it.
func nearestRank(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Sorted(slices.Values(ds))
	return ds[max(int(math.Ceil(q*float64(len(ds))))-1, 0)]
}

// TestSweepFindsTheLawsCapacity sweeps 1 to 32 streams over a server whose
// gaps follow a known law, with an ITL objective the law crosses between
// 8 and 16 streams: the sweep must name the capacity the law gives, bound
// by ITL at the level above, and measure each level's p99 ITL within a few
// percent of the law: 2% below, and above 5%, the timers' millisecond,
// and what the server's own writes of those gaps were late by at their
// p99 (timers fire late, never early; on a busy machine by tens of
// milliseconds, which is the server missing its law, not the sweep
// mismeasuring it). Each level's goodput is all of its requests where the
// law meets the objective and none where it does not, and its tokens per
// second are what the law gives. The HTML page it writes is then rendered
// in Chromium.
func TestSweepFindsTheLawsCapacity(t *testing.T) {
	load := &llmsim.Load{PerStream: lawPerStream}
	var log writeLog
	up := httptest.NewServer(log.wrap(llmsim.New().ServeAnyModel(llmsim.Model{TTFT: lawTTFT, ITL: lawITL, Length: lawTokens, Load: load})))
	defer up.Close()
	levels := []int{1, 2, 4, 8, 16, 32}
	const objective = 126 * time.Millisecond // 102 ms at 8 streams, 150 ms at 16
	page := filepath.Join(t.TempDir(), "sweep.html")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"sweep", "-url", up.URL + "/v1", "-model", "law", "-levels", joinLevels(levels),
		"-duration", "4s", "-slo-itl", objective.String(), "-slo-ttft", "500ms", "-json", "-report", page}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var rep sweepJSON
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the -json output does not decode: %v\n%s", err, stdout.String())
	}
	if len(rep.Levels) != len(levels) {
		t.Fatalf("%d levels reported, want %d", len(rep.Levels), len(levels))
	}
	for i, l := range rep.Levels {
		n := l.Concurrency
		law := lawGap(n)
		a := l.Total
		window := log.gaps(l.Started, l.Started.Add(time.Duration(l.DurationSeconds*float64(time.Second))))
		written := nearestRank(window, 0.99)
		late := max(written-law, 0)
		t.Logf("%2d streams: %3d requests, ITL p50 %.2fms p99 %.2fms (law %v; the server wrote %d gaps, p99 %v), goodput %+v, %.0f tokens/s",
			n, a.Requests.Sent, 1e3*a.ITL.P50, 1e3*a.ITL.P99, law, len(window), written, a.Goodput, a.OutputTokensPerSecond)
		if n != levels[i] {
			t.Errorf("level %d is of %d streams, want %d", i, n, levels[i])
		}
		if a.Requests.OK != a.Requests.Sent || a.Requests.Sent == 0 || a.ITL.Count != uint64(a.Requests.OK*(lawTokens-1)) {
			t.Errorf("%d streams: requests %+v, %d gaps: want every request ok, with %d gaps each", n, a.Requests, a.ITL.Count, lawTokens-1)
		}
		if lo, hi := 0.98*law.Seconds(), 1.05*law.Seconds()+(timerSlack+late).Seconds(); a.ITL.P99 < lo || a.ITL.P99 > hi {
			t.Errorf("%d streams: p99 ITL %.2fms, want the law's %v within a few percent (%.2fms to %.2fms)", n, 1e3*a.ITL.P99, law, 1e3*lo, 1e3*hi)
		}
		meets := law <= objective
		if l.Met != meets || !meets && !slices.Equal(l.Missed, []string{missedITL}) {
			t.Errorf("%d streams: met %v, missed %v; the law says met %v (the server's own p99 gap was %v: a busy machine can make it miss its law)",
				n, l.Met, l.Missed, meets, written)
		}
		if g := a.Goodput; g == nil || g.Judged != a.Requests.Sent || meets && g.Ratio < 0.95 || !meets && g.Ratio > 0.05 {
			t.Errorf("%d streams: goodput %+v; want every request judged, and all good (or none) as the law meets the objective (or not)", n, g)
		}
		// A stream of the law lasts TTFT + 9 gaps and carries 10 tokens.
		perStream := float64(lawTokens) / (lawTTFT + (lawTokens-1)*law).Seconds()
		within(t, fmt.Sprintf("%d streams: tokens/s", n), a.OutputTokensPerSecond, float64(n)*perStream, 0.1, 0)
	}
	capacity, missedAt := lawCapacity(levels, objective)
	c := rep.Capacity
	if c.Concurrency != capacity || c.MissedAt != missedAt || !slices.Equal(c.BoundBy, []string{missedITL}) || c.AtLeast {
		t.Errorf("capacity %+v; the law gives %d streams, bound by itl at %d", c, capacity, missedAt)
	}
	if n := load.Gap(lawITL, 1); n != lawITL {
		t.Errorf("the law's lone stream gap %v", n)
	}

	t.Run("page in Chromium", func(t *testing.T) {
		checkSweepPage(t, page, levels, capacity)
	})
}

// checkSweepPage renders the page in headless Chromium: it must show the
// four charts, each with a point per level and the capacity marked, the
// capacity and a row per level, with nothing fetched and no script.
func checkSweepPage(t *testing.T, page string, levels []int, capacity int) {
	raw, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"<script", "src=", "http-equiv", "@import", "url("} {
		if bytes.Contains(raw, []byte(bad)) {
			t.Errorf("the page has %q: it must stand alone, without script", bad)
		}
	}
	dom, _ := e2e.Render(t, "file://"+page, "sweep.png", 1280, 1800)
	for _, id := range []string{"itl", "ttft", "throughput", "goodput"} {
		fig := regexp.MustCompile(`(?s)<figure id="` + id + `">(.*?)</figure>`).FindStringSubmatch(dom)
		if fig == nil {
			t.Errorf("no %s chart in the rendered page", id)
			continue
		}
		if n := strings.Count(fig[1], "<circle"); n < len(levels) {
			t.Errorf("%s chart: %d points, want one per level (%d) and more", id, n, len(levels))
		}
		if !strings.Contains(fig[1], fmt.Sprintf(">capacity %d<", capacity)) {
			t.Errorf("%s chart: no capacity mark at %d", id, capacity)
		}
	}
	if !strings.Contains(dom, `<line class="objective"`) {
		t.Error("no objective drawn")
	}
	for _, n := range levels {
		if !strings.Contains(dom, fmt.Sprintf(`data-streams="%d"`, n)) {
			t.Errorf("no row for %d streams", n)
		}
	}
	if !regexp.MustCompile(`(?s)id="capacity".*<span class="big">` + fmt.Sprint(capacity) + `</span>`).MatchString(dom) {
		t.Errorf("the verdict does not show %d streams", capacity)
	}
}

// TestSweepBadInput: each bad command line is refused with a clear error
// and a usage error's exit status, before any request is sent.
func TestSweepBadInput(t *testing.T) {
	var requests atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusTeapot)
	}))
	defer up.Close()
	target := []string{"-url", up.URL + "/v1", "-model", "m"}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"-levels: want the concurrency levels, comma-separated and increasing, e.g. 1,2,4,8,16,32"}},
		{[]string{"-levels", " "}, []string{"-levels: want the concurrency levels"}},
		{[]string{"-levels", "4,2"}, []string{`-levels "4,2": 2 after 4: want the levels in increasing order, each once`}},
		{[]string{"-levels", "2,2"}, []string{`-levels "2,2": 2 after 2`}},
		{[]string{"-levels", "0,4"}, []string{`-levels "0,4": a level of 0: want 1 stream or more`}},
		{[]string{"-levels", "1,,2"}, []string{`-levels "1,,2": "" is not a whole number of streams`}},
		{[]string{"-levels", "1,2", "-slo-itl", "fast"}, []string{`-slo-itl "fast": want a duration such as 50ms or 2s`}},
		{[]string{"-levels", "1,2", "-slo-ttft", "-1s"}, []string{`-slo-ttft "-1s": want a positive duration`}},
		{[]string{"-levels", "4,2", "-slo-itl", "50"}, []string{"2 after 4", `-slo-itl "50": want a duration`}},
		{[]string{"-levels", "1,2", "-c", "8"}, []string{"-c: a sweep's concurrency is each of -levels"}},
		{[]string{"-levels", "1,2", "-rate", "5", "-requests", "9"}, []string{"-rate: a sweep steps the concurrency", "-requests: each level measures for -duration"}},
		{[]string{"-levels", "1,2", "-stream=false"}, []string{"-stream=false: a sweep judges streams"}},
		{[]string{"-levels", "1,2", "-duration", "0s"}, []string{"-duration 0s: want a positive duration"}},
		{[]string{"-levels", "1,2", "-report", "/nonexistent/dir/sweep.html"}, []string{`-report "/nonexistent/dir/sweep.html": its directory does not exist`}},
		{[]string{"-levels", "1,2", "http://127.0.0.1/v1"}, []string{`unexpected argument "http://127.0.0.1/v1"`}},
	} {
		args := append(append([]string{"sweep"}, target...), c.args...)
		out, status := cmdtest.RunMain(t, nil, args...)
		if status != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", c.args, status, out)
		}
		for _, w := range append(c.want, "run 'itlbench -h' for usage") {
			if !strings.Contains(out, w) {
				t.Errorf("%v: %q lacks %q", c.args, out, w)
			}
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests reached the server; a refused command line sends none", n)
	}
	out, status := cmdtest.RunMain(t, nil, "sweep", "-h")
	for _, want := range []string{"-levels levels", "-slo-itl duration", "-slo-ttft duration", "-report file", "3 to 5 times the expected peak"} {
		if status != 0 || !strings.Contains(out, want) {
			t.Errorf("sweep -h: exit %d, lacks %q", status, want)
		}
	}
	for _, refused := range []string{"\n  -c ", "\n  -rate ", "\n  -warmup ", "\n  -stream\n"} {
		if strings.Contains(out, refused) {
			t.Errorf("sweep -h shows %q, which a sweep refuses", strings.TrimSpace(refused))
		}
	}
}

// TestSweepInterrupt stops a real itlbench process with SIGINT during its
// third level: it reports the two levels done (and leaves the third
// out), writes its page, and exits 0 at once.
func TestSweepInterrupt(t *testing.T) {
	base := startLawUpstream(t)
	page := filepath.Join(t.TempDir(), "sweep.html")
	cmd := cmdtest.MainCommand(nil, "sweep", "-url", base+"/v1", "-levels", "1,2,4", "-duration", "1s",
		"-slo-itl", "1s", "-json", "-report", page, "-progress", "always")
	var stdout bytes.Buffer
	stderr := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	e2e.WaitFor(t, "the second level to end", 30*time.Second, func() bool {
		return strings.Contains(stderr.String(), "itlbench sweep: 2 streams:")
	})
	time.Sleep(200 * time.Millisecond) // into the third level
	signaled := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("still running 10s after SIGINT\n%s", stderr)
	}
	if d := time.Since(signaled); d > 3*time.Second {
		t.Errorf("it took %v to stop", d)
	}
	var rep sweepJSON
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the -json output does not decode: %v\n%s", err, stdout.String())
	}
	var done2 []int
	for _, l := range rep.Levels {
		done2 = append(done2, l.Concurrency)
		if l.Total.Requests.OK == 0 || l.Total.Requests.Canceled != 0 {
			t.Errorf("level %d: requests %+v; a level done has its requests all ended", l.Concurrency, l.Total.Requests)
		}
	}
	if !slices.Equal(done2, []int{1, 2}) || !rep.Interrupted || rep.InterruptedLevel != 4 {
		t.Errorf("levels %v, interrupted %v during %d; want 1 and 2, interrupted during 4", done2, rep.Interrupted, rep.InterruptedLevel)
	}
	if rep.Capacity.Concurrency != 2 || !rep.Capacity.AtLeast {
		t.Errorf("capacity %+v; want at least 2 streams, of the levels done", rep.Capacity)
	}
	html, err := os.ReadFile(page)
	if err != nil || !bytes.Contains(html, []byte("Interrupted during the level of 4 streams")) || bytes.Count(html, []byte(`<tr class="level`)) != 2 {
		t.Errorf("the page does not show the two levels done and the interruption: %v", err)
	}
}
