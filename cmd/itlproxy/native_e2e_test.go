package main

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// nativeFormat returns the stream format of a server's native API at
// path, as scheduledUpstream sends it. Ollama's end line and llama.cpp's
// last event report the engine's timing: 15 ms per token.
func nativeFormat(path, model string) (streamFormat, bool) {
	switch path {
	case "/api/chat", "/api/generate":
		token := `{"model":"` + model + `","created_at":"2026-11-22T13:20:34Z","message":{"role":"assistant","content":"w%d "},"done":false}`
		if path == "/api/generate" {
			token = `{"model":"` + model + `","created_at":"2026-11-22T13:20:34Z","response":"w%d ","done":false}`
		}
		return streamFormat{
			ndjson: true,
			token:  func(i int) string { return fmt.Sprintf(token, i) },
			end: func(n int) []string {
				return []string{fmt.Sprintf(`{"model":%q,"created_at":"2026-11-22T13:20:35Z","message":{"role":"assistant","content":""},`+
					`"done":true,"done_reason":"length","total_duration":1,"load_duration":2000000,"prompt_eval_count":5,`+
					`"prompt_eval_duration":30000000,"eval_count":%d,"eval_duration":%d}`, model, n, n*int(15*time.Millisecond))}
			},
		}, true
	case "/completion":
		return streamFormat{
			token: func(i int) string {
				return fmt.Sprintf(`data: {"index":0,"content":"w%d ","tokens":[],"stop":false,"id_slot":-1,"tokens_predicted":%d,"tokens_evaluated":5}`, i, i+1)
			},
			end: func(n int) []string {
				return []string{fmt.Sprintf(`data: {"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"tokens_predicted":%d,"tokens_evaluated":5,`+
					`"stop_type":"limit","timings":{"prompt_n":5,"prompt_ms":30.5,"predicted_n":%d,"predicted_ms":%d,"predicted_per_token_ms":15.0}}`, n, n, 15*n)}
			},
		}, true
	case "/generate_stream":
		return streamFormat{
			token: func(i int) string {
				return fmt.Sprintf(`data:{"index":%d,"token":{"id":%d,"text":"w%d ","logprob":-1.5,"special":false},"generated_text":null,"details":null}`, i+1, 400+i, i)
			},
			end: func(n int) []string {
				return []string{fmt.Sprintf(`data:{"index":%d,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":"...",`+
					`"details":{"finish_reason":"eos_token","generated_tokens":%d,"seed":null,"input_length":5}}`, n+1, n)}
			},
		}, true
	case "/generate":
		var text strings.Builder
		return streamFormat{
			token: func(i int) string {
				fmt.Fprintf(&text, "w%d ", i)
				return fmt.Sprintf(`data: {"text":%q,"meta_info":{"id":"x","finish_reason":null,"prompt_tokens":5,"completion_tokens":%d,"cached_tokens":0},"index":0}`, text.String(), i+1)
			},
			end: func(int) []string { return []string{"data: [DONE]"} },
		}, true
	}
	return streamFormat{}, false
}

// lineWriter starts a newline-delimited JSON stream on w and returns a
// function that sends one line and flushes it.
func lineWriter(w http.ResponseWriter) func(line string) bool {
	return flushingWriter(w, "application/x-ndjson", "\n")
}

// postTimed posts a JSON body to the proxy, with the headers given (name
// then value), and stamps cs.sent when the request has been written.
func postTimed(in *instance, path, body string, cs *clientStream, header ...string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+in.proxy+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { cs.sent = time.Now() },
	}))
	return http.DefaultClient.Do(req)
}

// readNative is a plain client of a native API: it posts body to path
// and stamps each token-bearing event as its last line is read (an NDJSON
// line; an SSE event's blank line).
func readNative(in *instance, path, body string, ndjson bool, cs *clientStream) {
	resp, err := postTimed(in, path, body, cs)
	if err != nil {
		cs.err = err
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var event string
	for sc.Scan() {
		line := sc.Text()
		if !ndjson && line != "" {
			event += line
			continue
		}
		if ndjson {
			event = line
		}
		if tokenEvent.MatchString(event) {
			cs.arrivals = append(cs.arrivals, time.Now())
			cs.content += event
		}
		if strings.Contains(event, `"done":true`) || strings.Contains(event, `"stop":true`) ||
			strings.Contains(event, `"generated_text":"`) || event == "data: [DONE]" {
			cs.totalTokens = int64(len(cs.arrivals))
		}
		event = ""
	}
	cs.err = sc.Err()
}

// TestNativeAPIsAgainstClientClock drives each native API through the
// proxy with a plain client on its own clock: counts exact, TTFT and ITL
// sums as clockAgreement says, tokens from each API's usage, and the
// engine's TPOT beside the wire's where the API reports it.
func TestNativeAPIsAgainstClientClock(t *testing.T) {
	const streams, tokens = 4, 30
	for _, api := range []struct {
		path, endpoint, body string
		ndjson, engine       bool
	}{
		{"/api/chat", "ollama_chat", `{"model":%q,"messages":[{"role":"user","content":"count"}]}`, true, true},
		{"/api/generate", "ollama_generate", `{"model":%q,"prompt":"count"}`, true, true},
		{"/completion", "llamacpp_completion", `{"model":%q,"prompt":"count","stream":true}`, false, true},
		{"/generate_stream", "tgi_generate", `{"model":%q,"inputs":"count","parameters":{"max_new_tokens":30}}`, false, false},
		{"/generate", "sglang_generate", `{"model":%q,"text":"count","stream":true}`, false, false},
	} {
		t.Run(api.endpoint, func(t *testing.T) {
			agreeOnClock(t, func(agree *clockAgreement) {
				in := scheduledProxy(t, tokens)
				results := modelStreams(streams)
				staggered(results, func(cs *clientStream) {
					readNative(in, api.path, fmt.Sprintf(api.body, cs.model), api.ndjson, cs)
				})
				fs := recordedStreams(t, in, streams+1)
				for _, cs := range results {
					if cs.err != nil || len(cs.arrivals) != tokens || cs.totalTokens != tokens {
						t.Errorf("%s: %d token events (%v), end seen: %v", cs.model, len(cs.arrivals), cs.err, cs.totalTokens == tokens)
						continue
					}
					agree.stream(t, fs, cs, api.endpoint, tokens)
					if v := fs.Value("itlproxy_input_tokens_total", "model", cs.model); v != 5 {
						t.Errorf("%s: input tokens %v, want 5", cs.model, v)
					}
					want := uint64(0)
					if api.engine {
						want = 1
					}
					n, sum := fs.Histogram("itlproxy_engine_time_per_output_token_seconds", "model", cs.model, "endpoint", api.endpoint)
					if ratio, _ := fs.Histogram("itlproxy_wire_overhead_ratio", "model", cs.model); n != want || ratio != want || want == 1 && sum != 0.015 {
						t.Errorf("%s: engine TPOT %d observations (sum %v), overhead %d; want %d of 15ms each", cs.model, n, sum, ratio, want)
					}
				}
			})
		})
	}
}
