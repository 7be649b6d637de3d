package llmsim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Engine is a simulated model server that batches as vLLM and SGLang do,
// without chunked prefill: one step loop serves every request. A decode
// step gives each running stream one token; a step that prefills the
// prompts that arrived since the last step takes time in proportion to
// their tokens, gives each of them its first token at its end, and gives
// the running streams none: they wait for it. It can also pause on its
// own (Pause: a preemption, a swap of the KV cache, a garbage
// collection), every stream waiting. Streams are written by their own
// handlers from what the loop hands them, so that a client that does not
// read holds its own stream only.
//
// It serves streams of POST /v1/chat/completions and /v1/completions, for
// any model; a prompt counts a token per 4 bytes of the request body, as
// Server's usage does.
type Engine struct {
	cfg    EngineConfig
	arrive chan *batchSeq
	pause  chan time.Duration
	quit   chan struct{}
	done   chan struct{}

	mu  sync.Mutex
	ids uint64
}

// EngineConfig shapes an Engine.
type EngineConfig struct {
	// Step is a decode step: every running stream's gap between tokens.
	Step time.Duration
	// PrefillPerToken is what each prompt token adds to a prefill step.
	PrefillPerToken time.Duration
	// TokenBytes, when positive, pads each token's text to about that many
	// bytes: a test whose client stops reading fills the kernel's buffers
	// within a few tokens.
	TokenBytes int
	// Trace, when not nil, hears what the loop did, step by step, on the
	// loop's goroutine: what a test compares the proxy's view with.
	Trace func(EngineStep)
}

// EngineStep is one thing an Engine did.
type EngineStep struct {
	Kind StepKind
	// Start and End bound it: an arrival's are when its request came and
	// when the loop took it, at the end of the step then in progress.
	Start, End time.Time
	// Requests are the request ids (X-Request-Id, else the engine's own)
	// it concerns: the one that arrived, those prefilled (each given its
	// first token at End), or those a decode step gave a token at End.
	Requests []string
}

// StepKind is what an EngineStep did.
type StepKind uint8

// What an Engine does.
const (
	Arrived StepKind = iota + 1
	Prefilled
	Decoded
	Paused
)

func (k StepKind) String() string {
	switch k {
	case Arrived:
		return "arrived"
	case Prefilled:
		return "prefill"
	case Decoded:
		return "decode"
	case Paused:
		return "pause"
	}
	return "?"
}

// batchSeq is one request in the engine: its completion, its prompt's
// tokens, and the tokens the loop hands its handler (buffered for all of
// them, so that the loop never waits for a handler).
type batchSeq struct {
	c      *completion
	id     string
	at     time.Time // when its request came
	prompt int
	next   int // the index of its next token
	out    chan int
	gone   chan struct{} // closed when its client has gone
}

// NewEngine starts an engine's step loop; Close stops it.
func NewEngine(cfg EngineConfig) *Engine {
	e := &Engine{cfg: cfg, arrive: make(chan *batchSeq, 64), pause: make(chan time.Duration, 4),
		quit: make(chan struct{}), done: make(chan struct{})}
	go e.run()
	return e
}

// Close stops the step loop; streams in flight end where they are.
func (e *Engine) Close() {
	close(e.quit)
	<-e.done
}

// Pause makes the engine stop for d at the end of the step in progress,
// serving no stream meanwhile.
func (e *Engine) Pause(d time.Duration) { e.pause <- d }

// run is the step loop.
func (e *Engine) run() {
	defer close(e.done)
	var running, waiting []*batchSeq
	for {
		if len(running)+len(waiting) == 0 {
			select {
			case s := <-e.arrive:
				waiting = append(waiting, e.arrived(s))
			case d := <-e.pause:
				e.paused(d)
			case <-e.quit:
				return
			}
			continue
		}
		select {
		case <-e.quit:
			return
		case d := <-e.pause:
			e.paused(d)
			continue
		default:
		}
		waiting = e.arrivals(waiting)
		running, waiting = live(running), live(waiting)
		switch {
		case len(waiting) > 0:
			e.prefill(waiting)
			running, waiting = append(running, unfinished(waiting)...), waiting[:0]
		case len(running) > 0:
			running = e.decode(running)
		}
	}
}

// arrivals adds the requests that arrived to waiting, without waiting.
func (e *Engine) arrivals(waiting []*batchSeq) []*batchSeq {
	for {
		select {
		case s := <-e.arrive:
			waiting = append(waiting, e.arrived(s))
		default:
			return waiting
		}
	}
}

// arrived takes a request into the loop.
func (e *Engine) arrived(s *batchSeq) *batchSeq {
	if e.cfg.Trace != nil {
		e.cfg.Trace(EngineStep{Kind: Arrived, Start: s.at, End: time.Now(), Requests: []string{s.id}})
	}
	return s
}

// live drops the requests whose clients have gone.
func live(seqs []*batchSeq) []*batchSeq {
	out := seqs[:0]
	for _, s := range seqs {
		select {
		case <-s.gone:
			close(s.out)
		default:
			out = append(out, s)
		}
	}
	return out
}

