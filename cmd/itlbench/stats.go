package main

import (
	"maps"
	"sync"
	"sync/atomic"
)

// errKind is why a request failed.
type errKind int

const (
	// errConnect: no response: the connection could not be made, or broke
	// before the response headers.
	errConnect errKind = iota
	// errStatus: the response status was not 2xx.
	errStatus
	// errStreamCut: the body broke off: a read error, or the end of the
	// body inside an event.
	errStreamCut
	// errTimeout: -timeout ran out, before or during the response.
	errTimeout
	// errStreamError: the server reported an error in the stream (an error
	// event or chunk) or in a 2xx response body.
	errStreamError
	numErrKinds
)

var errKindNames = [numErrKinds]string{"connect", "http_status", "stream_cut", "timeout", "stream_error"}

// modelStats accumulates one model's requests. Many workers record into it
// at once, without locks except on the rare error paths.
type modelStats struct {
	name string

	ttft, itl, tpot, duration histogram
	// transit: from the upstream's write of a token-bearing event to its
	// arrival, for the events that carried their send time.
	transit histogram

	sent, ok, canceled atomic.Int64
	errs               [numErrKinds]atomic.Int64
	// outputTokens sums each request's usage.completion_tokens, else its
	// token-bearing events; withUsage counts the requests that reported
	// usage.
	outputTokens, tokenEvents, withUsage, invalidEvents atomic.Int64
	// noDone counts the streams that succeeded without [DONE]: their body
	// ended cleanly between events. A server may end so; a proxy that cuts
	// a stream that way hides the cut from the client.
	noDone atomic.Int64
	// judged counts the requests judged against the objectives (all that
	// ended but the canceled, when there are objectives), met those that
	// met every one: goodput.
	judged, met atomic.Int64

	mu          sync.Mutex
	statusCodes map[int]int64
	firstErr    map[string]string // a first message of each error kind
}

func newModelStats(name string) *modelStats {
	return &modelStats{name: name, statusCodes: map[int]int64{}, firstErr: map[string]string{}}
}

// fail counts a failed request; msg, when new for its kind, is kept to
// show.
func (s *modelStats) fail(kind errKind, code int, msg string) {
	s.errs[kind].Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind == errStatus {
		s.statusCodes[code]++
	}
	if _, ok := s.firstErr[errKindNames[kind]]; !ok && msg != "" {
		s.firstErr[errKindNames[kind]] = msg
	}
}

// result is what a modelStats (or several, merged) holds at one moment.
type result struct {
	model                     string
	sent, ok, canceled        int64
	errs                      [numErrKinds]int64
	statusCodes               map[int]int64
	firstErr                  map[string]string
	outputTokens, tokenEvents int64
	withUsage, invalidEvents  int64
	noDone                    int64
	judged, met               int64
	ttft, itl, tpot, duration dist
	transit                   dist
}

func (s *modelStats) result() result {
	r := result{
		model:         s.name,
		sent:          s.sent.Load(),
		ok:            s.ok.Load(),
		canceled:      s.canceled.Load(),
		outputTokens:  s.outputTokens.Load(),
		tokenEvents:   s.tokenEvents.Load(),
		withUsage:     s.withUsage.Load(),
		invalidEvents: s.invalidEvents.Load(),
		noDone:        s.noDone.Load(),
		judged:        s.judged.Load(),
		met:           s.met.Load(),
		ttft:          s.ttft.snapshot(),
		itl:           s.itl.snapshot(),
		transit:       s.transit.snapshot(),
		tpot:          s.tpot.snapshot(),
		duration:      s.duration.snapshot(),
	}
	for k := range r.errs {
		r.errs[k] = s.errs[k].Load()
	}
	s.mu.Lock()
	r.statusCodes = maps.Clone(s.statusCodes)
	r.firstErr = maps.Clone(s.firstErr)
	s.mu.Unlock()
	return r
}

// failed counts the requests that failed, of any kind.
func (r result) failed() int64 {
	var n int64
	for _, e := range r.errs {
		n += e
	}
	return n
}

// merge adds o to r.
func (r *result) merge(o result) {
	r.sent += o.sent
	r.ok += o.ok
	r.canceled += o.canceled
	for k := range r.errs {
		r.errs[k] += o.errs[k]
	}
	if r.statusCodes == nil {
		r.statusCodes, r.firstErr = map[int]int64{}, map[string]string{}
	}
	for c, n := range o.statusCodes {
		r.statusCodes[c] += n
	}
	for k, m := range o.firstErr {
		if _, ok := r.firstErr[k]; !ok {
			r.firstErr[k] = m
		}
	}
	r.outputTokens += o.outputTokens
	r.tokenEvents += o.tokenEvents
	r.withUsage += o.withUsage
	r.invalidEvents += o.invalidEvents
	r.noDone += o.noDone
	r.judged += o.judged
	r.met += o.met
	r.ttft.merge(o.ttft)
	r.itl.merge(o.itl)
	r.transit.merge(o.transit)
	r.tpot.merge(o.tpot)
	r.duration.merge(o.duration)
}

// total merges every model's result.
func total(rs []result) result {
	t := result{model: "all"}
	for _, r := range rs {
		t.merge(r)
	}
	return t
}
