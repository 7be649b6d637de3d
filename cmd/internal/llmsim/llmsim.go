package llmsim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Model is one simulated model's timing profile.
type Model struct {
	Name string
	// TTFT is the mean time from the request to the first token.
	TTFT time.Duration
	// ITL is the mean gap between tokens.
	ITL time.Duration
	// Jitter spreads TTFT and every gap uniformly by ±Jitter of the mean.
	Jitter float64
	// SpikeProb is the chance that a gap is a stall of Spike instead.
	SpikeProb float64
	Spike     time.Duration
	// Length, when positive, is where every completion ends on its own
	// (finish_reason "stop"), as a model that emits its end token there,
	// unless the request's max_tokens ends it sooner.
	Length int
	// Stamp puts the time each event of a streamed completion is written
	// into that event, as an SSE comment line before its data line:
	// ": sent=<Unix nanoseconds>". The clock is read just before the
	// write, so a client on the same machine that reads it on arrival
	// measures the event's transit. SSE clients ignore comments, so the
	// stream means the same; off, the stream is byte for byte as before.
	Stamp bool
	// Load, when set, lengthens every gap with the requests in flight,
	// by the law of load.go; models that share one share the count.
	Load *Load
}

// DefaultMaxTokens is the completion length when a request sets none.
const DefaultMaxTokens = 128

// Server serves the simulated models.
type Server struct {
	models   map[string]Model
	names    []string
	fallback *Model
	ids      atomic.Uint64
}

// New returns a server for models.
func New(models ...Model) *Server {
	s := &Server{models: make(map[string]Model, len(models))}
	for _, m := range models {
		s.models[m.Name] = m
		s.names = append(s.names, m.Name)
	}
	return s
}

// ServeAnyModel makes s serve requests for models it does not know with
// m's profile, under the name the request gave, instead of answering 404.
// It returns s.
func (s *Server) ServeAnyModel(m Model) *Server {
	s.fallback = &m
	return s
}

// Models returns the names of the served models, in the order given to New.
func (s *Server) Models() []string { return s.names }

type request struct {
	Model               string `json:"model"`
	Stream              bool   `json:"stream"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// ServeHTTP serves POST /v1/chat/completions, POST /v1/completions,
// GET /v1/models, and the native APIs (native.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		s.listModels(w)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		s.complete(w, r, true)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/completions":
		s.complete(w, r, false)
	case r.Method == http.MethodPost && s.serveNative(w, r):
	default:
		writeError(w, http.StatusNotFound, "not found")
	}
}

func (s *Server) listModels(w http.ResponseWriter) {
	type entry struct {
		ID     string `json:"id"`
		Object string `json:"object"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []entry `json:"data"`
	}{Object: "list"}
	for _, n := range s.names {
		list.Data = append(list.Data, entry{ID: n, Object: "model"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": code},
	})
}

// completion is the state of one generation.
type completion struct {
	model   Model
	chat    bool
	id      string
	created int64
	tokens  int
	prompt  int
	finish  string // the JSON of the last token's finish_reason
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	var req request
	body := http.MaxBytesReader(w, r.Body, 16<<20)
	counter := &countingReader{r: body}
	if err := json.NewDecoder(counter).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body")
		return
	}
	m, ok := s.models[req.Model]
	if !ok && s.fallback != nil {
		m, ok = *s.fallback, true
		m.Name = req.Model
	}
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	c := &completion{
		model:   m,
		chat:    chat,
		id:      "sim-" + strconv.FormatUint(s.ids.Add(1), 10),
		created: time.Now().Unix(),
		tokens:  DefaultMaxTokens,
		prompt:  max(1, counter.n/4),
	}
	switch {
	case req.MaxCompletionTokens != nil:
		c.tokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		c.tokens = *req.MaxTokens
	}
	c.tokens = max(1, c.tokens)
	finish := `"length"`
	if m.Length > 0 && m.Length <= c.tokens {
		c.tokens, finish = m.Length, `"stop"`
	}
	c.finish = finish
	if req.Stream {
		c.stream(w, r, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
	} else {
		c.whole(w, r)
	}
}

type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// jittered returns mean spread by ±j.
func jittered(mean time.Duration, j float64) time.Duration {
	if j <= 0 {
		return mean
	}
	return time.Duration(float64(mean) * (1 + j*(2*rand.Float64()-1)))
}

// gap returns the wait before the next token.
func (c *completion) gap() time.Duration {
	if c.model.SpikeProb > 0 && rand.Float64() < c.model.SpikeProb {
		return c.model.Spike
	}
	return jittered(c.model.Load.gap(c.model.ITL), c.model.Jitter)
}

var words = []string{
	" the", " model", " streams", " tokens", " to", " a", " reader", " who", " waits", " for",
	" each", " one", " and", " notices", " every", " pause", " between", " them", ".", " Latency",
}

