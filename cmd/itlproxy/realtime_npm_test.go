package main

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/internal/testenv"
	"github.com/itlproxy/itlproxy/metrics"
)

// npmProject is the npm project whose client.mjs drives the Realtime API
// with the official openai package's OpenAIRealtimeWS.
var npmProject = filepath.Join("testdata", "realtime-npm")

// npmStep is one step of client.mjs: an event to send, and what the
// client does while the response it asks for runs.
type npmStep struct {
	Send        json.RawMessage `json:"send"`
	Server      bool            `json:"server,omitempty"`
	CancelAfter int             `json:"cancelAfter,omitempty"`
	LeaveAfter  int             `json:"leaveAfter,omitempty"`
}

func planned(plan string) npmStep {
	return npmStep{Send: json.RawMessage(fmt.Sprintf(`{"type":"response.create","response":{"metadata":{"plan":%q}}}`, plan))}
}

// npmRun is what client.mjs saw, on its own clock (milliseconds).
type npmRun struct {
	Responses []struct {
		ID     string    `json:"id"`
		Start  float64   `json:"start"`
		Deltas []float64 `json:"deltas"`
		Status string    `json:"status"`
		Output int64     `json:"output"`
	} `json:"responses"`
	Sent, Received []string
	Negotiated     string `json:"negotiated"`
}

// recordedStream is a response as the admin listener's /debug/streams/{id}
// shows it.
type recordedStream struct {
	Endpoint, Outcome, Model string
	TTFT                     *float64 `json:"ttft_seconds"`
	OutputTokens             *int64   `json:"output_tokens"`
	Gaps                     int
	Timeline                 []struct{ Seconds float64 }
}

// TestRealtimeNPMClient drives the Realtime API through itlproxy's TLS
// listener with the official openai npm client (OpenAIRealtimeWS, over
// the ws package), against an upstream that answers with planned timing:
// text, audio with its transcript interleaved, a response the server
// begins (server VAD), a cancelled one, the beta's names, an error event,
// and the connection dropped mid-response by the client (a compressed
// session, permessage-deflate with context takeover) or by the upstream
// (an uncompressed one). Every message arrives as sent, both ways; each
// response's outcome and tokens are exact, its gaps as many as the
// client's and their sum, over all the responses, within 1%, its TTFT
// within 15 ms of the client's (the median within 3 ms) and, for a
// response the client began, between the upstream's and the client's.
//
// The client's TTFT includes what the proxy cannot see: its own send, TLS
// at both ends and, in the compressed session, the inflating of each
// message on Node's thread pool. Here the median difference was 0.8-1.6 ms
// uncompressed and 1.3-2.4 ms compressed over 12 runs under -race, so the
// median's bound is 3 ms; a clock started or stopped at the wrong point
// fails the between check, which has no slack.
func TestRealtimeNPMClient(t *testing.T) {
	node := testenv.LookPath(t, "node", "Node.js 18 or later, with npm: apt-get install nodejs npm")
	if _, err := os.Stat(filepath.Join(npmProject, "node_modules", "openai", "realtime", "ws.js")); err != nil {
		testenv.Missing(t, "the npm packages of "+npmProject, "run `npm ci` in cmd/itlproxy/"+filepath.ToSlash(npmProject))
	}
	pki := newPKI(t)
	_, certFile, keyFile := pki.issue("proxy", x509.ExtKeyUsageServerAuth)
	for _, tc := range []struct {
		name  string
		mode  websocket.CompressionMode
		steps []npmStep
		last  string // the outcome of the last response, whose connection ends mid-way
	}{{
		name: "deflate, the client leaves", mode: websocket.CompressionContextTakeover,
		steps: []npmStep{planned("kind=audio deltas=200 gap=10ms"), {LeaveAfter: 4}}, last: metrics.OutcomeClientCanceled,
	}, {
		name: "uncompressed, the upstream leaves", mode: websocket.CompressionDisabled,
		steps: []npmStep{planned("kind=audio deltas=200 gap=10ms then=drop at=4")}, last: metrics.OutcomeUpstreamError,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			steps := []npmStep{
				planned("kind=text deltas=30 ttft=40ms gap=10ms-30ms tokens=30"),
				planned("kind=audio deltas=40 ttft=60ms gap=2ms-28ms tokens=97"),
				{Send: json.RawMessage(`{"type":"input_audio_buffer.commit"}`), Server: true},
				planned("kind=audio deltas=60 ttft=20ms gap=10ms"), // cancelled
				planned("kind=audio beta=true deltas=20 ttft=25ms gap=10ms-20ms"),
				planned("kind=text deltas=10 gap=10ms then=error at=3"),
			}
			steps[3].CancelAfter = 5
			last := tc.steps[0]
			if len(tc.steps) > 1 {
				last.LeaveAfter = tc.steps[1].LeaveAfter
			}
			steps = append(steps, last)
			outcomes := []string{metrics.OutcomeCompleted, metrics.OutcomeCompleted, metrics.OutcomeCompleted,
				metrics.OutcomeClientCanceled, metrics.OutcomeCompleted, metrics.OutcomeUpstreamError, tc.last}

			vad, _ := e2e.ParsePlan("kind=audio deltas=20 ttft=30ms gap=5ms-15ms tokens=53")
			var mu sync.Mutex
			logged := map[string][]string{}
			upstreamTTFT := upstreamClock{}
			up := &e2e.RealtimeUpstream{Compression: tc.mode, Default: vad, Log: func(from string, msg []byte, at time.Time) {
				mu.Lock()
				defer mu.Unlock()
				logged[from] = append(logged[from], string(msg))
				upstreamTTFT.log(from, msg, at)
			}}
			upstream := httptest.NewServer(up)
			defer upstream.Close()
			in := start(t, nil, map[string]string{
				"ITLPROXY_UPSTREAM_URL":  upstream.URL,
				"ITLPROXY_TLS_CERT_FILE": certFile,
				"ITLPROXY_TLS_KEY_FILE":  keyFile,
			})
			run := runNPMClient(t, node, pki.caFile, "https://"+in.proxy+"/v1", steps, tc.mode != websocket.CompressionDisabled)
			if compressed := strings.Contains(run.Negotiated, "permessage-deflate"); compressed != (tc.mode != websocket.CompressionDisabled) {
				t.Errorf("negotiated %q", run.Negotiated)
			}
			mu.Lock()
			if !slices.Equal(run.Sent, logged["client"]) {
				t.Errorf("the client sent %d messages, the upstream read %d different ones", len(run.Sent), len(logged["client"]))
			}
			// What the upstream sent before the client left may not all have
			// reached it; what did arrived as sent, in order.
			if n := len(run.Received); n == 0 || !slices.Equal(run.Received, logged["server"][:min(n, len(logged["server"]))]) {
				t.Errorf("the client received %d messages, not the first the upstream sent (of %d)", n, len(logged["server"]))
			}
			mu.Unlock()
			if len(run.Responses) != len(outcomes) {
				t.Fatalf("the client saw %d responses, want %d", len(run.Responses), len(outcomes))
			}
			waitFor(t, "the connection to be recorded", 5*time.Second, func() bool {
				return in.scrape().Value("itlproxy_requests_total", "endpoint", "realtime") == 1
			})
			mu.Lock()
			upstreamTTFTs := upstreamTTFT.ttfts()
			mu.Unlock()
			compareNPMRun(t, in, run, outcomes, steps, upstreamTTFTs)
		})
	}
}

