package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// balancer sends each request to a server of the upstream's set
// (Config.Servers), chosen by the set, over the transport: the request's
// URL names the server's address, and its Host header stays the
// upstream's (or the server's own, for a list of URLs). A request whose
// connection a server refused was not sent: it goes to another
// server, maxTries in all at most, and the one that refused is set
// aside for a while.
type balancer struct {
	set *upstream.Set
	rt  http.RoundTripper
}

// maxTries bounds the servers a request is sent to when they refuse its
// connection: the first, and two others. A pool that refuses everything
// (a Service whose pods are all gone, a list of dead addresses) then costs
// each request three dials, not one per server, and the client its 502
// at once.
const maxTries = 3

func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchangeFrom(req.Context())
	var buf [maxTries]*upstream.Server
	tried := buf[:0]
	var lastErr error // the last refusal
	for {
		var sv *upstream.Server
		if len(tried) < maxTries {
			sv = b.set.Pick(tried)
		}
		switch {
		case sv == nil && len(tried) == 0:
			return nil, errNoServer
		case sv == nil:
			return nil, refusedBy(tried, lastErr)
		}
		tried = append(tried, sv)
		out := *req
		u := *req.URL
		u.Host = sv.Addr
		out.URL = &u
		switch {
		case sv.Host != "":
			out.Host = sv.Host
		case out.Host == "":
			// The request's Host is its URL's, the upstream's host: an
			// address of a name resolved still names the name.
			out.Host = req.URL.Host
		}
		ex.sendTo(sv)
		resp, err := b.rt.RoundTrip(&out)
		if err == nil || !refused(err) || req.Context().Err() != nil {
			// A dial that failed because the client went away says
			// nothing of the server.
			return resp, err
		}
		b.set.Refused(sv)
		lastErr = err
		// Nothing of the request was sent; its body may have been closed
		// all the same, and is sent again from the start when it can be.
		if req.Body != nil && req.Body != http.NoBody {
			var body io.ReadCloser
			if req.GetBody != nil {
				body, err = req.GetBody()
			}
			if body == nil || err != nil { // a body the proxy does not hold
				return nil, refusedBy(tried, lastErr)
			}
			req.Body = body
		}
	}
}

// refusedBy is the failure of a request that the servers tried all
// refused, err the last refusal.
func refusedBy(tried []*upstream.Server, err error) error {
	return fmt.Errorf("%w (%d; the last: %w)", errRefused, len(tried), err)
}

// CloseIdleConnections closes the transport's idle connections.
func (b *balancer) CloseIdleConnections() {
	if c, ok := b.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// The balancer's failures: no server to send to (a name that resolves
// to nothing now), and the servers tried all refused the connection.
var (
	errNoServer = errors.New("itlproxy: the upstream has no server now")
	errRefused  = errors.New("itlproxy: the upstream servers tried refused the connection")
)

// refused reports whether err is a connection that could not be made (the
// dial failed): nothing of the request reached the server.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// sendTo notes that the request goes to server sv (again, when a
// server before refused it): its stream is counted there, and it holds
// one of sv's requests in flight until the exchange ends.
func (ex *exchange) sendTo(sv *upstream.Server) {
	if ex.upstream != nil {
		ex.upstream.Release()
	}
	ex.upstream = sv
	sv.Acquire()
	ex.sink.setUpstream(sv.Label(), ex.servers.of(sv))
}