func (e *Engine) paused(d time.Duration) {
	start := time.Now()
	time.Sleep(d)
	e.trace(Paused, start, nil)
}

// prefill is one prefill step: every waiting prompt, whole, then each
// one's first token.
func (e *Engine) prefill(seqs []*batchSeq) {
	start := time.Now()
	tokens := 0
	for _, s := range seqs {
		tokens += s.prompt
	}
	time.Sleep(time.Duration(tokens) * e.cfg.PrefillPerToken)
	e.emit(seqs)
	e.trace(Prefilled, start, seqs)
}

// decode is one decode step: a token for each running stream; it returns
// those that have more to come.
func (e *Engine) decode(seqs []*batchSeq) []*batchSeq {
	start := time.Now()
	time.Sleep(e.cfg.Step)
	e.emit(seqs)
	e.trace(Decoded, start, seqs)
	return unfinished(seqs)
}

// unfinished returns the sequences that have tokens to come, and ends
// the others'.
func unfinished(seqs []*batchSeq) []*batchSeq {
	out := seqs[:0]
	for _, s := range seqs {
		if s.next < s.c.tokens {
			out = append(out, s)
		} else {
			close(s.out)
		}
	}
	return out
}

// emit hands each sequence its next token.
func (e *Engine) emit(seqs []*batchSeq) {
	for _, s := range seqs {
		s.out <- s.next
		s.next++
	}
}

func (e *Engine) trace(k StepKind, start time.Time, seqs []*batchSeq) {
	if e.cfg.Trace == nil {
		return
	}
	step := EngineStep{Kind: k, Start: start, End: time.Now()}
	for _, s := range seqs {
		step.Requests = append(step.Requests, s.id)
	}
	e.cfg.Trace(step)
}

// ServeHTTP serves chat completions and completions.
func (e *Engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	chat := r.URL.Path == "/v1/chat/completions"
	if r.Method != http.MethodPost || !chat && r.URL.Path != "/v1/completions" {
		writeError(w, http.StatusNotFound, "not found")
		return
	}
	var req request
	counter := &countingReader{r: http.MaxBytesReader(w, r.Body, 16<<20)}
	if err := json.NewDecoder(counter).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body")
		return
	}
	e.mu.Lock()
	e.ids++
	n := e.ids
	e.mu.Unlock()
	if !req.Stream {
		writeError(w, http.StatusBadRequest, "the simulated engine serves streams only")
		return
	}
	c := &completion{model: Model{Name: req.Model}, chat: chat, id: "batch-" + strconv.FormatUint(n, 10),
		created: time.Now().Unix(), tokens: DefaultMaxTokens, prompt: max(1, counter.n/4), finish: `"length"`}
	if req.MaxCompletionTokens != nil {
		req.MaxTokens = req.MaxCompletionTokens
	}
	if req.MaxTokens != nil {
		c.tokens = max(1, *req.MaxTokens)
	}
	s := &batchSeq{c: c, id: r.Header.Get("X-Request-Id"), at: time.Now(), prompt: c.prompt, out: make(chan int, c.tokens), gone: make(chan struct{})}
	if s.id == "" {
		s.id = c.id
	}
	defer close(s.gone)
	// The headers go at once, as vLLM's do; the tokens as they come.
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
	select {
	case e.arrive <- s:
	case <-e.quit:
		return
	}
	e.stream(w, r, s, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
}

// stream writes a sequence's tokens as the loop hands them.
func (e *Engine) stream(w http.ResponseWriter, r *http.Request, s *batchSeq, includeUsage bool) {
	c := s.c
	rc := http.NewResponseController(w)
	var buf []byte
	for {
		var i int
		var ok bool
		select {
		case i, ok = <-s.out:
		case <-r.Context().Done():
			return
		}
		if !ok {
			break
		}
		buf = buf[:0]
		if i == 0 && c.chat {
			buf = c.appendChunk(buf, "", `"role":"assistant","content":""`, "null")
		}
		finish := "null"
		if i == c.tokens-1 {
			finish = c.finish
		}
		buf = c.appendChunk(buf, padded(words[i%len(words)], e.cfg.TokenBytes), "", finish)
		if _, err := w.Write(buf); err != nil || rc.Flush() != nil {
			return
		}
	}
	buf = buf[:0]
	if includeUsage {
		buf = append(buf, "data: "...)
		buf = c.appendHead(buf, c.object(true))
		buf = append(buf, `"choices":[],`...)
		buf = c.appendUsage(buf)
		buf = append(buf, "}\n\n"...)
	}
	buf = append(buf, "data: [DONE]\n\n"...)
	_, _ = w.Write(buf)
}

// padded is word made about n bytes long, when n is larger.
func padded(word string, n int) string {
	if len(word) >= n {
		return word
	}
	b := make([]byte, 0, n)
	b = append(b, word...)
	for len(b) < n {
		b = append(b, " ~"...)
	}
	return string(b[:n])
}
