// Package transport builds itlproxy's HTTP transports to the upstream: New,
// Go's http.Transport as itlproxy sets it up, which itlbench's plain
// baseline proxy uses, and NewLean, the proxy's own, which carries
// cleartext HTTP/1.1 requests without http.Transport's two goroutines and
// two buffers per connection (Lean) and everything else over New's.
package transport
