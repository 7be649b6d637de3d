package proxy

import (
	"runtime"
	"sync"
	"weak"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// servers are the records of the upstream servers the proxy sends
// streams to (metrics.Server), against which each stream's stalls are
// judged: the single upstream's, or one for each server of the set the
// proxy balances over. A server's record lives as long as the server:
// one that left the set goes once the last exchange sent to it lets go of
// it, so that the records stay as few as the servers, whatever the
// resolutions do.
type servers struct {
	single *metrics.Server
	each   sync.Map // weak.Pointer[upstream.Server] → *metrics.Server
}

func newServers() *servers { return &servers{single: metrics.NewServer()} }

// of returns sv's record, made at its first stream; nil is the single
// upstream.
func (s *servers) of(sv *upstream.Server) *metrics.Server {
	if sv == nil {
		return s.single
	}
	key := weak.Make(sv)
	if v, ok := s.each.Load(key); ok {
		return v.(*metrics.Server)
	}
	v, loaded := s.each.LoadOrStore(key, metrics.NewServer())
	if !loaded {
		runtime.AddCleanup(sv, func(k weak.Pointer[upstream.Server]) { s.each.Delete(k) }, key)
	}
	return v.(*metrics.Server)
}
