package llmsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The servers' native APIs, in the shapes each writes: Ollama's /api/chat
// and /api/generate (newline-delimited JSON, streamed unless "stream":
// false), TGI's /generate_stream and /generate, llama.cpp server's
// /completion, and SGLang's /generate (told from TGI's by the body: TGI's
// has "inputs"). Ollama and llama.cpp report the engine's timing on their
// last line or event: the simulated decode's mean gap.

// nativeRequest holds the fields of every native API's request.
type nativeRequest struct {
	Model   string          `json:"model"`
	Stream  *bool           `json:"stream"`
	Inputs  json.RawMessage `json:"inputs"`
	Options struct {
		NumPredict *int `json:"num_predict"`
	} `json:"options"`
	Parameters struct {
		MaxNewTokens *int `json:"max_new_tokens"`
	} `json:"parameters"`
	SamplingParams struct {
		MaxNewTokens *int `json:"max_new_tokens"`
	} `json:"sampling_params"`
	NPredict *int `json:"n_predict"`
}

// nativeAPI writes one API's stream or body.
type nativeAPI struct {
	contentType string // of the stream
	// token appends the event or line carrying token i (word); text is
	// the completion so far, word included.
	token func(buf []byte, c *completion, i int, word, text string) []byte
	// end appends what follows the last token: the last event, or the
	// whole non-streamed body when text is the whole completion.
	end func(buf []byte, c *completion, text string, streamed bool) []byte
	// streamByDefault: the API streams unless asked not to (Ollama).
	streamByDefault bool
}

// nativeFor returns the API served at path, given the request.
func nativeFor(path string, req nativeRequest) (nativeAPI, bool) {
	switch {
	case path == "/api/chat":
		return ollamaAPI(true), true
	case path == "/api/generate":
		return ollamaAPI(false), true
	case path == "/generate_stream" || path == "/generate" && req.Inputs != nil:
		return tgiAPI, true
	case path == "/generate":
		return sglangAPI, true
	case path == "/completion" || path == "/completions":
		return llamaCppAPI, true
	}
	return nativeAPI{}, false
}

// serveNative serves a native API's request, and reports whether the
// path was one.
func (s *Server) serveNative(w http.ResponseWriter, r *http.Request) bool {
	var req nativeRequest
	switch r.URL.Path {
	case "/api/chat", "/api/generate", "/generate_stream", "/generate", "/completion", "/completions":
	default:
		return false
	}
	body := http.MaxBytesReader(w, r.Body, 16<<20)
	counter := &countingReader{r: body}
	if err := json.NewDecoder(counter).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body")
		return true
	}
	api, ok := nativeFor(r.URL.Path, req)
	if !ok {
		return false
	}
	if req.Model == "" && len(s.names) > 0 {
		req.Model = s.names[0] // TGI, llama.cpp and SGLang serve one model
	}
	m, ok := s.models[req.Model]
	if !ok && s.fallback != nil {
		m, ok = *s.fallback, true
		m.Name = req.Model
	}
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":"model '%s' not found"}`, req.Model)
		return true
	}
	c := &completion{model: m, tokens: DefaultMaxTokens, prompt: max(1, counter.n/4)}
	for _, n := range []*int{req.Options.NumPredict, req.Parameters.MaxNewTokens, req.SamplingParams.MaxNewTokens, req.NPredict} {
		if n != nil {
			c.tokens = *n
		}
	}
	c.tokens = max(1, c.tokens)
	if m.Length > 0 && m.Length <= c.tokens {
		c.tokens = m.Length
	}
	stream := api.streamByDefault
	if req.Stream != nil {
		stream = *req.Stream
	}
	if r.URL.Path == "/generate_stream" {
		stream = true
	}
	if stream {
		c.nativeStream(w, r, api)
	} else {
		c.nativeWhole(w, r, api)
	}
	return true
}

// nativeStream streams the completion in api's format.
func (c *completion) nativeStream(w http.ResponseWriter, r *http.Request, api nativeAPI) {
	w.Header().Set("Content-Type", api.contentType)
	rc := http.NewResponseController(w)
	var buf, text []byte
	send := func() bool {
		_, err := w.Write(buf)
		return err == nil && rc.Flush() == nil
	}
	if !c.decode(r, func(i int, word string) bool {
		text = append(text, word...)
		buf = api.token(buf[:0], c, i, word, string(text))
		return send()
	}) {
		return
	}
	buf = api.end(buf[:0], c, string(text), true)
	send()
}

// nativeWhole answers a non-streamed request once the whole completion
// would have been generated.
func (c *completion) nativeWhole(w http.ResponseWriter, r *http.Request, api nativeAPI) {
	text, ok := c.waitWhole(r)
	if !ok {
		return
	}
	buf := api.end(nil, c, string(text), false)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(buf)))
	_, _ = w.Write(buf)
}

