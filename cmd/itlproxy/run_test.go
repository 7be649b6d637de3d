package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/cmdtest"
)

// TestGracefulShutdown: on the signal, readiness fails at once, the proxy
// keeps accepting for the delay, then refuses new connections, while a
// stream in flight runs to its end.
func TestGracefulShutdown(t *testing.T) {
	up := httptest.NewServer(scheduledUpstream{schedule: randomSchedule(25)})
	defer up.Close()
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":   up.URL,
		"ITLPROXY_SHUTDOWN_DELAY": "400ms",
	})
	resp, err := http.Post("http://"+in.proxy+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m1","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	signaled := time.Now()
	in.stop()
	checkDrain(t, in.admin, in.proxy, signaled, 300*time.Millisecond, 2*time.Second)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || strings.Count(string(rest), `"content":"w`) != 25 {
		t.Fatalf("stream in flight did not complete: %v, %q", err, rest)
	}
	if err := in.wait(5 * time.Second); err != nil {
		t.Errorf("run returned %v", err)
	}
}

// TestShutdownTimeoutCutsStreams: a stream longer than the shutdown
// timeout is cut, visibly to the client, and run still returns.
func TestShutdownTimeoutCutsStreams(t *testing.T) {
	up := httptest.NewServer(scheduledUpstream{schedule: randomSchedule(500)})
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_SHUTDOWN_TIMEOUT": "300ms"})
	resp, err := http.Post("http://"+in.proxy+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m2","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	in.stop()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the cut stream ended cleanly for the client")
	}
	if err := in.wait(5 * time.Second); err != nil {
		t.Errorf("run returned %v", err)
	}
}

