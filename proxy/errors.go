package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// apiError is the body of an OpenAI-style error response, the shape every
// OpenAI-compatible client knows how to report.
type apiError struct {
	Error apiErrorDetail `json:"error"`
}

type apiErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func writeError(w http.ResponseWriter, status int, typ, code, message string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiError{Error: apiErrorDetail{Message: message, Type: typ, Code: code}})
}

// handleUpstreamError answers when the upstream gave no response: it could
// not be reached, it timed out before its headers, or the client went away
// first (then there is no one to answer).
func (p *Proxy) handleUpstreamError(w http.ResponseWriter, r *http.Request, err error) {
	ex := exchangeFrom(r.Context())
	w.Header().Set(RequestIDHeader, ex.sink.ids.Request)
	var netErr net.Error
	switch {
	case r.Context().Err() != nil:
		// The client went away (or the server is closing its connection):
		// whatever the transport's error says, no one is left to answer.
		ex.fail(statusClientClosed, clientLeft)
	case errors.Is(err, errNoServer):
		ex.fail(http.StatusServiceUnavailable, upstreamFailed)
		p.warnPool(ex, "the upstream has no server to send a request to", err)
		writeError(w, ex.code, "upstream_error", "upstream_unavailable",
			"itlproxy: the upstream has no server to send to now")
	case errors.Is(err, errRefused):
		ex.fail(http.StatusBadGateway, upstreamFailed)
		p.warnPool(ex, "upstream unreachable: the servers tried refused the connection", err)
		writeError(w, ex.code, "upstream_error", "upstream_unreachable",
			"itlproxy: the upstream server could not be reached")
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		ex.fail(http.StatusGatewayTimeout, upstreamFailed)
		p.log.Warn("upstream timed out before responding", zap.String("request_id", ex.sink.ids.Request),
			zap.String("endpoint", ex.req.labels.Endpoint), zap.String("model", ex.req.labels.Model), zap.Error(err))
		writeError(w, ex.code, "upstream_error", "upstream_timeout",
			"itlproxy: the upstream server did not respond in time")
	default:
		ex.fail(http.StatusBadGateway, upstreamFailed)
		p.log.Warn("upstream unreachable", zap.String("request_id", ex.sink.ids.Request),
			zap.String("endpoint", ex.req.labels.Endpoint), zap.String("model", ex.req.labels.Model), zap.Error(err))
		writeError(w, ex.code, "upstream_error", "upstream_unreachable",
			"itlproxy: the upstream server could not be reached")
	}
}

// poolLogEvery bounds the warnings of requests the balancer could send
// nowhere: each is answered at once and counted (itlproxy_requests_total,
// and each refusal in itlproxy_upstream_ejections_total), and a pool that
// refuses everything or has no server logs a line every 10 s at most,
// not one a request.
const poolLogEvery = 10 * time.Second

// warnPool logs, at a bounded rate, a request the balancer could send
// nowhere.
func (p *Proxy) warnPool(ex *exchange, msg string, err error) {
	if ok, skipped := p.poolLog.allow(time.Now()); ok {
		p.log.Warn(msg, zap.String("request_id", ex.sink.ids.Request), zap.String("endpoint", ex.req.labels.Endpoint),
			zap.String("model", ex.req.labels.Model), zap.Int("since_last_logged", skipped), zap.Error(err))
	}
}