// ollamaAPI is /api/chat (chat) or /api/generate.
func ollamaAPI(chat bool) nativeAPI {
	content := func(buf []byte, s string) []byte {
		if chat {
			buf = append(buf, `"message":{"role":"assistant","content":`...)
			return append(strconv.AppendQuote(buf, s), "},"...)
		}
		buf = append(buf, `"response":`...)
		return append(strconv.AppendQuote(buf, s), ',')
	}
	head := func(buf []byte, c *completion) []byte {
		buf = append(buf, `{"model":`...)
		buf = strconv.AppendQuote(buf, c.model.Name)
		buf = append(buf, `,"created_at":`...)
		return append(strconv.AppendQuote(buf, time.Now().UTC().Format(time.RFC3339Nano)), ',')
	}
	return nativeAPI{
		contentType:     "application/x-ndjson",
		streamByDefault: true,
		token: func(buf []byte, c *completion, _ int, word, _ string) []byte {
			buf = content(head(buf, c), word)
			return append(buf, `"done":false}`+"\n"...)
		},
		end: func(buf []byte, c *completion, text string, streamed bool) []byte {
			if streamed {
				text = ""
			}
			buf = content(head(buf, c), text)
			eval := int64(c.model.ITL) * int64(c.tokens)
			return fmt.Appendf(buf, `"done":true,"done_reason":"length","total_duration":%d,"load_duration":0,`+
				`"prompt_eval_count":%d,"prompt_eval_duration":%d,"eval_count":%d,"eval_duration":%d}`+"\n",
				int64(c.model.TTFT)+eval, c.prompt, int64(c.model.TTFT), c.tokens, eval)
		},
	}
}

var tgiAPI = nativeAPI{
	contentType: "text/event-stream",
	token: func(buf []byte, _ *completion, i int, word, _ string) []byte {
		buf = fmt.Appendf(buf, `data:{"index":%d,"token":{"id":%d,"text":`, i+1, 100+i%len(words))
		buf = strconv.AppendQuote(buf, word)
		return append(buf, `,"logprob":-0.5,"special":false},"generated_text":null,"details":null}`+"\n\n"...)
	},
	end: func(buf []byte, c *completion, text string, streamed bool) []byte {
		if streamed {
			// The end-of-sequence token is special: not output text, and
			// not counted in generated_tokens here.
			buf = fmt.Appendf(buf, `data:{"index":%d,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":`, c.tokens+1)
			buf = strconv.AppendQuote(buf, text)
			return fmt.Appendf(buf, `,"details":{"finish_reason":"length","generated_tokens":%d,"seed":null,"input_length":%d}}`+"\n\n", c.tokens, c.prompt)
		}
		buf = append(buf, `{"generated_text":`...)
		buf = strconv.AppendQuote(buf, text)
		return fmt.Appendf(buf, `,"details":{"finish_reason":"length","generated_tokens":%d,"seed":null,"prefill":[],"tokens":[]}}`, c.tokens)
	},
}

var llamaCppAPI = nativeAPI{
	contentType: "text/event-stream",
	token: func(buf []byte, c *completion, i int, word, _ string) []byte {
		buf = append(buf, `data: {"index":0,"content":`...)
		buf = strconv.AppendQuote(buf, word)
		return fmt.Appendf(buf, `,"tokens":[],"stop":false,"id_slot":0,"tokens_predicted":%d,"tokens_evaluated":%d}`+"\n\n", i+1, c.prompt)
	},
	end: func(buf []byte, c *completion, text string, streamed bool) []byte {
		if streamed {
			buf = append(buf, "data: "...)
			text = ""
		}
		buf = append(buf, `{"index":0,"content":`...)
		buf = strconv.AppendQuote(buf, text)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		buf = fmt.Appendf(buf, `,"tokens":[],"id_slot":0,"stop":true,"model":%q,"tokens_predicted":%d,"tokens_evaluated":%d,"stop_type":"limit",`+
			`"timings":{"prompt_n":%d,"prompt_ms":%g,"predicted_n":%d,"predicted_ms":%g,"predicted_per_token_ms":%g}}`,
			c.model.Name, c.tokens, c.prompt, c.prompt, ms(c.model.TTFT), c.tokens, ms(c.model.ITL)*float64(c.tokens), ms(c.model.ITL))
		if streamed {
			buf = append(buf, "\n\n"...)
		}
		return buf
	},
}

var sglangAPI = nativeAPI{
	contentType: "text/event-stream",
	token: func(buf []byte, c *completion, i int, _, text string) []byte {
		buf = append(buf, `data: {"text":`...)
		buf = strconv.AppendQuote(buf, text)
		return fmt.Appendf(buf, `,"meta_info":{"id":"sim","finish_reason":null,"prompt_tokens":%d,"completion_tokens":%d,"cached_tokens":0},"index":0}`+"\n\n", c.prompt, i+1)
	},
	end: func(buf []byte, c *completion, text string, streamed bool) []byte {
		if streamed {
			return append(buf, "data: [DONE]\n\n"...)
		}
		buf = append(buf, `{"text":`...)
		buf = strconv.AppendQuote(buf, text)
		return fmt.Appendf(buf, `,"meta_info":{"id":"sim","finish_reason":{"type":"length","length":%d},"prompt_tokens":%d,"completion_tokens":%d,"cached_tokens":0}}`, c.tokens, c.prompt, c.tokens)
	},
}
