package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// withStallFor answers the request whose X-Request-Id is id from stalled,
// every other one from normal: the tests' way to inject one slow stream.
func withStallFor(id string, stalled, normal http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Request-Id") == id {
			stalled.ServeHTTP(w, r)
			return
		}
		normal.ServeHTTP(w, r)
	})
}

// stream sends one streaming chat request for model with the request id
// and headers, the first of its conversation, and reads it to its end.
func stream(t *testing.T, proxyAddr, model, id string, header ...string) {
	t.Helper()
	streamTurn(t, proxyAddr, model, id, 1, header...)
}

// streamTurn is stream for a request at turn turn of its conversation:
// its messages carry the history of the turns before, as chat clients
// send it.
func streamTurn(t *testing.T, proxyAddr, model, id string, turn int, header ...string) {
	t.Helper()
	history := strings.Repeat(`{"role":"user","content":"a secret prompt"},{"role":"assistant","content":"an answer"},`, turn-1)
	req, _ := http.NewRequest(http.MethodPost, "http://"+proxyAddr+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","stream":true,"messages":[`+history+`{"role":"user","content":"a secret prompt"}]}`))
	req.Header.Set("X-Request-Id", id)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// getJSON GETs url into v and returns the status.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// recorded is a stream as /debug/streams shows it, in part.
type recorded struct {
	RequestID       string  `json:"request_id"`
	SessionID       string  `json:"session_id"`
	TraceID         string  `json:"trace_id"`
	Model           string  `json:"model"`
	Outcome         string  `json:"outcome"`
	TTFT            float64 `json:"ttft_seconds"`
	Gaps            int     `json:"gaps"`
	LongestGap      float64 `json:"longest_gap_seconds"`
	LongestGapIndex int     `json:"longest_gap_index"`
	Timeline        []struct {
		Seconds float64 `json:"seconds"`
	} `json:"timeline"`
}

// TestDebugStreamsFindsTheSpike: a spiky stream sent with a traceparent
// is found at /debug/streams/{request_id} on the admin port, its timeline
// with the spike at the right position, and among the streams that
// /debug/streams?min_gap= selects; the proxy port does not serve it.
func TestDebugStreamsFindsTheSpike(t *testing.T) {
	up := httptest.NewServer(withStallFor("req-spike",
		scheduledUpstream{schedule: fixedSchedule(20*ms, 5*ms, 5*ms, 5*ms, 400*ms, 5*ms, 5*ms)},
		scheduledUpstream{schedule: fixedSchedule(20*ms, 5*ms, 5*ms, 5*ms)}))
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL})
	stream(t, in.proxy, "m", "req-smooth")
	stream(t, in.proxy, "m", "req-spike", "X-Session-Id", "sess-7",
		"Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")

	admin := "http://" + in.admin + "/debug/streams"
	var got recorded
	waitFor(t, "the stream to be recorded", 5*time.Second, func() bool {
		return getJSON(t, admin+"/req-spike", &got) == http.StatusOK
	})
	if got.Model != "m" || got.Outcome != "completed" || got.SessionID != "sess-7" || got.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("recorded %+v", got)
	}
	// Tokens 1 to 7; the spike is the fourth gap, before token 5.
	if got.Gaps != 6 || len(got.Timeline) != 6 || got.LongestGapIndex != 4 || got.LongestGap < 0.4 {
		t.Fatalf("gaps %d, timeline %v, longest %v at %d; want 6 gaps, the longest ≥0.4s at 4", got.Gaps, got.Timeline, got.LongestGap, got.LongestGapIndex)
	}
	for i, g := range got.Timeline {
		if spike := i == 3; spike != (g.Seconds >= 0.4) {
			t.Errorf("timeline[%d] = %vs", i, g.Seconds)
		}
	}
	if got.TTFT < 0.02 || got.TTFT > 0.4 {
		t.Errorf("TTFT %vs, want about 0.02", got.TTFT)
	}

	var list struct{ Streams []recorded }
	for _, c := range []struct {
		query string
		want  string
	}{
		{"", "req-spike,req-smooth"},
		{"?min_gap=300ms", "req-spike"},
		{"?model=m&outcome=completed&limit=1", "req-spike"},
		{"?model=other", ""},
		{"?outcome=upstream_error", ""},
	} {
		list.Streams = nil
		if code := getJSON(t, admin+c.query, &list); code != http.StatusOK {
			t.Fatalf("%s: status %d", c.query, code)
		}
		var ids []string
		for _, s := range list.Streams {
			ids = append(ids, s.RequestID)
		}
		if strings.Join(ids, ",") != c.want {
			t.Errorf("/debug/streams%s: %v, want %s", c.query, ids, c.want)
		}
	}
	for _, c := range []struct {
		path string
		code int
	}{{"?min_gap=soon", 400}, {"?limit=-1", 400}, {"/no-such-request", 404}} {
		if code := getJSON(t, admin+c.path, &list); code != c.code {
			t.Errorf("%s: status %d, want %d", c.path, code, c.code)
		}
	}
	// The proxy port forwards the path to the upstream, which knows
	// nothing of it: the record is on the admin port only.
	resp, err := http.Get("http://" + in.proxy + "/debug/streams/req-spike")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "longest_gap") {
		t.Errorf("the proxy port serves the recorder: %s", body)
	}
}

// TestRecorderOff: with both bounds at 0 there is no recorder, and its
// routes and the page are not served.
func TestRecorderOff(t *testing.T) {
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(5*ms, 5*ms)})
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_RECORDER_STREAMS": "0", "ITLPROXY_RECORDER_SLOWEST": "0"})
	for _, path := range []string{"/", "/debug/streams"} {
		resp, err := http.Get("http://" + in.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", path, resp.StatusCode)
		}
	}
}