func (c *completion) stream(w http.ResponseWriter, r *http.Request, includeUsage bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	var buf, stamped []byte
	send := func() bool {
		out := buf
		if c.model.Stamp {
			stamped = appendStamp(stamped[:0], time.Now())
			stamped = append(stamped, buf...)
			out = stamped
		}
		_, err := w.Write(out)
		return err == nil && rc.Flush() == nil
	}
	if c.chat {
		buf = c.appendChunk(buf[:0], "", `"role":"assistant","content":""`, "null")
		if !send() {
			return
		}
	}
	if !c.decode(r, func(i int, word string) bool {
		finish := "null"
		if i == c.tokens-1 {
			finish = c.finish
		}
		buf = c.appendChunk(buf[:0], word, "", finish)
		return send()
	}) {
		return
	}
	if includeUsage {
		buf = append(buf[:0], "data: "...)
		buf = c.appendHead(buf, c.object(true))
		buf = append(buf, `"choices":[],`...)
		buf = c.appendUsage(buf)
		buf = append(buf, "}\n\n"...)
		if !send() {
			return
		}
	}
	buf = append(buf[:0], "data: [DONE]\n\n"...)
	send()
}

// StampPrefix opens the comment line that Model.Stamp adds to each event;
// the send time in Unix nanoseconds follows, then the line's end.
const StampPrefix = ": sent="

// appendStamp appends the comment line that stamps an event sent at t.
func appendStamp(buf []byte, t time.Time) []byte {
	buf = append(buf, StampPrefix...)
	buf = strconv.AppendInt(buf, t.UnixNano(), 10)
	return append(buf, '\n')
}

// decode runs the simulated decode: it calls emit with each token when
// its time comes, and reports whether every token was emitted (false: the
// client went away, or emit failed).
func (c *completion) decode(r *http.Request, emit func(i int, word string) bool) bool {
	defer c.model.Load.enter()()
	timer := time.NewTimer(jittered(c.model.TTFT, c.model.Jitter))
	defer timer.Stop()
	for i := 0; i < c.tokens; i++ {
		if i > 0 {
			timer.Reset(c.gap())
		}
		select {
		case <-r.Context().Done():
			return false
		case <-timer.C:
		}
		if !emit(i, words[i%len(words)]) {
			return false
		}
	}
	return true
}

// waitWhole waits as long as the whole completion would take, and
// returns it, or reports false when the client went away first.
func (c *completion) waitWhole(r *http.Request) ([]byte, bool) {
	defer c.model.Load.enter()()
	wait := jittered(c.model.TTFT, c.model.Jitter)
	for i := 1; i < c.tokens; i++ {
		wait += c.gap()
	}
	select {
	case <-r.Context().Done():
		return nil, false
	case <-time.After(wait):
	}
	text := make([]byte, 0, 8*c.tokens)
	for i := 0; i < c.tokens; i++ {
		text = append(text, words[i%len(words)]...)
	}
	return text, true
}

func (c *completion) object(chunk bool) string {
	switch {
	case !c.chat:
		return "text_completion"
	case chunk:
		return "chat.completion.chunk"
	}
	return "chat.completion"
}

// appendHead appends the opening of a response object, up to its choices.
func (c *completion) appendHead(buf []byte, object string) []byte {
	buf = append(buf, `{"id":"`...)
	buf = append(buf, c.id...)
	buf = append(buf, `","object":"`...)
	buf = append(buf, object...)
	buf = append(buf, `","created":`...)
	buf = strconv.AppendInt(buf, c.created, 10)
	buf = append(buf, `,"model":`...)
	buf = strconv.AppendQuote(buf, c.model.Name)
	return append(buf, ',')
}

// appendChunk appends one SSE event carrying word (chat: as delta content,
// or the raw delta fields given; completions: as text).
func (c *completion) appendChunk(buf []byte, word, delta, finish string) []byte {
	buf = append(buf, "data: "...)
	buf = c.appendHead(buf, c.object(true))
	buf = append(buf, `"choices":[{"index":0,`...)
	if c.chat {
		buf = append(buf, `"delta":{`...)
		if delta != "" {
			buf = append(buf, delta...)
		} else {
			buf = append(buf, `"content":`...)
			buf = strconv.AppendQuote(buf, word)
		}
		buf = append(buf, '}')
	} else {
		buf = append(buf, `"text":`...)
		buf = strconv.AppendQuote(buf, word)
	}
	buf = append(buf, `,"logprobs":null,"finish_reason":`...)
	buf = append(buf, finish...)
	return append(buf, "}]}\n\n"...)
}

func (c *completion) appendUsage(buf []byte) []byte {
	buf = append(buf, `"usage":{"prompt_tokens":`...)
	buf = strconv.AppendInt(buf, int64(c.prompt), 10)
	buf = append(buf, `,"completion_tokens":`...)
	buf = strconv.AppendInt(buf, int64(c.tokens), 10)
	buf = append(buf, `,"total_tokens":`...)
	buf = strconv.AppendInt(buf, int64(c.prompt+c.tokens), 10)
	return append(buf, '}')
}

// whole answers a non-streamed request once the whole completion would
// have been generated.
func (c *completion) whole(w http.ResponseWriter, r *http.Request) {
	text, ok := c.waitWhole(r)
	if !ok {
		return
	}
	buf := c.appendHead(nil, c.object(false))
	buf = append(buf, `"choices":[{"index":0,`...)
	if c.chat {
		buf = append(buf, `"message":{"role":"assistant","content":`...)
		buf = strconv.AppendQuote(buf, string(text))
		buf = append(buf, '}')
	} else {
		buf = append(buf, `"text":`...)
		buf = strconv.AppendQuote(buf, string(text))
	}
	buf = append(buf, `,"logprobs":null,"finish_reason":`...)
	buf = append(buf, c.finish...)
	buf = append(buf, `}],`...)
	buf = c.appendUsage(buf)
	buf = append(buf, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(buf)))
	_, _ = w.Write(buf)
}
