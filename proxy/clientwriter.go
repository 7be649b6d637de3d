package proxy

import (
	"net/http"
	"time"
)

// clientWriter is the client's response writer as the reverse proxy
// writes through it: for an event stream, it notes when the write of each
// read's bytes to the client begins (eventMeter.forwarding), which the
// stream's own delay ends at and its client write starts at. It keeps
// Flush and Unwrap, so that the reverse proxy's flushes, full duplex and
// upgrades reach the server's writer.
type clientWriter struct {
	http.ResponseWriter
	ex *exchange
}

func (w *clientWriter) Write(p []byte) (int, error) {
	if m := w.ex.events; m != nil {
		m.forwarding()
	}
	return w.ResponseWriter.Write(p)
}

// FlushError flushes the server's writer, as http.ResponseController does.
func (w *clientWriter) FlushError() error {
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush is FlushError for the callers that know only http.Flusher.
func (w *clientWriter) Flush() { _ = w.FlushError() }

// Unwrap returns the server's writer, for http.ResponseController.
func (w *clientWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// forwarding notes that the write of the held read's bytes to the client
// begins now; a second write of the same read (a transformation that
// splits it) keeps the first's time.
func (m *eventMeter) forwarding() {
	if m.held != nil && m.heldAt.Forwarded.IsZero() {
		m.heldAt.Forwarded = time.Now()
	}
}
