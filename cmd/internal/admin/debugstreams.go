package admin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// listStreams answers GET /debug/streams: the recorded streams, the last
// to end first, filtered by model, outcome, min_gap (a duration: the
// longest gap at least that long) and limit.
func (s *Server) listStreams(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := recorder.Filter{Model: q.Get("model"), Outcome: q.Get("outcome"), Limit: 100}
	if v := q.Get("min_gap"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			http.Error(w, "min_gap: not a duration (e.g. 500ms, 2s)", http.StatusBadRequest)
			return
		}
		f.MinGap = d
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, "limit: not a whole number", http.StatusBadRequest)
			return
		}
		f.Limit = n
	}
	streams := s.o.Recorder.Streams(f)
	if streams == nil {
		streams = []*recorder.Entry{}
	}
	writeJSON(w, struct {
		Streams []*recorder.Entry `json:"streams"`
	}{streams})
}

// getStream answers GET /debug/streams/{id}: one stream, with its whole
// recorded timeline.
func (s *Server) getStream(w http.ResponseWriter, r *http.Request) {
	e := s.o.Recorder.Get(chi.URLParam(r, "id"))
	if e == nil {
		http.Error(w, "no recorded stream has this request id (the recorder keeps the last and the slowest streams only)", http.StatusNotFound)
		return
	}
	writeJSON(w, e)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
