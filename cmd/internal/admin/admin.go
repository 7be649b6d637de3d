package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// Options configure the admin listener.
type Options struct {
	// Registry is what /metrics serves, and what the live page reads.
	Registry *prometheus.Registry
	// Recorder keeps the recent streams that /debug/streams and the live
	// page show; nil turns both off.
	Recorder *recorder.Recorder
	// StallThreshold marks the stalls on the live page's timelines; 0:
	// none.
	StallThreshold time.Duration
	// Reload re-reads the configuration files, for POST /-/reload; it is
	// served only with Lifecycle (as Prometheus' --web.enable-lifecycle),
	// and answers 403 without.
	Reload    func(trigger string) error
	Lifecycle bool
	// Pprof serves Go's profiler at /debug/pprof/.
	Pprof bool
	// Web is what the web configuration file said at start
	// (LoadWebConfig); its zero value serves plain HTTP, no credentials.
	Web WebConfig
	Log *zap.Logger
}

// Server is the admin listener's handler and the state it serves: the
// readiness the probes report and the live page's history.
type Server struct {
	o       Options
	ready   atomic.Bool
	history *history // nil without a recorder
	handler http.Handler
}

// New returns the admin listener's server, not ready until SetReady.
func New(o Options) *Server {
	s := &Server{o: o}
	if o.Recorder != nil {
		s.history = &history{g: o.Registry}
	}
	s.handler = s.routes()
	return s
}

// SetReady sets what /readyz answers: ready from the start of serving to
// the start of the shutdown, so that load balancers stop sending first.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// ServeHTTP serves the admin paths, without the web configuration's
// guard (Serve puts it in front).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Serve serves srv, whose handler is s, on ln until srv is shut down,
// guarded as the web configuration says, and keeps the live page's
// history until ctx is canceled.
func (s *Server) Serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	if s.history != nil {
		go s.history.run(ctx)
	}
	return s.serve(srv, ln)
}

func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.o.Registry, promhttp.HandlerOpts{
		// OpenMetrics is negotiated with scrapers that ask for it: it is
		// the format that carries exemplars.
		EnableOpenMetrics: true,
		Registry:          s.o.Registry,
	}))
	r.Post("/-/reload", s.reload)
	for path, probe := range s.probes() {
		r.Get(path, probe)
	}
	if s.o.Recorder != nil {
		// Never on the proxy port: they name requests, sessions and tenants.
		r.Get("/debug/streams", s.listStreams)
		r.Get("/debug/streams/{id}", s.getStream)
		r.Get("/", s.livePage)
	}
	if s.o.Pprof {
		// Only here, on the admin listener, and only when asked: profiles
		// reveal internals, and the proxy port serves nothing of its own.
		r.HandleFunc("/debug/pprof/", pprof.Index)
		r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		r.HandleFunc("/debug/pprof/profile", pprof.Profile)
		r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		r.HandleFunc("/debug/pprof/trace", pprof.Trace)
		r.HandleFunc("/debug/pprof/{profile}", pprof.Index)
	}
	return r
}

// probes are the paths the kubelet's probes get, answered without
// credentials: they say whether the process lives and takes traffic, and
// nothing about the streams.
func (s *Server) probes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{"/healthz": s.healthz, "/readyz": s.readyz}
}

// healthz answers the liveness probe: the process serves.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok\n")
}

// readyz answers the readiness probe: 503 from the start of the shutdown.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// reload is POST /-/reload: 200 when every file is in effect, 500 with
// the reasons a file is refused; 403, reloading nothing, unless
// ITLPROXY_WEB_ENABLE_LIFECYCLE is set.
func (s *Server) reload(w http.ResponseWriter, _ *http.Request) {
	if !s.o.Lifecycle {
		http.Error(w, "POST /-/reload is off: set ITLPROXY_WEB_ENABLE_LIFECYCLE=true to serve it "+
			"(SIGHUP and changes to the files reload them without it)", http.StatusForbidden)
		return
	}
	if err := s.o.Reload("http"); err != nil {
		http.Error(w, "refused, what is in use stays:\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "reloaded\n")
}