// TestNoSecretsInLogs plants credentials, a prompt and a completion, logs
// at debug level through successful and failing requests and failing
// metrics pushes, and greps the whole log for them.
func TestNoSecretsInLogs(t *testing.T) {
	const completion = "PLANTED-COMPLETION"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"`+completion+`"}}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	dead := freeAddr(t)
	var logs strings.Builder
	for _, upstream := range []string{
		strings.Replace(up.URL, "http://", "http://user:PLANTED-PASSWORD@", 1) + "?api-key=PLANTED-QUERY-KEY",
		"http://user:PLANTED-PASSWORD@" + dead,
	} {
		in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": upstream, "ITLPROXY_LOG_LEVEL": "debug",
			// A metrics push to nowhere, with credentials in its URL.
			"OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "50", "OTEL_METRIC_EXPORT_TIMEOUT": "200",
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://user:PLANTED-PUSH-PASSWORD@" + dead + "/v1/metrics"})
		for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
			req, _ := http.NewRequest(http.MethodPost, "http://"+in.proxy+path, strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"PLANTED-PROMPT"}]}`))
			req.Header.Set("Authorization", "Bearer PLANTED-BEARER")
			req.Header.Set("Api-Key", "PLANTED-API-KEY")
			req.Header.Set("X-Api-Key", "PLANTED-X-API-KEY")
			req.Header.Set("Cookie", "session=PLANTED-COOKIE")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		waitFor(t, "a failed metrics push logged", 5*time.Second, func() bool {
			return strings.Contains(in.stderr.String(), "OTLP metric export failed")
		})
		in.stop()
		_ = in.wait(10 * time.Second)
		logs.WriteString(in.stderr.String())
	}
	if !strings.Contains(logs.String(), `"msg":"request"`) || !strings.Contains(logs.String(), "upstream unreachable") {
		t.Fatalf("the log lacks the request and failure lines this test must search:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "PLANTED") {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "PLANTED") {
				t.Errorf("secret in log: %s", line)
			}
		}
	}
}

// TestExitStatuses runs the real main in a child process.
func TestExitStatuses(t *testing.T) {
	proxyAddr, adminAddr := freeAddr(t), freeAddr(t)
	for _, c := range []struct {
		name   string
		args   []string
		env    []string
		status int
		output string
	}{
		{"bad config", nil, []string{"ITLPROXY_UPSTREAM_URL=", "ITLPROXY_SHUTDOWN_TIMEOUT=x"}, 2, "ITLPROXY_SHUTDOWN_TIMEOUT=\"x\": not a duration"},
		{"bad metrics exporter", nil, []string{"ITLPROXY_UPSTREAM_URL=http://127.0.0.1:8000", "OTEL_METRICS_EXPORTER=console"}, 2,
			`OTEL_METRICS_EXPORTER="console": must be prometheus, otlp, both (prometheus,otlp) or none`},
		{"bad metrics endpoint", nil, []string{"ITLPROXY_UPSTREAM_URL=http://127.0.0.1:8000", "OTEL_METRICS_EXPORTER=otlp",
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=collector:4318"}, 2,
			`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="collector:4318": not an http or https URL`},
		{"unknown command", []string{"serve"}, nil, 2, `unknown argument "serve"`},
		{"help", []string{"-h"}, nil, 0, "ITLPROXY_UPSTREAM_URL"},
		{"demo help", []string{"demo", "-h"}, nil, 0, "itlproxy demo -h   print this help"},
		{"demo help, long", []string{"demo", "--help"}, nil, 0, "ITLPROXY_DEMO_CLIENTS (default 6)"},
		{"demo, unknown argument", []string{"demo", "-x"}, nil, 2, `unknown argument "-x"; run 'itlproxy demo -h' for usage`},
		{"version", []string{"version"}, nil, 0, "itlproxy dev"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := append([]string{"ITLPROXY_LISTEN_ADDR=" + proxyAddr, "ITLPROXY_ADMIN_ADDR=" + adminAddr}, c.env...)
			out, status := cmdtest.RunMain(t, env, c.args...)
			if status != c.status || !strings.Contains(out, c.output) {
				t.Errorf("exit %d with %q; want %d with %q", status, out, c.status, c.output)
			}
		})
	}
	// Nothing was left listening, nor ever bound: both addresses are free.
	for _, addr := range []string{proxyAddr, adminAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s is taken: %v", addr, err)
			continue
		}
		ln.Close()
	}
}

// TestAdminEndpoints: the admin port serves /metrics (OpenMetrics when
// asked, the format that carries exemplars), /healthz and /readyz, and
// nothing else; the proxy port serves none of them itself.
func TestAdminEndpoints(t *testing.T) {
	upstreamPaths := make(chan string, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamPaths <- r.URL.Path
		_, _ = io.WriteString(w, "from upstream")
	}))
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL})
	get := func(url, accept string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
	}
	admin := "http://" + in.admin
	for _, c := range []struct {
		url, accept, wantCT, wantBody string
		code                          int
	}{
		{admin + "/metrics", "", "text/plain; version=0.0.4; charset=utf-8; escaping=underscores", "itlproxy_build_info{", 200},
		{admin + "/metrics", "application/openmetrics-text; version=1.0.0", "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores", "# EOF", 200},
		{admin + "/healthz", "", "", "ok", 200},
		{admin + "/readyz", "", "", "ready", 200},
		{admin + "/debug/pprof/", "", "", "", 404},
		{admin + "/v1/models", "", "", "", 404},
	} {
		code, ct, body := get(c.url, c.accept)
		if code != c.code || c.wantCT != "" && ct != c.wantCT || !strings.Contains(body, c.wantBody) {
			t.Errorf("GET %s (Accept %q): %d %q %.60q", c.url, c.accept, code, ct, body)
		}
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		code, _, body := get("http://"+in.proxy+path, "")
		if code != 200 || body != "from upstream" || <-upstreamPaths != path {
			t.Errorf("proxy port %s: %d %q, want it forwarded", path, code, body)
		}
	}
}

// TestPprofOnlyWhenAsked: the profiler is off by default (see
// TestAdminEndpoints); with ITLPROXY_PPROF=true it is served on the admin
// listener, and still never on the proxy port.
func TestPprofOnlyWhenAsked(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "from upstream")
	}))
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_PPROF": "true"})
	for _, c := range []struct {
		url, want string
	}{
		{"http://" + in.admin + "/debug/pprof/", "goroutine"},
		{"http://" + in.admin + "/debug/pprof/heap?debug=1", "heap profile"},
		{"http://" + in.proxy + "/debug/pprof/", "from upstream"},
	} {
		resp, err := http.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), c.want) {
			t.Errorf("GET %s: %d %.80q, want %q", c.url, resp.StatusCode, body, c.want)
		}
	}
}
