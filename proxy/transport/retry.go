package transport

import (
	"errors"
	"net/http"
)

// Errors that decide a retry, as http.Transport's do.
type (
	// nothingWritten: the request was not sent at all.
	nothingWritten struct{ error }
	// closedBeforeResponse: the connection ended before the first byte of
	// the response.
	closedBeforeResponse struct{ error }
)

func (e nothingWritten) Unwrap() error       { return e.error }
func (e closedBeforeResponse) Unwrap() error { return e.error }

func retryable(req *http.Request, err error) bool {
	var nw nothingWritten
	if errors.As(err, &nw) {
		return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	}
	var cb closedBeforeResponse
	return errors.As(err, &cb) && replayable(req)
}

// replayable is http.Request's own rule: an idempotent method, or one
// that says it is idempotent, with a body that can be sent again.
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

func unwrapRetry(err error) error {
	var nw nothingWritten
	if errors.As(err, &nw) {
		return nw.error
	}
	var cb closedBeforeResponse
	if errors.As(err, &cb) {
		return cb.error
	}
	return err
}
