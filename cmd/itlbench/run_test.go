package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/cmdtest"
	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
)

// TestMain lets a test run the real main in a child process
// (cmdtest.RunMain), to check exit statuses from outside.
func TestMain(m *testing.M) { cmdtest.Main(m, main) }

// lockedBuffer is an io.Writer safe to read while run writes to it.
type lockedBuffer = cmdtest.LockedBuffer

// bench runs itlbench with args and -json, and decodes its report.
func benchJSON(t *testing.T, ctx context.Context, args ...string) (report, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(ctx, append([]string{"-json"}, args...), &stdout, &stderr)
	var rep report
	if stdout.Len() > 0 {
		if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
			t.Fatalf("the -json output does not decode: %v\n%s", jerr, stdout.String())
		}
	}
	return rep, stdout.String() + stderr.String(), err
}

// within checks got against want, allowing the larger of rel (a fraction)
// and abs.
func within(t *testing.T, what string, got, want float64, rel, abs float64) {
	t.Helper()
	if d := math.Abs(got - want); d > max(rel*math.Abs(want), abs) {
		t.Errorf("%s = %.4g, want %.4g within %.0f%% or %.2g", what, got, want, 100*rel, abs)
	} else {
		t.Logf("%s = %.4g (schedule %.4g)", what, got, want)
	}
}

// between checks lo <= got <= hi: for figures that lateness can only push
// one way (timers fire late, never early; a request takes time to arrive),
// so that the bound on that side can be generous and the other exact.
func between(t *testing.T, what string, got, lo, hi float64) {
	t.Helper()
	if got < lo || got > hi {
		t.Errorf("%s = %.4g, want %.4g to %.4g", what, got, lo, hi)
	} else {
		t.Logf("%s = %.4g (%.4g to %.4g)", what, got, lo, hi)
	}
}

// scheduled is an upstream that streams, for each request: a role chunk at
// once, a keep-alive comment, the first token after ttft, then one token
// after each gap (a zero gap: in the same write as the token before, so
// that the two arrive in one read), a finish chunk, usage and [DONE].
type scheduled struct {
	ttft time.Duration
	gaps []time.Duration

	mu        sync.Mutex
	sent      []time.Duration // the gaps as they were written: after the timers' slack
	firstSent []time.Duration // from the handler's start to the first token's write
}

