package proxy

import (
	"errors"
	"net/http"
)

// Request smuggling.
//
// A request with both Content-Length and Transfer-Encoding can be read two
// ways; when the hops of a chain read it differently, an attacker can hide
// a request in another's body. Go's server reads such a request by its
// Transfer-Encoding alone and drops the Content-Length (RFC 9112 section
// 6.3), and the reverse proxy re-frames every request it forwards, so the
// upstream never receives an ambiguous message. What RFC 9112 section 6.1
// still asks of a server is that it close the connection after responding
// to such a request: the bytes the other reading would have taken for a
// body are then never read as a request. By the time the handler runs, Go
// has deleted the Content-Length, so the proxy closes the connection after
// every request that arrived with a Transfer-Encoding. It does the same
// after every HTTP/1.0 request, whose Transfer-Encoding Go drops unseen
// (section 6.1 asks that such framing be treated as faulty), and it
// answers OPTIONS * itself, with the same rule, so that no request Go
// would otherwise answer on its own escapes it: the server must set
// DisableGeneralOptionsHandler.
//
// HTTP/2 carries no Transfer-Encoding (Go's server refuses a request that
// has one) and frames each request itself: nothing to close there.

// errUpgradeWithBody refuses a request that asks to switch protocols while
// its body is chunked (after a switch, the bytes that follow the body are
// no longer read as requests, and nothing legitimate needs both) or while
// it is HTTP/1.0, which cannot switch (RFC 9110 section 7.8).
var errUpgradeWithBody = errors.New("a request that asks to switch protocols must be HTTP/1.1 without a chunked body")

// closesAfter reports whether the connection must close after the
// response to r. The response says so in its Connection header, set when
// the handler starts (ServeHTTP) and again on the upstream's final
// response or the proxy's error (closeAfterResponse), since
// httputil.ReverseProxy clears the header after relaying an informational
// (1xx) response.
func closesAfter(r *http.Request) bool {
	return r.ProtoMajor == 1 && (len(r.TransferEncoding) > 0 || r.ProtoMinor == 0)
}

// isUpgrade reports whether r asks to switch protocols.
func isUpgrade(r *http.Request) bool {
	return r.Header.Get("Upgrade") != ""
}

// answerOptions answers OPTIONS *, a request about the server rather than
// a resource, as Go's server does when it answers it itself.
func answerOptions(w http.ResponseWriter) {
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}
