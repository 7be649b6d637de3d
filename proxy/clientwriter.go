package proxy

import "net/http"

// clientWriter is the client's response writer as the reverse proxy
// writes through it: for an event stream, it notes when each write to the
// client begins (eventMeter.writing), which the own delay of the read
// whose bytes it carries ends at (forwarding.go). It keeps
// Flush and Unwrap, so that the reverse proxy's flushes, full duplex and
// upgrades reach the server's writer.
type clientWriter struct {
	http.ResponseWriter
	ex *exchange
}

func (w *clientWriter) Write(p []byte) (int, error) {
	if m := w.ex.events; m != nil {
		m.writing()
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
