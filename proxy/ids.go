package proxy

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"strings"

	"github.com/itlproxy/itlproxy/metrics"
)

// RequestIDHeader carries the request id: the client's if it sent one,
// else the upstream's if its response has one (hosted APIs return theirs,
// and it is the id their support knows), else one the proxy makes. The
// response always carries the id that the proxy's logs and exemplars use,
// replacing a different one from the upstream when the client sent its own.
const RequestIDHeader = "X-Request-Id"

// validID reports whether a header value can serve as an id: printable
// ASCII without spaces, at most metrics.MaxIDBytes long.
func validID(v string) bool {
	if v == "" || len(v) > metrics.MaxIDBytes {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// newRequestID returns 32 random hex digits.
func newRequestID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

// requestIDs reads the ids of a request: its X-Request-Id (or a new one),
// its session id (the session header's value, else, when allowed, the
// body's "user"), and the trace id of its W3C traceparent. Each is kept as
// metrics.KeepID makes it: the stream, the session tracker, the recorder
// and the span keep them, never the header or body they came from.
func (p *Proxy) requestIDs(r *http.Request, user string) (ids metrics.IDs, clientID bool) {
	ids.Request = r.Header.Get(RequestIDHeader)
	clientID = validID(ids.Request)
	if clientID {
		ids.Request = metrics.KeepID(ids.Request)
	} else {
		ids.Request = newRequestID()
	}
	session := r.Header.Get(p.cfg.SessionHeader)
	if session == "" && p.cfg.SessionFromUser {
		session = user
	}
	if session != "" {
		ids.Session = metrics.KeepID(session)
	}
	if trace := traceID(r.Header.Get("Traceparent")); trace != "" {
		ids.Trace = metrics.KeepID(trace)
	}
	return ids, clientID
}

// traceID returns the trace id of a W3C traceparent header
// (https://www.w3.org/TR/trace-context/#traceparent-header:
// version-traceid-parentid-flags), or "" when it is not a valid one.
func traceID(traceparent string) string {
	if len(traceparent) < 55 || traceparent[2] != '-' || traceparent[35] != '-' || traceparent[52] != '-' {
		return ""
	}
	version, id := traceparent[:2], traceparent[3:35]
	if version == "ff" || !isLowerHex(version) || !isLowerHex(id) || id == strings.Repeat("0", 32) {
		return ""
	}
	return id
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