func (s *scheduled) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	head := `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[`
	var buf []byte
	flush := func() bool {
		_, err := w.Write(buf)
		buf = buf[:0]
		return err == nil && rc.Flush() == nil
	}
	buf = append(buf, head+`{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n: keep-alive\n\n"...)
	if !flush() {
		return
	}
	wait := s.ttft
	var last time.Time
	for i := range len(s.gaps) + 1 {
		if wait > 0 {
			if !flush() {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(wait):
			}
		}
		if now := time.Now(); i > 0 {
			s.mu.Lock()
			s.sent = append(s.sent, now.Sub(last))
			s.mu.Unlock()
			last = now
		} else {
			s.mu.Lock()
			s.firstSent = append(s.firstSent, now.Sub(start))
			s.mu.Unlock()
			last = now
		}
		buf = fmt.Appendf(buf, "%s{\"index\":0,\"delta\":{\"content\":\"w%d \"}}]}\n\n", head, i)
		if i < len(s.gaps) {
			wait = s.gaps[i]
		}
	}
	buf = append(buf, head+`{"index":0,"delta":{},"finish_reason":"length"}]}`+"\n\n"...)
	buf = fmt.Appendf(buf, "%s],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", head, len(s.gaps)+1)
	flush()
}

// TestMeasuresScheduledStreams: counts are exactly what was sent, means
// within a few percent of the schedule (the server's timers are late by
// up to a millisecond on a busy machine) and the ITL sum within 2% of the
// gaps the server actually wrote; events sent together are 0 s apart.
func TestMeasuresScheduledStreams(t *testing.T) {
	ms := time.Millisecond
	s := &scheduled{ttft: 60 * ms, gaps: []time.Duration{15 * ms, 15 * ms, 0, 15 * ms, 30 * ms, 15 * ms, 0, 15 * ms, 15 * ms}}
	up := httptest.NewServer(s)
	defer up.Close()
	const sent, tokens = 6, 10
	rep, out, err := benchJSON(t, context.Background(), "-url", up.URL+"/v1", "-model", "m", "-c", "3", "-requests", fmt.Sprint(sent), "-warmup", "3")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	a := rep.Total
	if a.Requests != (requests{Sent: sent, OK: sent}) {
		t.Errorf("requests %+v", a.Requests)
	}
	if a.TTFT.Count != sent || a.ITL.Count != sent*(tokens-1) || a.TPOT.Count != sent || a.Duration.Count != sent {
		t.Errorf("counts: TTFT %d, ITL %d, TPOT %d, duration %d", a.TTFT.Count, a.ITL.Count, a.TPOT.Count, a.Duration.Count)
	}
	if a.TokenEvents != sent*tokens || a.OutputTokens != sent*tokens || a.TokensFrom != "usage" {
		t.Errorf("token events %d, output tokens %d from %s", a.TokenEvents, a.OutputTokens, a.TokensFrom)
	}
	// Against the schedule (120ms over 9 gaps), loosely and mostly upward:
	// the server's timers fire late, and the request takes its time to get
	// there, by a few milliseconds on a busy machine under -race; TTFT
	// cannot be shorter than the server's 60 ms sleep.
	between(t, "TTFT mean", a.TTFT.Mean, 0.060, 0.075)
	between(t, "ITL mean", a.ITL.Mean, 0.120/9-0.001, 0.120/9+0.004)
	between(t, "TPOT mean", a.TPOT.Mean, 0.120/9-0.001, 0.120/9+0.004)
	between(t, "ITL p50", a.ITL.P50, 0.015-0.001, 0.015+0.004)
	// Against what the server did, tightly: the gaps it wrote (a single
	// late timer moves the longest one), and TTFT from its handler's start
	// plus the request's way there (on the connections the warm-up opened).
	var written, first, longest time.Duration
	for _, g := range s.sent[3*(tokens-1):] {
		written += g
		longest = max(longest, g)
	}
	// A token read late after the longest gap lengthens it, and one read
	// late before it shortens it; a gap missed (merged into the next, 45 ms)
	// or TTFT taken as a gap (60 ms) is still far outside.
	between(t, "ITL max against the longest gap written", a.ITL.Max, longest.Seconds()-0.003, longest.Seconds()+0.010)
	for _, f := range s.firstSent[3:] {
		first += f
	}
	within(t, "ITL sum against the gaps written", a.ITL.Sum, written.Seconds(), 0.02, 0)
	// The client's clock starts before the request leaves, the server's
	// when its handler starts, so the client's TTFT is never shorter; it is
	// longer by the request's and the token's way, a few ms each under load.
	between(t, "TTFT sum against the first writes", a.TTFT.Sum, first.Seconds()-1e-6, first.Seconds()+0.008*sent)
	if a.ITL.Min != 0 {
		t.Errorf("ITL min %v: events written together were not 0 s apart", a.ITL.Min)
	}
	if a.Errors.Connect+a.Errors.HTTPStatus+a.Errors.StreamCut+a.Errors.Timeout+a.Errors.StreamError != 0 || a.InvalidEvents != 0 {
		t.Errorf("errors %+v, invalid events %d", a.Errors, a.InvalidEvents)
	}
}

// simServer is llmsim behind httptest, recording each request's headers
// and body.
type simServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []simRequest
}

type simRequest struct {
	at     time.Time
	header http.Header
	body   map[string]any
}

// simModel is a profile whose every wait is d.
func simModel(d time.Duration) llmsim.Model { return llmsim.Model{TTFT: d, ITL: d} }

func newSimServer(t *testing.T, m llmsim.Model) *simServer {
	s := &simServer{}
	sim := llmsim.New().ServeAnyModel(m)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		var decoded map[string]any
		_ = json.Unmarshal(body, &decoded)
		s.mu.Lock()
		s.requests = append(s.requests, simRequest{at, r.Header.Clone(), decoded})
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestSessionsAndHeaders: with -turns, each session's requests carry one
// id in the named header and go to one model; extra headers arrive, and
// their values appear nowhere in itlbench's output.
func TestSessionsAndHeaders(t *testing.T) {
	up := newSimServer(t, llmsim.Model{TTFT: time.Millisecond, ITL: time.Millisecond})
	rep, out, err := benchJSON(t, context.Background(), "-url", up.URL+"/v1", "-model", "m1,m2", "-c", "2", "-requests", "12",
		"-turns", "3", "-session-header", "X-Conversation", "-max-tokens", "5", "-prompt", "say five words",
		"-H", "Authorization: Bearer sk-PLANTED-SECRET", "-H", "X-Tenant: blue")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(out, "PLANTED") {
		t.Errorf("a header value was printed:\n%s", out)
	}
	if rep.Total.Requests.OK != 12 || rep.Total.OutputTokens != 60 {
		t.Errorf("requests %+v, output tokens %d", rep.Total.Requests, rep.Total.OutputTokens)
	}
	if strings.Join(rep.Headers, ",") != "Authorization,X-Tenant" || rep.SessionHeader != "X-Conversation" || rep.Turns != 3 {
		t.Errorf("report: headers %v, session header %q, turns %d", rep.Headers, rep.SessionHeader, rep.Turns)
	}
	sessions := map[string][]string{} // id: models of its requests
	up.mu.Lock()
	defer up.mu.Unlock()
	for _, r := range up.requests {
		if r.header.Get("Authorization") != "Bearer sk-PLANTED-SECRET" || r.header.Get("X-Tenant") != "blue" {
			t.Errorf("extra headers did not arrive: %v", r.header)
		}
		b := r.body
		opts, _ := b["stream_options"].(map[string]any)
		if b["stream"] != true || opts["include_usage"] != true || b["max_tokens"] != 5.0 ||
			fmt.Sprint(b["messages"]) != "[map[content:say five words role:user]]" {
			t.Errorf("request body %v", b)
		}
		id := r.header.Get("X-Conversation")
		sessions[id] = append(sessions[id], b["model"].(string))
	}
	n := 0
	for id, models := range sessions {
		n += len(models)
		if id == "" || len(models) > 3 || strings.Count(strings.Join(models, " "), models[0]) != len(models) {
			t.Errorf("session %q: models %v; want up to 3 requests to one model", id, models)
		}
	}
	if n != 12 || len(sessions) < 4 {
		t.Errorf("%d requests in %d sessions; want 12 in at least 4", n, len(sessions))
	}
}

// TestNotStreaming: whole responses are measured by their duration and
// their usage; there is no TTFT or ITL. The completions endpoint is used.
func TestNotStreaming(t *testing.T) {
	up := newSimServer(t, llmsim.Model{TTFT: 20 * time.Millisecond, ITL: time.Millisecond})
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-url", up.URL + "/v1", "-endpoint", "completions", "-model", "m", "-stream=false",
		"-requests", "4", "-c", "2", "-max-tokens", "7"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s%s", err, stdout.String(), stderr.String())
	}
	words := strings.Join(strings.Fields(stdout.String()), " ")
	for _, want := range []string{"ok 4, failed 0", "28 output tokens (from usage)", "not streaming", "duration 4 "} {
		if !strings.Contains(words, want) {
			t.Errorf("the report lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "TTFT") {
		t.Errorf("a TTFT row for whole responses:\n%s", stdout.String())
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for _, r := range up.requests {
		if r.body["stream"] != false || r.body["prompt"] != "Write a long story about a lighthouse keeper." || r.body["stream_options"] != nil {
			t.Errorf("request body %v", r.body)
		}
	}
}

// TestCompletionsStream counts completions' text events, usage off.
func TestCompletionsStream(t *testing.T) {
	up := newSimServer(t, llmsim.Model{TTFT: time.Millisecond, ITL: time.Millisecond})
	rep, out, err := benchJSON(t, context.Background(), "-url", up.URL+"/v1", "-endpoint", "completions", "-model", "m",
		"-requests", "3", "-max-tokens", "9", "-include-usage=false", "-body", `{"temperature":0,"ignore_eos":true}`)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	a := rep.Total
	if a.TokenEvents != 27 || a.OutputTokens != 27 || a.TokensFrom != "events" || a.ITL.Count != 24 || rep.Endpoint != "completions" {
		t.Errorf("events %d, output %d from %s, ITL count %d, endpoint %s", a.TokenEvents, a.OutputTokens, a.TokensFrom, a.ITL.Count, rep.Endpoint)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if b := up.requests[0].body; b["ignore_eos"] != true || b["temperature"] != 0.0 || b["stream_options"] != nil {
		t.Errorf("request body %v", b)
	}
}

// TestRateLimit: -rate spaces request starts evenly and caps them.
func TestRateLimit(t *testing.T) {
	up := newSimServer(t, llmsim.Model{})
	rep, out, err := benchJSON(t, context.Background(), "-url", up.URL+"/v1", "-model", "m", "-rate", "40", "-duration", "500ms",
		"-c", "4", "-max-tokens", "2")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Turns at 0, 25ms, ... 475ms: 20, fewer only if the machine slips.
	if n := rep.Total.Requests.Sent; n < 17 || n > 20 {
		t.Errorf("%d requests at 40/s for 0.5s; want 20", n)
	}
}

// TestRamp: -ramp starts the workers evenly over its time.
func TestRamp(t *testing.T) {
	// Each request lasts long enough that every worker sends one.
	up := newSimServer(t, simModel(500*time.Millisecond))
	if _, out, err := benchJSON(t, context.Background(), "-url", up.URL+"/v1", "-model", "m", "-c", "4", "-requests", "4",
		"-ramp", "400ms", "-max-tokens", "1"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	// Starts at 0, 100, 200 and 300ms.
	rs := up.requests
	if len(rs) != 4 || rs[3].at.Sub(rs[0].at) < 250*time.Millisecond || rs[1].at.Sub(rs[0].at) < 50*time.Millisecond {
		t.Errorf("%d requests over %v; want 4, 100ms apart", len(rs), rs[len(rs)-1].at.Sub(rs[0].at))
	}
}

// TestInterrupt: canceling the run stops it at once; requests cut count
// as canceled, not as errors, and the report is still written.
func TestInterrupt(t *testing.T) {
	up := newSimServer(t, llmsim.Model{TTFT: 10 * time.Millisecond, ITL: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, out, err := benchJSON(t, ctx, "-url", up.URL+"/v1", "-model", "m", "-c", "3", "-duration", "1m")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("the run took %v to stop", time.Since(start))
	}
	a := rep.Total
	if a.Requests.Canceled != 3 || a.Requests.Failed != 0 || a.ITL.Count == 0 {
		t.Errorf("requests %+v, ITL count %d", a.Requests, a.ITL.Count)
	}
}

// TestUpstreamCommand serves the built-in upstream through run and
// measures it: fixed timing, the model discovered from /v1/models.
func TestUpstreamCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"upstream", "-addr", "127.0.0.1:0", "-ttft", "60ms", "-itl", "20ms", "-tokens", "20", "-models", "fixed"}, io.Discard, stderr)
	}()
	var base string
	for deadline := time.Now().Add(5 * time.Second); base == ""; time.Sleep(10 * time.Millisecond) {
		if _, rest, ok := strings.Cut(stderr.String(), "serving "); ok {
			base, _, _ = strings.Cut(rest, " ")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream did not start: %s", stderr)
		}
	}
	rep, out, err := benchJSON(t, context.Background(), "-url", base, "-requests", "6", "-c", "3", "-warmup", "3")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	a := rep.Total
	if len(rep.Models) != 1 || rep.Models[0].Name != "fixed" || a.OutputTokens != 120 || a.TokensFrom != "usage" || a.ITL.Count != 6*19 {
		t.Errorf("models %v, output tokens %d from %s, ITL count %d", rep.Models, a.OutputTokens, a.TokensFrom, a.ITL.Count)
	}
	between(t, "TTFT mean", a.TTFT.Mean, 0.060, 0.075)
	between(t, "ITL mean", a.ITL.Mean, 0.020-0.001, 0.020+0.004)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("upstream returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream did not stop")
	}
}
