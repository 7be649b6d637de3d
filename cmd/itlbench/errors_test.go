package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/cmdtest"
)

// faultyUpstream fails in the way the request's model names.
func faultyUpstream(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct{ Model string }
	_ = json.Unmarshal(body, &req)
	events := func(n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			http.NewResponseController(w).Flush()
			time.Sleep(2 * time.Millisecond)
		}
	}
	switch req.Model {
	case "ok":
		events(4)
		io.WriteString(w, "data: [DONE]\n\n")
	case "status":
		// An error body that echoes a credential, as a careless server might.
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"message":"failed for `+r.Header.Get("Authorization")+`"}}`)
	case "cut":
		events(3)
		panic(http.ErrAbortHandler) // the connection drops mid-stream
	case "no-done":
		events(3) // and the body ends cleanly, as a proxy's cut may look
	case "partial":
		events(2)
		io.WriteString(w, `data: {"choices":[{"delta":`) // ends inside an event
	case "error-event":
		events(2)
		io.WriteString(w, "data: {\"error\":{\"message\":\"overloaded\"}}\n\ndata: [DONE]\n\n")
	case "stall":
		events(2)
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	case "slow":
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// TestErrorAccounting: each failure is counted once, under its kind; the
// tokens that arrived before it are measured; credentials in error
// messages are hidden.
func TestErrorAccounting(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(faultyUpstream))
	defer up.Close()
	models := "ok,status,cut,partial,error-event,slow,stall"
	rep, out, err := benchJSON(t, context.Background(), "-url", up.URL+"/v1", "-model", models, "-requests", "14", "-c", "7",
		"-timeout", "300ms", "-H", "Authorization: Bearer sk-PLANTED")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	a := rep.Total
	e := a.Errors
	want := errorsJSON{Connect: 0, HTTPStatus: 2, StreamCut: 4, Timeout: 4, StreamError: 2, ByStatus: map[string]int64{"500": 2}}
	e.Messages, want.Messages = nil, nil
	if fmt.Sprint(e) != fmt.Sprint(want) || a.Requests != (requests{Sent: 14, OK: 2, Failed: 12}) {
		t.Errorf("errors %+v, requests %+v; want %+v, 2 ok of 14", e, a.Requests, want)
	}
	// Tokens before the failure count: ok 4, cut 3, partial 2, error-event
	// 2, stall 2; twice each.
	if a.TTFT.Count != 10 || a.TokenEvents != 26 || a.ITL.Count != 26-10 {
		t.Errorf("TTFT count %d, token events %d, ITL count %d", a.TTFT.Count, a.TokenEvents, a.ITL.Count)
	}
	if msg := a.Errors.Messages["http_status"]; !strings.Contains(msg, "500") || !strings.Contains(msg, "[redacted]") {
		t.Errorf("http_status message %q", msg)
	}
	if strings.Contains(out, "PLANTED") {
		t.Errorf("the credential was printed:\n%s", out)
	}
	var perModel []string
	for _, m := range rep.PerModel {
		perModel = append(perModel, fmt.Sprintf("%s:%d/%d", m.Model, m.Requests.OK, m.Requests.Sent))
	}
	if got := strings.Join(perModel, " "); got != "ok:2/2 status:0/2 cut:0/2 partial:0/2 error-event:0/2 slow:0/2 stall:0/2" {
		t.Errorf("per model %s", got)
	}
}

// TestEndedWithoutDone: a stream whose body ends cleanly between events,
// without [DONE], succeeds (as itlproxy counts it) and is counted apart,
// with a warning: it is how a proxy's cut can look to a client.
func TestEndedWithoutDone(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(faultyUpstream))
	defer up.Close()
	rep, out, err := benchJSON(t, context.Background(), "-url", up.URL+"/v1", "-model", "ok,no-done", "-requests", "4", "-c", "2")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if a := rep.Total; a.Requests != (requests{Sent: 4, OK: 4}) || a.EndedWithoutDone != 2 || rep.PerModel[1].EndedWithoutDone != 2 {
		t.Errorf("requests %+v, ended without [DONE] %d (no-done: %d); want 4 ok, 2", a.Requests, a.EndedWithoutDone, rep.PerModel[1].EndedWithoutDone)
	}
	var text bytes.Buffer
	if err := run(context.Background(), []string{"-url", up.URL + "/v1", "-model", "no-done", "-requests", "1"}, &text, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "1 streams counted ok ended without [DONE]") {
		t.Errorf("no warning in the report:\n%s", text.String())
	}
}

// TestConnectErrors: nothing listens; every request fails to connect,
// the report says so, and run fails.
func TestConnectErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var stdout bytes.Buffer
	err = run(context.Background(), []string{"-url", "http://" + addr + "/v1", "-model", "m", "-requests", "3", "-c", "1"}, &stdout, io.Discard)
	if !errors.Is(err, errNoSuccess) {
		t.Errorf("run returned %v, want %v", err, errNoSuccess)
	}
	words := strings.Join(strings.Fields(stdout.String()), " ")
	if !strings.Contains(words, "failed 3") || !strings.Contains(words, "connect 3,") || !strings.Contains(words, "connection refused") {
		t.Errorf("report:\n%s", stdout.String())
	}
}

// TestJSONSchema pins the names scripts read.
func TestJSONSchema(t *testing.T) {
	up := newSimServer(t, simModel(0))
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"-json", "-url", up.URL + "/v1", "-model", "a,b", "-requests", "2", "-max-tokens", "3"}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(v any) string {
		m, _ := v.(map[string]any)
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return strings.Join(ks, " ")
	}
	total := doc["total"].(map[string]any)
	for _, c := range []struct {
		what string
		v    any
		want string
	}{
		{"top level", doc, "concurrency duration_seconds elapsed_seconds endpoint headers include_usage max_requests max_tokens models peak_in_flight per_model percentile_method rate schema_version started stream target total turns"},
		{"total", total, "duration ended_without_done errors invalid_events itl model output_tokens output_tokens_per_second requests requests_per_second token_events tokens_from tpot transit ttft"},
		{"requests", total["requests"], "canceled failed ok sent"},
		{"ttft", total["ttft"], "count max mean min p50 p90 p99 p99_9 sum"},
		{"transit", total["transit"], "count max mean min p50 p90 p99 p99_9 sum"},
		{"errors", total["errors"], "by_status connect http_status messages stream_cut stream_error timeout"},
		{"per model", doc["per_model"].([]any)[1], keys(total)},
	} {
		if got := keys(c.v); got != c.want {
			t.Errorf("%s keys: %s\nwant %s", c.what, got, c.want)
		}
	}
	if doc["schema_version"] != 1.0 || total["model"] != "all" || len(doc["per_model"].([]any)) != 2 {
		t.Errorf("schema_version %v, total model %v", doc["schema_version"], total["model"])
	}
}

// TestBadFlags: each refusal names the flag and why, and is a usage error
// (exit status 2); all problems are reported at once.
func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-nope"}, []string{"flag provided but not defined: -nope"}},
		{[]string{"-c", "0"}, []string{"-c 0: want at least 1"}},
		{[]string{"-c", "x"}, []string{`invalid value "x" for flag -c`}},
		{[]string{"-url", "ftp://x", "-endpoint", "embeddings", "-rate", "-1"}, []string{`-url "ftp://x": want an http or https URL`, `-endpoint "embeddings": want chat or completions`, "-rate -1"}},
		{[]string{"-model", "a=0"}, []string{`-model: "a=0": the weight must be a whole number from 1 to 1000`}},
		{[]string{"-model", "a,a"}, []string{`-model: "a" named twice`}},
		{[]string{"-H", "NoColon"}, []string{`invalid value "NoColon" for flag -H: want "Name: value"`}},
		{[]string{"-body", "[1]"}, []string{"-body: want a JSON object"}},
		{[]string{"-duration", "0s"}, []string{"-duration 0s: want a positive duration"}},
		{[]string{"-progress", "sometimes"}, []string{`-progress "sometimes": want auto, always or never`}},
		{[]string{"-stream=false", "-compare-metrics", "http://x/metrics"}, []string{"-compare-metrics compares streams"}},
		{[]string{"-prompt", "a", "-prompt-file", "/nonexistent"}, []string{"-prompt and -prompt-file: give one", "-prompt-file: open /nonexistent"}},
		{[]string{"http://127.0.0.1/v1"}, []string{`unexpected argument "http://127.0.0.1/v1"`}},
		{[]string{"upstream", "-tokens", "0", "-jitter", "2"}, []string{"-tokens 0: want at least 1", "-jitter and -spike-prob: want 0 to 1"}},
		{[]string{"upstream", "-itl-per-stream", "-2ms"}, []string{"-ttft, -itl, -itl-per-stream and -spike: want durations of 0 or more"}},
		{[]string{"-watch-pid", "12,x"}, []string{`-watch-pid "12,x": want process ids, comma-separated`}},
		{[]string{"plainproxy", "-upstream", "ftp://x"}, []string{`-upstream "ftp://x": want an http or https URL with a host`}},
	} {
		err := run(context.Background(), c.args, io.Discard, io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: %v, not a usage error", c.args, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q lacks %q", c.args, err, w)
			}
		}
	}
}

// TestExitStatuses runs the real main in a child process.
func TestExitStatuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for _, c := range []struct {
		args   []string
		status int
		output string
	}{
		{[]string{"-c", "-3"}, 2, "itlbench: -c -3: want at least 1\nrun 'itlbench -h' for usage"},
		{[]string{"-h"}, 0, "-compare-metrics URL"},
		{[]string{"upstream", "--help"}, 0, "-itl duration"},
		{[]string{"-url", "http://" + dead + "/v1", "-model", "m", "-requests", "1"}, 1, "itlbench: no request succeeded"},
	} {
		out, status := cmdtest.RunMain(t, nil, c.args...)
		if status != c.status || !strings.Contains(out, c.output) {
			t.Errorf("%v: exit %d with %q; want %d with %q", c.args, status, out, c.status, c.output)
		}
	}
}
