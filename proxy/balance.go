package proxy

import (
	"errors"
	"net"
	"net/http"

	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// balancer sends each request to an endpoint of the upstream's set
// (Config.Endpoints), chosen by the set, over the transport: the request's
// URL names the endpoint's address, and its Host header stays the
// upstream's (or the endpoint's own, for a list of URLs). A request whose
// connection an endpoint refused was not sent: it goes to another
// endpoint, and the one that refused is set aside for a while.
type balancer struct {
	set *upstream.Set
	rt  http.RoundTripper
}

func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchangeFrom(req.Context())
	var tried []*upstream.Endpoint
	for {
		e := b.set.Pick(tried)
		if e == nil {
			return nil, errNoEndpoint
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
		// Nothing of the request was sent; its body may have been closed
		// all the same, and is sent again from the start when it can be.
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return resp, err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return resp, err
			}
			req.Body = body
		}
	}
}

// CloseIdleConnections closes the transport's idle connections.
func (b *balancer) CloseIdleConnections() {
	if c, ok := b.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

var errNoEndpoint = errors.New("itlproxy: every upstream endpoint refused the connection")

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
