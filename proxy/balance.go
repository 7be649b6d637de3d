package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// balancer sends each request to an endpoint of the upstream's set
// (Config.Endpoints), chosen by the set, over the transport: the request's
// URL names the endpoint's address, and its Host header stays the
// upstream's (or the endpoint's own, for a list of URLs). A request whose
// connection an endpoint refused was not sent: it goes to another
// endpoint, maxTries in all at most, and the one that refused is set
// aside for a while.
type balancer struct {
	set *upstream.Set
	rt  http.RoundTripper
}

// maxTries bounds the endpoints a request is sent to when they refuse its
// connection: the first, and two others. A pool that refuses everything
// (a Service whose pods are all gone, a list of dead addresses) then costs
// each request three dials, not one per endpoint, and the client its 502
// at once.
const maxTries = 3

func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchangeFrom(req.Context())
	var buf [maxTries]*upstream.Endpoint
	tried := buf[:0]
	var lastErr error // the last refusal
	for {
		var e *upstream.Endpoint
		if len(tried) < maxTries {
			e = b.set.Pick(tried)
		}
		switch {
		case e == nil && len(tried) == 0:
			return nil, errNoEndpoint
		case e == nil:
			return nil, refusedBy(tried, lastErr)
		}
		tried = append(tried, e)
		out := *req
		u := *req.URL
		u.Host = e.Addr
		out.URL = &u
		switch {
		case e.Host != "":
			out.Host = e.Host
		case out.Host == "":
			// The request's Host is its URL's, the upstream's host: an
			// address of a name resolved still names the name.
			out.Host = req.URL.Host
		}
		ex.sendTo(e)
		resp, err := b.rt.RoundTrip(&out)
		if err == nil || !refused(err) || req.Context().Err() != nil {
			// A dial that failed because the client went away says
			// nothing of the endpoint.
			return resp, err
		}
		b.set.Refused(e)
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

// refusedBy is the failure of a request that the endpoints tried all
// refused, err the last refusal.
func refusedBy(tried []*upstream.Endpoint, err error) error {
	return fmt.Errorf("%w (%d; the last: %w)", errRefused, len(tried), err)
}

// CloseIdleConnections closes the transport's idle connections.
func (b *balancer) CloseIdleConnections() {
	if c, ok := b.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// The balancer's failures: no endpoint to send to (a name that resolves
// to nothing now), and the endpoints tried all refused the connection.
var (
	errNoEndpoint = errors.New("itlproxy: the upstream has no endpoint now")
	errRefused    = errors.New("itlproxy: the upstream endpoints tried refused the connection")
)

// refused reports whether err is a connection that could not be made (the
// dial failed): nothing of the request reached the endpoint.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// sendTo notes that the request goes to endpoint e (again, when an
// endpoint before refused it): its stream is counted there, and it holds
// one of e's requests in flight until the exchange ends.
func (ex *exchange) sendTo(e *upstream.Endpoint) {
	if ex.upstream != nil {
		ex.upstream.Release()
	}
	ex.upstream = e
	e.Acquire()
	ex.sink.setUpstream(e.Label)
}
