package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/itlproxy/itlproxy/cmd/internal/admin"
	"github.com/itlproxy/itlproxy/cmd/internal/demo"
	"github.com/itlproxy/itlproxy/cmd/internal/envconfig"
	"github.com/itlproxy/itlproxy/cmd/internal/reload"
	"github.com/itlproxy/itlproxy/cmd/internal/telemetry"
	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy"
	"github.com/itlproxy/itlproxy/proxy/recorder"
	"github.com/itlproxy/itlproxy/proxy/transport"
	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// Set at build time with -ldflags "-X main.version=... -X main.revision=...".
var (
	version  = "dev"
	revision = ""
)

// usageError is a command line that names no known command, or a known
// command with an argument it does not take; help is the command line
// that says what it takes.
type usageError struct{ arg, help string }

func (e *usageError) Error() string {
	return fmt.Sprintf("unknown argument %q; run '%s' for usage", e.arg, e.help)
}

// run is the whole program: main only adds signals, the environment and
// the exit status. It returns when ctx is canceled and the shutdown is
// done, or when starting fails.
func run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	demoMode := false
	switch {
	case len(args) == 0:
	case len(args) == 1 && args[0] == "demo":
		demoMode = true
	case len(args) == 1 && isHelp(args[0]):
		_, err := io.WriteString(stdout, usage())
		return err
	case len(args) == 2 && args[0] == "demo" && isHelp(args[1]):
		_, err := io.WriteString(stdout, demoUsage())
		return err
	case len(args) == 1 && args[0] == "version":
		_, err := fmt.Fprintf(stdout, "itlproxy %s (revision %s, %s)\n", version, buildRevision(), runtime.Version())
		return err
	case args[0] == "demo":
		return &usageError{arg: args[1], help: "itlproxy demo -h"}
	case args[0] == "version":
		return &usageError{arg: args[1], help: "itlproxy -h"}
	default:
		return &usageError{arg: args[0], help: "itlproxy -h"}
	}
	cfg, err := loadConfig(environ, demoMode)
	if err != nil {
		return err
	}
	if demoMode {
		cfg.slos = demo.SLOs(cfg.slos)
		if _, set := environ["ITLPROXY_STALL_THRESHOLD"]; !set {
			cfg.StallThreshold = demo.StallThreshold
		}
	}
	log := newLogger(cfg, stderr)
	defer func() { _ = log.Sync() }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	rec, err := metrics.New(reg, metrics.Options{
		Models:           cfg.Models,
		MaxModels:        cfg.MaxModels,
		SLOs:             cfg.slos,
		Tenants:          cfg.Tenants,
		MaxTenants:       cfg.MaxTenants,
		StallThreshold:   cfg.StallThreshold,
		NativeBreakdowns: cfg.NativeBreakdowns,
		SessionMax:       cfg.SessionMax,
		SessionTTL:       cfg.SessionTTL,
		DegradeFactor:    cfg.SessionDegradeFactor,
		Version:          version,
		Revision:         buildRevision(),
		GoVersion:        runtime.Version(),
		GenAI:            pushesMetrics(cfg.Config),
	})
	if err != nil {
		return err
	}

	tr, err := telemetry.StartTracing(cfg.Config, version, reg, log)
	if err != nil {
		return err
	}
	if endpoint, protocol := cfg.TracesEndpoint(); endpoint != "" {
		log.Info("exporting spans", zap.String("protocol", protocol), zap.String("endpoint", envconfig.ShowURL(endpoint)))
	}
	defer tr.Shutdown(telemetry.SpanFlushTimeout, log)
	outcomes, err := metrics.NewReloads(reg)
	if err != nil {
		return err
	}
	srv := &server{cfg: cfg, log: log, reg: reg, rec: rec, recorder: newRecorder(cfg), tracer: tr.Tracer,
		reload: reload.New(reload.Options{SLOFile: cfg.SLOFile, EnvObjectives: cfg.envObjectives(), Metrics: rec,
			CertFiles: cfg.tlsFiles, Outcomes: outcomes, Log: log.Named("reload")})}
	if demoMode {
		return srv.runDemo(ctx, stdout)
	}
	return srv.run(ctx, nil)
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

