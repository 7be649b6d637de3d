package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// scheduledUpstream streams, for each model, a role chunk, then tokens
// after the TTFT and gaps its schedule gives, then usage and [DONE].
type scheduledUpstream struct {
	schedule func(model string) (ttft time.Duration, gaps []time.Duration)
	// prompt is the input usage each model's streams report; nil: 5
	// tokens.
	prompt func(model string) prompt
}

// prompt is the input usage a stream reports: its input tokens and, in
// the Messages API, those read from and written to the prompt cache
// besides them. none: the stream reports no usage at all.
type prompt struct {
	tokens, cacheRead, cacheWrite int64
	none                          bool
}

// randomSchedule gives each model "mN" its own TTFT and jittered gaps,
// drawn from N, for the given number of tokens.
func randomSchedule(tokens int) func(string) (time.Duration, []time.Duration) {
	return func(model string) (time.Duration, []time.Duration) {
		var n uint64
		fmt.Sscanf(model, "m%d", &n)
		rng := rand.New(rand.NewPCG(n, 99))
		ttft := time.Duration(60+rng.IntN(120)) * time.Millisecond
		gaps := make([]time.Duration, tokens-1)
		for i := range gaps {
			gaps[i] = time.Duration(2+rng.IntN(40)) * time.Millisecond
		}
		return ttft, gaps
	}
}

func (u scheduledUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var model string
	if i := bytes.Index(body, []byte(`"model":"`)); i >= 0 {
		rest := body[i+len(`"model":"`):]
		model = string(rest[:bytes.IndexByte(rest, '"')])
	}
	ttft, gaps := u.schedule(model)
	tokens := len(gaps) + 1
	p := prompt{tokens: 5}
	if u.prompt != nil {
		p = u.prompt(model)
	}
	f := formatFor(r.URL.Path, model, p)
	send := rawEventWriter(w)
	if f.ndjson {
		send = lineWriter(w)
	}
	for _, ev := range f.start {
		if !send(ev) {
			return
		}
	}
	wait := ttft
	for i := range tokens {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(wait):
		}
		if !send(f.token(i)) {
			return
		}
		if i < len(gaps) {
			wait = gaps[i]
		}
	}
	for _, ev := range f.end(tokens) {
		send(ev)
	}
}

// streamFormat is how an API's stream says the same thing: events before
// the first token, each token ("w<i> "), the events after the last.
type streamFormat struct {
	start []string
	token func(i int) string
	end   func(tokens int) []string
	// ndjson: the stream is newline-delimited JSON, a line per event.
	ndjson bool
}

// formatFor returns the stream format of the API at path, each event as
// its lines (without the blank line that ends it), reporting the input
// usage p; the Responses and Messages APIs name their events.
func formatFor(path, model string, p prompt) streamFormat {
	if f, ok := nativeFormat(path, model); ok {
		return f
	}
	switch path {
	case "/v1/responses":
		return streamFormat{
			start: []string{named("response.created", `{"type":"response.created","response":{"id":"r","status":"in_progress","usage":null}}`)},
			token: func(i int) string {
				return named("response.output_text.delta", fmt.Sprintf(`{"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":"w%d "}`, i))
			},
			end: func(n int) []string {
				return []string{named("response.completed", fmt.Sprintf(`{"type":"response.completed","response":{"id":"r","status":"completed","usage":{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}}}`, p.tokens, n, p.tokens+int64(n)))}
			},
		}
	case "/v1/messages":
		return streamFormat{
			start: []string{
				named("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":%q,`+
					`"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":1}}}`, model, p.tokens, p.cacheWrite, p.cacheRead)),
				named("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
				named("ping", `{"type":"ping"}`),
			},
			token: func(i int) string {
				return named("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"w%d "}}`, i))
			},
			end: func(n int) []string {
				return []string{named("content_block_stop", `{"type":"content_block_stop","index":0}`),
					named("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":%d}}`, n)),
					named("message_stop", `{"type":"message_stop"}`)}
			},
		}
	}
	head := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"` + model + `",`
	return streamFormat{
		start: []string{head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`},
		token: func(i int) string {
			return head + fmt.Sprintf(`"choices":[{"index":0,"delta":{"content":"w%d "}}]}`, i)
		},
		end: func(n int) []string {
			finish := head + `"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`
			if p.none {
				return []string{finish, "data: [DONE]"}
			}
			return []string{finish,
				head + fmt.Sprintf(`"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, p.tokens, n, p.tokens+int64(n)),
				"data: [DONE]"}
		},
	}
}

// named returns the lines of an event with a name.
func named(name, data string) string { return "event: " + name + "\ndata: " + data }

// rawEventWriter starts an event stream on w and returns a function that
// sends one event, given its lines, and flushes it, reporting whether the
// client is still there.
func rawEventWriter(w http.ResponseWriter) func(lines string) bool {
	return flushingWriter(w, "text/event-stream", "\n\n")
}

// flushingWriter starts a stream of contentType on w and returns a
// function that sends one event followed by end, and flushes it,
// reporting whether the client is still there.
func flushingWriter(w http.ResponseWriter, contentType, end string) func(event string) bool {
	w.Header().Set("Content-Type", contentType)
	rc := http.NewResponseController(w)
	return func(event string) bool {
		_, err := io.WriteString(w, event+end)
		return err == nil && rc.Flush() == nil
	}
}

// eventWriter is rawEventWriter for events that are one data line.
func eventWriter(w http.ResponseWriter) func(data string) bool {
	send := rawEventWriter(w)
	return func(data string) bool { return send("data: " + data) }
}
