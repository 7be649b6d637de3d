package main

import (
	"context"
	"testing"

	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
)

// TestNativeAPIs drives each server's native API (as llmsim speaks it),
// streamed and not: itlbench reads each stream with itlproxy's reader of
// that API, and counts tokens from each API's usage.
func TestNativeAPIs(t *testing.T) {
	for _, tc := range []struct {
		api, endpoint, limit string
		model                []string
	}{
		{"ollama", "ollama_chat", "options", []string{"-model", "llama3"}},
		{"tgi", "tgi_generate", "parameters", nil},
		{"llamacpp", "llamacpp_completion", "n_predict", nil},
		{"sglang", "sglang_generate", "sampling_params", nil},
	} {
		for _, stream := range []bool{true, false} {
			name := tc.api
			if !stream {
				name += "/whole"
			}
			t.Run(name, func(t *testing.T) {
				up := newSimServer(t, llmsim.Model{TTFT: 0, ITL: 0})
				args := append([]string{"-api", tc.api, "-url", up.URL, "-requests", "3", "-max-tokens", "9", "-stream=" + map[bool]string{true: "true", false: "false"}[stream]}, tc.model...)
				rep, out, err := benchJSON(t, context.Background(), args...)
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				a := rep.Total
				if a.OutputTokens != 27 || a.TokensFrom != "usage" || rep.Endpoint != tc.endpoint {
					t.Errorf("output %d from %s, endpoint %s; want 27 from usage, %s\n%s", a.OutputTokens, a.TokensFrom, rep.Endpoint, tc.endpoint, out)
				}
				if stream && (a.TokenEvents != 27 || a.ITL.Count != 24) {
					t.Errorf("events %d, ITL count %d; want 27 and 24", a.TokenEvents, a.ITL.Count)
				}
				up.mu.Lock()
				defer up.mu.Unlock()
				if len(up.requests) != 3 || up.requests[0].body[tc.limit] == nil {
					t.Errorf("%d requests, the first %v; want 3 with %s", len(up.requests), up.requests[0].body, tc.limit)
				}
			})
		}
	}
}

// TestNativeAPIFlags: the native APIs' command-line rules.
func TestNativeAPIFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-api", "vllm"}, `-api "vllm": want openai, ollama, tgi, llamacpp or sglang`},
		{[]string{"-api", "ollama"}, "-api ollama: name the -model"},
		{[]string{"-api", "tgi", "-endpoint", "chat"}, "-endpoint is for -api openai"},
	} {
		_, _, err := parseLoadFlags(tc.args, nil)
		if err == nil || err.Error() != tc.want+"\nrun 'itlbench -h' for usage" {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	cfg, _, err := parseLoadFlags([]string{"-api", "tgi", "-stream=false"}, nil)
	if err != nil || cfg.target != "http://127.0.0.1:8080/generate" {
		t.Errorf("-api tgi -stream=false: target %q (%v), want the server's /generate", cfg.target, err)
	}
}
