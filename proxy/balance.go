package proxy

import (
	"errors"
	"net"
	"net/http"

	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// balancer sends each request to a server of the upstream's set
// (Config.Servers), chosen by the set, over the transport: the request's
// URL names the server's address, and its Host header stays the
// upstream's (or the server's own, for a list of URLs). A request whose
// connection a server refused was not sent: it goes to another
// server, and the one that refused is set aside for a while.
type balancer struct {
	set *upstream.Set
	rt  http.RoundTripper
}

func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchangeFrom(req.Context())
	var tried []*upstream.Server
	for {
		sv := b.set.Pick(tried)
		if sv == nil {
			return nil, errNoServer
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

var errNoServer = errors.New("itlproxy: every upstream server refused the connection")

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