func buildRevision() string {
	if revision != "" {
		return revision
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

func newLogger(cfg config, w io.Writer) *zap.Logger {
	level, _ := zapcore.ParseLevel(cfg.LogLevel) // validated
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	var encoder zapcore.Encoder = zapcore.NewJSONEncoder(enc)
	if cfg.LogFormat == "console" {
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	sink := zapcore.Lock(zapcore.AddSync(w))
	return zap.New(zapcore.NewCore(encoder, sink, level), zap.ErrorOutput(sink))
}

// server owns the two listeners and their lifecycle.
type server struct {
	cfg config
	log *zap.Logger
	reg *prometheus.Registry
	rec *metrics.Metrics
	// recorder keeps recent streams for /debug/streams and the page at /;
	// nil when off.
	recorder *recorder.Recorder
	// tracer starts the requests' spans, nil when tracing is off.
	tracer trace.Tracer
	// reload re-reads the SLO and certificate files while serving.
	reload *reload.Reloader
}

// newRecorder returns the stream recorder the configuration asks for,
// nil when it keeps nothing.
func newRecorder(cfg config) *recorder.Recorder {
	if cfg.RecorderStreams == 0 && cfg.RecorderSlowest == 0 {
		return nil
	}
	return recorder.New(recorder.Options{
		Last:    cfg.RecorderStreams,
		Slowest: cfg.RecorderSlowest,
		Window:  cfg.RecorderWindow,
		MaxGaps: cfg.RecorderMaxGaps,
	})
}

// warnAtStart warns of settings that weaken what the proxy guarantees.
func (s *server) warnAtStart() {
	if s.cfg.UpstreamInsecureSkipVerify {
		s.log.Warn("ITLPROXY_UPSTREAM_INSECURE_SKIP_VERIFY is set: the upstream's TLS certificate is NOT verified; " +
			"anyone on the path to it can read and alter every request and response")
	}
	for _, w := range s.cfg.web.Warnings() {
		s.log.Warn(w)
	}
}

// run serves until ctx is canceled, then shuts down gracefully. started,
// when not nil, is called with the bound addresses once both listeners
// are up (demo mode starts its load then).
func (s *server) run(ctx context.Context, started func(proxyAddr, adminAddr net.Addr) func()) error {
	// The listeners first: their addresses are never the upstream's
	// servers.
	proxyLn, adminLn, err := s.listen()
	if err != nil {
		return err
	}
	closeListeners := func() { proxyLn.Close(); adminLn.Close() }
	urls := s.cfg.upstreamURLs() // validated already
	rt := transport.NewLean(s.cfg.UpstreamTimeout, s.cfg.upstreamTLS)
	servers, err := s.cfg.servers(ctx, proxy.UpstreamEvents(s.rec, s.log.Named("upstream"), rt), []net.Addr{proxyLn.Addr(), adminLn.Addr()})
	if err != nil {
		closeListeners()
		return err
	}
	if servers != nil {
		go servers.Run(ctx)
	}
	s.warnAtStart()
	p := s.newProxy(urls[0], servers, rt)
	stopBeside, err := s.startBeside(urls[0])
	if err != nil {
		closeListeners()
		return err
	}
	defer stopBeside()

	httpLog, _ := zap.NewStdLogAt(s.log.Named("http"), zap.WarnLevel)
	proxySrv := s.proxyServer(p, httpLog)
	adm := admin.New(admin.Options{Registry: s.reg, Recorder: s.recorder, StallThreshold: s.cfg.StallThreshold,
		Reload: s.reload.Reload, Lifecycle: s.cfg.WebEnableLifecycle, Pprof: s.cfg.Pprof, Web: s.cfg.web, Log: s.log})
	adminSrv := &http.Server{
		Handler:           adm,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          httpLog,
	}
	serve := s.listenProtocols(proxySrv)
	serveErr := make(chan error, 2)
	go func() { serveErr <- serve(proxyLn) }()
	go func() { serveErr <- adm.Serve(ctx, adminSrv, adminLn) }()
	adm.SetReady(true)
	s.log.Info("itlproxy started",
		zap.String("version", version),
		zap.Stringer("proxy_addr", proxyLn.Addr()),
		zap.Stringer("admin_addr", adminLn.Addr()),
		zap.String("admin_scheme", s.cfg.web.Scheme()),
		zap.String("upstream", envconfig.ShowURL(s.cfg.UpstreamURL)))

	stopStarted := func() {}
	if started != nil {
		stopStarted = started(proxyLn.Addr(), adminLn.Addr())
	}

	var failed error
	select {
	case <-ctx.Done():
	case failed = <-serveErr:
		s.log.Error("listener failed", zap.Error(failed))
	}

	adm.SetReady(false)
	stopStarted()
	s.shutdown(proxySrv, adminSrv, p, failed)
	if failed != nil && !errors.Is(failed, http.ErrServerClosed) {
		return failed
	}
	return nil
}

// startBeside starts what runs beside the listeners: the metrics' push
// over OTLP and the reloader. stop stops the reloader, then pushes the
// metrics a last time: after the shutdown, with every stream it let
// finish.
func (s *server) startBeside(upstream *url.URL) (stop func(), err error) {
	stopPush, err := s.pushMetrics(upstream)
	if err != nil {
		return nil, err
	}
	stopReload, err := s.reload.Start()
	if err != nil {
		stopPush()
		return nil, fmt.Errorf("watching the configuration files: %w", err)
	}
	return func() { stopReload(); stopPush() }, nil
}

// pushesMetrics reports whether the configuration pushes the metrics over
// OTLP, and so the GenAI conventions' metrics derived from them.
func pushesMetrics(cfg telemetry.Config) bool {
	endpoint, _ := cfg.MetricsEndpoint()
	return endpoint != ""
}

// pushMetrics starts pushing the registry's metrics over OTLP when the
// configuration asks for it, and returns what makes the last push and
// stops them.
func (s *server) pushMetrics(upstream *url.URL) (stop func(), err error) {
	m, err := telemetry.StartMetrics(s.cfg.Config, telemetry.MetricsOptions{
		Gatherer: s.reg, GenAISource: s.rec.GenAIGatherer(), Registerer: s.reg, Version: version, Log: s.log,
		GenAI: telemetry.GenAI{ServerAddress: upstream.Hostname(), ServerPort: proxy.UpstreamPort(upstream), Provider: s.cfg.GenAIProvider},
	})
	if err != nil {
		return nil, fmt.Errorf("OTLP metric export: %w", err)
	}
	if endpoint, protocol := s.cfg.MetricsEndpoint(); endpoint != "" {
		s.log.Info("pushing metrics", zap.String("protocol", protocol), zap.String("endpoint", envconfig.ShowURL(endpoint)),
			zap.Duration("interval", s.cfg.MetricExportInterval()), zap.String("temporality", string(s.cfg.Temporality())))
	}
	return func() { m.Shutdown(telemetry.MetricFlushTimeout) }, nil
}

// listen opens the two listeners: the proxy's timed, so that each
// request's t0 is when its first bytes reached the proxy.
func (s *server) listen() (proxyLn, adminLn net.Listener, err error) {
	proxyLn, err = net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("proxy listener (ITLPROXY_LISTEN_ADDR=%q): %w", s.cfg.ListenAddr, err)
	}
	adminLn, err = net.Listen("tcp", s.cfg.AdminAddr)
	if err != nil {
		proxyLn.Close()
		return nil, nil, fmt.Errorf("admin listener (ITLPROXY_ADMIN_ADDR=%q): %w", s.cfg.AdminAddr, err)
	}
	return proxy.Listener(proxyLn, int(s.cfg.ClientSendBuffer)), adminLn, nil
}

// proxyServer is the proxy listener's server of p.
func (s *server) proxyServer(p http.Handler, errLog *log.Logger) *http.Server {
	return &http.Server{
		Handler: p,
		// No ReadTimeout or WriteTimeout: they would cut long uploads and
		// long streams. Slow clients are bounded by the header timeout.
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.ClientIdleTimeout,
		MaxHeaderBytes:    int(s.cfg.MaxHeaderBytes),
		ErrorLog:          errLog,
		// The proxy answers OPTIONS * itself, closing the connection when
		// its framing asks for it, as after every other request.
		DisableGeneralOptionsHandler: true,
		ConnContext:                  proxy.ConnContext,
	}
}

// newProxy returns the proxy to upstream over rt, as the configuration
// says.
func (s *server) newProxy(u *url.URL, servers *upstream.Set, rt http.RoundTripper) *proxy.Proxy {
	return proxy.New(proxy.Config{
		Upstream:          u,
		Servers:           servers,
		Transport:         rt,
		MaxRequestBytes:   int64(s.cfg.MaxRequestBytes),
		MaxEventBytes:     int(s.cfg.MaxEventBytes),
		StreamIdleTimeout: s.cfg.StreamIdleTimeout,
		SessionHeader:     s.cfg.SessionHeader,
		SessionFromUser:   s.cfg.SessionFromUser,
		ClassHeader:       s.cfg.ClassHeader,
		TenantHeader:      s.cfg.TenantHeader,
		InjectUsage:       s.cfg.InjectUsage,
		Recorder:          s.recorder,
		Tracer:            s.tracer,
		Routes:            s.cfg.routes,
		DefaultModel:      s.cfg.DefaultModel,
	}, s.rec, s.log.Named("proxy"))
}

// shutdown stops serving once readiness has failed, so that load balancers
// stop sending: after the delay (none when a listener failed), the proxy
// listener closes and streams in flight, WebSocket connections among them,
// get until the timeout to finish; the admin listener closes last, so
// /metrics is scraped until the end.
func (s *server) shutdown(proxySrv, adminSrv *http.Server, p *proxy.Proxy, failed error) {
	s.log.Info("shutting down", zap.Duration("delay", s.cfg.ShutdownDelay), zap.Duration("timeout", s.cfg.ShutdownTimeout))
	if failed == nil && s.cfg.ShutdownDelay > 0 {
		time.Sleep(s.cfg.ShutdownDelay)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := proxySrv.Shutdown(shutdownCtx); err != nil {
		s.log.Warn("streams still in flight at the shutdown timeout were cut", zap.Error(err))
		proxySrv.Close()
	}
	// The server forgets upgraded connections: their own wait, to the
	// same deadline.
	if n := p.WaitUpgraded(shutdownCtx); n > 0 {
		s.log.Warn("WebSocket connections still open at the shutdown timeout were closed", zap.Int("connections", n))
	}
	p.CloseIdleConnections()
	adminCtx, cancelAdmin := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelAdmin()
	_ = adminSrv.Shutdown(adminCtx)
	s.log.Info("stopped")
}

// listenProtocols sets up the proxy listener's protocols and returns how
// to serve it. With TLS: HTTPS with HTTP/2 and HTTP/1.1 by ALPN. Without:
// HTTP/1.1, and cleartext HTTP/2 too when ITLPROXY_H2C is set.
func (s *server) listenProtocols(srv *http.Server) func(net.Listener) error {
	if s.cfg.listenerTLS != nil {
		srv.TLSConfig = s.cfg.listenerTLS
		return func(l net.Listener) error { return srv.ServeTLS(l, "", "") }
	}
	if s.cfg.H2C {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	return srv.Serve
}