// runNPMClient runs client.mjs with steps and returns what it saw.
func runNPMClient(t *testing.T, node, caFile, baseURL string, steps []npmStep, deflate bool) npmRun {
	t.Helper()
	stepsJSON, _ := json.Marshal(steps)
	cmd := exec.Command(node, "client.mjs")
	cmd.Dir = npmProject
	cmd.Env = append(os.Environ(), "NODE_EXTRA_CA_CERTS="+caFile, "BASE_URL="+baseURL, "MODEL=gpt-realtime",
		"STEPS="+string(stepsJSON), fmt.Sprintf("DEFLATE=%v", deflate))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("client.mjs: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("client.mjs did not finish in 60s\n%s", stderr.String())
	}
	var run npmRun
	if err := json.Unmarshal(stdout.Bytes(), &run); err != nil {
		t.Fatalf("client.mjs printed %q: %v\n%s", stdout.String(), err, stderr.String())
	}
	return run
}

// upstreamClock reads the upstream's log for the TTFT of each response a
// client's response.create began, on the upstream's clock: from the read of
// the response.create to the moment before the write of the first delta.
type upstreamClock struct {
	asked        time.Time            // the response.create last read, not yet answered
	start, first map[string]time.Time // by response id
}

func (u *upstreamClock) log(from string, msg []byte, at time.Time) {
	var ev struct {
		Type       string `json:"type"`
		ResponseID string `json:"response_id"`
		Response   struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	if json.Unmarshal(msg, &ev) != nil {
		return
	}
	if u.start == nil {
		u.start, u.first = map[string]time.Time{}, map[string]time.Time{}
	}
	switch {
	case from == "client" && ev.Type == "response.create":
		u.asked = at
	case from == "server" && ev.Type == "response.created":
		if !u.asked.IsZero() {
			u.start[ev.Response.ID], u.asked = u.asked, time.Time{}
		}
	case from == "server" && strings.HasSuffix(ev.Type, ".delta") && ev.ResponseID != "":
		if _, seen := u.first[ev.ResponseID]; !seen {
			u.first[ev.ResponseID] = at
		}
	}
}

// ttfts returns the TTFT, in seconds, of each response that has both ends.
func (u *upstreamClock) ttfts() map[string]float64 {
	ttft := map[string]float64{}
	for id, start := range u.start {
		if first, ok := u.first[id]; ok {
			ttft[id] = first.Sub(start).Seconds()
		}
	}
	return ttft
}

// compareNPMRun holds what the proxy recorded of each response to what
// the client saw, and the TTFT of each response the client began to the
// upstream's (upstream, by response id): the proxy's interval lies within
// the client's and contains the upstream's, so its TTFT must lie between
// theirs, whatever the machine's load.
func compareNPMRun(t *testing.T, in *instance, run npmRun, outcomes []string, steps []npmStep, upstream map[string]float64) {
	t.Helper()
	var ttftDiffs []float64
	var proxyGaps, clientGaps float64
	deltas, gaps := 0, 0
	for i, cr := range run.Responses {
		resp, err := http.Get("http://" + in.admin + "/debug/streams/" + cr.ID)
		if err != nil {
			t.Fatal(err)
		}
		var rs recordedStream
		err = json.NewDecoder(resp.Body).Decode(&rs)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("response %d (%q): not recorded: %v", i, cr.ID, err)
		}
		if rs.Endpoint != "realtime" || rs.Model != "gpt-realtime" || rs.Outcome != outcomes[i] ||
			rs.OutputTokens == nil || *rs.OutputTokens != cr.Output {
			t.Errorf("response %s: %s %s, outcome %s, output tokens %v; want outcome %s, %d tokens (client: status %q)",
				cr.ID, rs.Endpoint, rs.Model, rs.Outcome, rs.OutputTokens, outcomes[i], cr.Output, cr.Status)
		}
		deltas += len(cr.Deltas)
		if len(cr.Deltas) == 0 {
			continue
		}
		gaps += len(cr.Deltas) - 1
		clientTTFT := (cr.Deltas[0] - cr.Start) / 1000
		if rs.TTFT == nil {
			t.Errorf("response %s: no TTFT; the client's %.2fms", cr.ID, clientTTFT*1000)
			continue
		}
		diff := math.Abs(*rs.TTFT - clientTTFT)
		ttftDiffs = append(ttftDiffs, diff)
		t.Logf("response %s: TTFT upstream %.2fms, proxy %.2fms, client %.2fms; %d gaps", cr.ID, upstream[cr.ID]*1000, *rs.TTFT*1000, clientTTFT*1000, rs.Gaps)
		if diff > 0.015 {
			t.Errorf("response %s: TTFT %.2fms, the client's %.2fms", cr.ID, *rs.TTFT*1000, clientTTFT*1000)
		}
		if !steps[i].Server {
			if up, ok := upstream[cr.ID]; !ok {
				t.Errorf("response %s: the upstream's log has no TTFT", cr.ID)
			} else if *rs.TTFT < up || *rs.TTFT > clientTTFT {
				t.Errorf("response %s: TTFT %.3fms, not between the upstream's %.3fms and the client's %.3fms", cr.ID, *rs.TTFT*1000, up*1000, clientTTFT*1000)
			}
		}
		var sum float64
		for _, g := range rs.Timeline {
			sum += g.Seconds
		}
		clientSum := (cr.Deltas[len(cr.Deltas)-1] - cr.Deltas[0]) / 1000
		proxyGaps, clientGaps = proxyGaps+sum, clientGaps+clientSum
		if rs.Gaps != len(cr.Deltas)-1 || math.Abs(sum-clientSum) > 0.015 {
			t.Errorf("response %s: %d gaps summing %.2fms; the client's %d, %.2fms", cr.ID, rs.Gaps, sum*1000, len(cr.Deltas)-1, clientSum*1000)
		}
	}
	slices.Sort(ttftDiffs)
	if len(ttftDiffs) > 0 && ttftDiffs[len(ttftDiffs)/2] > 0.003 {
		t.Errorf("median |TTFT - client's| %.2fms, want within 3ms", ttftDiffs[len(ttftDiffs)/2]*1000)
	}
	t.Logf("gaps of all the responses: proxy %.2fms, client %.2fms", proxyGaps*1000, clientGaps*1000)
	if math.Abs(proxyGaps-clientGaps) > 0.01*clientGaps {
		t.Errorf("gaps of all the responses: proxy %.2fms, client %.2fms, want within 1%%", proxyGaps*1000, clientGaps*1000)
	}
	fs := in.scrape()
	labels := []string{"endpoint", "realtime", "model", "gpt-realtime"}
	if n, _ := fs.Histogram("itlproxy_inter_token_latency_seconds", labels...); n != uint64(gaps) {
		t.Errorf("ITL observed %d times, the client saw %d gaps", n, gaps)
	}
	if n := fs.Value("itlproxy_streams_total", labels...); n != float64(len(outcomes)) {
		t.Errorf("%v streams, want %d", n, len(outcomes))
	}
	if n := fs.Value("itlproxy_parse_failures_total"); n != 0 {
		t.Errorf("%v parse failures", n)
	}
}
