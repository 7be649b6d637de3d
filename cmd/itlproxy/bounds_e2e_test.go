package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/internal/testdns"
	"github.com/itlproxy/itlproxy/proxy/events"
)

// What a client or a bad day can send the real binary, and what it costs:
// ids of any size, a loop back to the proxy, request bodies of escaped
// keys, a message with its role twice.

// shortStream answers with a stream of three tokens, whatever it is
// asked.
func shortStream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	for range 3 {
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n")
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// liveHeap is the process's live heap after a collection it is made to
// run: the HeapAlloc its heap profile reports once collected (gc=1).
func liveHeap(t *testing.T, admin string) uint64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no HeapAlloc in the heap profile (%d, %v)", resp.StatusCode, sc.Err())
	return 0
}

// parallel runs do(i) for i from 0 to n-1 on workers goroutines.
func parallel(n, workers int, do func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				do(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// TestHostileSessionIDs: 2,000 streams, each with a distinct 60 KB
// session id, and 100 whose session id is a 1 MB "user", leave the
// proxy's live heap under 40 MB after a collection, with every session
// tracked: each keeps a copy of its id's first 128 bytes.
func TestHostileSessionIDs(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(shortStream))
	defer up.Close()
	p := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":      up.URL,
		"ITLPROXY_MAX_HEADER_BYTES":  "128KiB",
		"ITLPROXY_SESSION_FROM_USER": "true",
		"ITLPROXY_PPROF":             "true",
	})
	before := liveHeap(t, p.Admin)
	post := func(session, user string) {
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"user":"` + user + `"}`
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.Proxy+"/v1/chat/completions", strings.NewReader(body))
		if session != "" {
			req.Header.Set("X-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%d", resp.StatusCode)
		}
	}
	const headers, users = 2000, 100
	long := strings.Repeat("s", 60_000)
	parallel(headers, 8, func(i int) { post(fmt.Sprintf("%05d-%s", i, long), "") })
	bigUser := strings.Repeat("u", 1<<20)
	parallel(users, 4, func(i int) { post("", fmt.Sprintf("%05d-%s", i, bigUser)) })

	var tracked float64
	e2e.WaitFor(t, "every session tracked", 5*time.Second, func() bool {
		tracked = scrapeAdmin(t, p.Admin).Value("itlproxy_sessions_tracked")
		return tracked == headers+users
	})
	after := liveHeap(t, p.Admin)
	t.Logf("live heap %.1f MB before, %.1f MB after %d sessions of 60 KB ids and %d of 1 MB users",
		float64(before)/1e6, float64(after)/1e6, headers, users)
	if after > 40e6 {
		t.Errorf("live heap %.1f MB after a collection, over 40 MB", float64(after)/1e6)
	}
}

// cpuSeconds is the CPU time the process has used.
func cpuSeconds(t *testing.T, p *e2e.Process) float64 {
	t.Helper()
	proc, err := procfs.NewProc(p.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	stat, err := proc.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return stat.CPUTime()
}

// keysRequest is a chat request of about size bytes, most of it
// parameters the proxy does not read, each named by a short key: keys
// written plainly, or each letter escaped as \u00XX. The plain one is
// padded with white space so that the two bodies are the same size and
// differ in their keys alone.
func keysRequest(size int, escaped bool) []byte {
	key := func(k string) string {
		if !escaped {
			return `"` + k + `"` + strings.Repeat(" ", 5*len(k))
		}
		var b strings.Builder
		b.WriteByte('"')
		for _, c := range k {
			fmt.Fprintf(&b, `\u%04x`, c)
		}
		b.WriteByte('"')
		return b.String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, `{%s:"m",%s:true,%s:[{%s:"user",%s:"a"},{%s:"assistant",%s:"b"},{%s:"user",%s:"c"}]`,
		key("model"), key("stream"), key("messages"), key("role"), key("content"), key("role"), key("content"), key("role"), key("content"))
	params := []string{key("n"), key("seed")}
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, `,%s:0`, params[i%len(params)])
	}
	b.WriteByte('}')
	return []byte(b.String())
}

// TestEscapedKeysCost sends the proxy a 15 MB request whose keys are
// escaped, and its twin of the same size with plain keys, in turn, and
// compares the CPU the proxy spent on each: the escaped keys cost at most
// four times the plain ones (a general JSON decoder per key made it ten).
// A ratio in the same run, of the process's own CPU time, not a time.
func TestEscapedKeysCost(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(shortStream))
	defer up.Close()
	p := e2e.Start(t, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL})
	plain, escaped := keysRequest(15<<20, false), keysRequest(15<<20, true)
	if len(plain) != len(escaped) {
		t.Fatalf("bodies of %d and %d bytes, want the same size", len(plain), len(escaped))
	}
	if info, ok := events.InspectRequest(escaped); !ok || info.Model != "m" || info.Turn != 2 {
		t.Fatalf("the escaped body reads as %+v, %v", info, ok)
	}
	post := func(body []byte) float64 {
		cpu := cpuSeconds(t, p)
		resp, err := http.Post("http://"+p.Proxy+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d", resp.StatusCode)
		}
		return cpuSeconds(t, p) - cpu
	}
	var plainCPU, escapedCPU float64
	const rounds = 8
	for range rounds {
		plainCPU += post(plain)
		escapedCPU += post(escaped)
	}
	// Both read as the same request: counted under its model, streamed.
	fs := scrapeAdmin(t, p.Admin)
	if v := fs.Value("itlproxy_requests_total", "model", "m", "streaming", "true", "code", "200"); v != 2*rounds {
		t.Errorf("%v requests counted as model m's streams, want %d", v, 2*rounds)
	}
	ratio := escapedCPU / plainCPU
	t.Logf("%d MB bodies, %d of each: plain keys %.2fs of CPU, escaped keys %.2fs: %.2f times",
		len(plain)>>20, rounds, plainCPU, escapedCPU, ratio)
	if ratio > 4 {
		t.Errorf("escaped keys cost %.2f times the CPU of plain ones, over 4", ratio)
	}
}

// TestRoleTwice: a message with its role twice is read as encoding/json
// reads it (the last counts), and the request is counted under its model,
// as a stream, in its turn.
func TestRoleTwice(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(shortStream))
	defer up.Close()
	p := e2e.Start(t, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL})
	body := `{"model":"twice","stream":true,"messages":[{"role":"user","content":"a"},` +
		`{"role":"assistant","role":"assistant","content":"b"},{"role":"user","content":"c"}]}`
	resp, err := http.Post("http://"+p.Proxy+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	e2e.WaitFor(t, "the request counted", 5*time.Second, func() bool {
		return scrapeAdmin(t, p.Admin).Value("itlproxy_requests_total") == 1
	})
	fs := scrapeAdmin(t, p.Admin)
	if v := fs.Value("itlproxy_requests_total", "model", "twice", "streaming", "true", "code", "200"); v != 1 {
		t.Errorf("%v requests counted as model twice's streams, want 1", v)
	}
	if n, _ := fs.Histogram("itlproxy_time_to_first_token_by_turn_seconds", "model", "twice", "turn", "2-4"); n != 1 {
		t.Errorf("%d streams in turn band 2-4, want 1 (the second turn)", n)
	}
}

// TestRequestLoop: a proxy whose upstream is itself answers each request
// with a 5xx within 2 s, its goroutines staying under 300 (the request
// that comes back is answered 508 at once), and says why in its log.
func TestRequestLoop(t *testing.T) {
	self := e2e.FreeAddr(t)
	p := e2e.Start(t, map[string]string{"ITLPROXY_UPSTREAM_URL": "http://" + self, "ITLPROXY_LISTEN_ADDR": self})
	stop := make(chan struct{})
	most := make(chan float64)
	go func() {
		high := 0.0
		for {
			high = max(high, scrapeAdmin(t, p.Admin).Value("go_goroutines"))
			select {
			case <-stop:
				most <- high
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	parallel(20, 4, func(int) {
		start := time.Now()
		resp, err := http.Post("http://"+self+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Error(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode/100 != 5 || took > 2*time.Second {
			t.Errorf("%d after %v: %s; want a 5xx within 2s", resp.StatusCode, took, body)
		}
		if resp.StatusCode != http.StatusLoopDetected || !strings.Contains(string(body), `"code":"loop_detected"`) {
			t.Errorf("%d %s, want 508 with an OpenAI-style error, loop_detected", resp.StatusCode, body)
		}
	})
	close(stop)
	if g := <-most; g >= 300 {
		t.Errorf("%v goroutines at the most, want under 300", g)
	} else {
		t.Logf("%v goroutines at the most", g)
	}
	if n := strings.Count(p.Log(), "came back to this proxy"); n != 1 {
		t.Errorf("%d warnings of the loop in the log, want 1:\n%s", n, p.Log())
	}
}

// TestNoURLSecretsInOutputs plants user names, passwords and query keys
// in the upstream URLs (one, a list, a name resolved) and the OTLP
// endpoints of the real binary, makes it print them every way it can (the
// start-up lines, requests that succeed and fail at debug level, servers
// that refuse, exports that fail, a name that resolves to nothing, a
// configuration refused), and greps every output for them: each log line,
// each error, /metrics in both its formats.
func TestNoURLSecretsInOutputs(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(shortStream))
	defer up.Close()
	upHost := strings.TrimPrefix(up.URL, "http://")
	_, upPort, _ := strings.Cut(upHost, ":")
	dead := e2e.FreeAddr(t)
	secret := func(host string) string {
		return "http://PLANTED-USER:PLANTED-PASSWORD@" + host + "/v1?api_key=PLANTED-QUERY"
	}
	otlp := map[string]string{
		"OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "50", "OTEL_METRIC_EXPORT_TIMEOUT": "200",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://PLANTED-PUSH-USER:PLANTED-PUSH-PASSWORD@" + dead + "/v1/metrics?key=PLANTED-PUSH-QUERY",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":  "http://PLANTED-SPAN-USER:PLANTED-SPAN-PASSWORD@" + dead + "/v1/traces?key=PLANTED-SPAN-QUERY",
		"OTEL_BSP_SCHEDULE_DELAY":             "50",
		"ITLPROXY_LOG_LEVEL":                  "debug",
	}
	resolving := testdns.Start(t, "llm.test.", "127.0.0.1")
	nothing := testdns.Start(t, "llm.test.")
	var outputs strings.Builder
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"one upstream", map[string]string{"ITLPROXY_UPSTREAM_URL": secret(upHost)}},
		{"one upstream refusing", map[string]string{"ITLPROXY_UPSTREAM_URL": secret(dead)}},
		{"a list, one refusing", map[string]string{"ITLPROXY_UPSTREAM_URL": secret(upHost) + "," + secret(dead)}},
		{"a name resolved", map[string]string{"ITLPROXY_UPSTREAM_URL": secret("llm.test:" + upPort),
			"ITLPROXY_UPSTREAM_RESOLVE": "dns", "ITLPROXY_UPSTREAM_RESOLVER": resolving.Addr}},
	} {
		env := maps.Clone(otlp)
		maps.Copy(env, c.env)
		p := e2e.Start(t, env)
		for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"} {
			for range 3 {
				resp, err := http.Post("http://"+p.Proxy+path, "application/json", strings.NewReader(`{"model":"m","stream":true}`))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		e2e.WaitFor(t, c.name+": a failed metrics push logged", 10*time.Second, func() bool {
			return strings.Contains(p.Log(), "OTLP metric export failed") && strings.Contains(p.Log(), "OpenTelemetry export failed")
		})
		for _, accept := range []string{"text/plain;version=0.0.4", "application/openmetrics-text;version=1.0.0"} {
			req, _ := http.NewRequest(http.MethodGet, "http://"+p.Admin+"/metrics", nil)
			req.Header.Set("Accept", accept)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			outputs.WriteString(c.name + ": /metrics (" + accept + "):\n" + string(b))
		}
		outputs.WriteString(c.name + ": log:\n" + p.Log())
	}
	// Start-ups refused: a name that resolves to nothing, a mixed list, bad
	// OTLP endpoints.
	for _, env := range []map[string]string{
		{"ITLPROXY_UPSTREAM_URL": secret("llm.test:8000"), "ITLPROXY_UPSTREAM_RESOLVE": "dns", "ITLPROXY_UPSTREAM_RESOLVER": nothing.Addr},
		{"ITLPROXY_UPSTREAM_URL": secret("a:1") + ",https://PLANTED-USER@b:2/v2?PLANTED-QUERY"},
		{"ITLPROXY_UPSTREAM_URL": "ftp://PLANTED-USER:PLANTED-PASSWORD@a?PLANTED-QUERY"},
		{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_UPSTREAM_RESOLVER": "PLANTED-USER:PLANTED-PASSWORD@10.0.0.1"},
		{"ITLPROXY_UPSTREAM_URL": up.URL, "OTEL_EXPORTER_OTLP_ENDPOINT": "PLANTED-USER:PLANTED-PASSWORD@collector:4318?PLANTED-QUERY",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://PLANTED-USER:PLANTED-PASSWORD@collector?PLANTED-QUERY"},
	} {
		cmd := exec.Command(e2e.Build(t))
		cmd.Env = []string{"ITLPROXY_LISTEN_ADDR=127.0.0.1:0", "ITLPROXY_ADMIN_ADDR=127.0.0.1:0"}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit status 2:\n%s", env, err, out)
		}
		outputs.WriteString("start-up refused:\n" + string(out))
	}
	all := outputs.String()
	for _, must := range []string{`"msg":"request"`, "upstream unreachable", "refused a connection", "OTLP metric export failed",
		"OpenTelemetry export failed", "with ITLPROXY_UPSTREAM_RESOLVE=dns: the name resolves to no address", "a mixed list", "scheme must be http or https",
		"not a host:port address", "not an http or https URL", "itlproxy_requests_total"} {
		if !strings.Contains(all, must) {
			t.Errorf("the outputs lack %q, which this test must search", must)
		}
	}
	for line := range strings.Lines(all) {
		if strings.Contains(strings.ToUpper(line), "PLANTED") { // a scheme is read in lower case
			t.Errorf("a planted secret: %s", line)
		}
	}
}

// TestRefusingPool: with 400 upstream URLs where nothing listens, each of
// 20 requests is answered a 5xx within 0.2 s (three servers tried, not
// 400), every refusal is counted, and the whole log holds at most 40
// lines.
func TestRefusingPool(t *testing.T) {
	seen := map[string]bool{}
	var urls []string
	for len(urls) < 400 {
		if addr := e2e.FreeAddr(t); !seen[addr] {
			seen[addr] = true
			urls = append(urls, "http://"+addr)
		}
	}
	p := e2e.Start(t, map[string]string{"ITLPROXY_UPSTREAM_URL": strings.Join(urls, ",")})
	const n = 20
	for range n {
		start := time.Now()
		resp, err := http.Post("http://"+p.Proxy+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode/100 != 5 || took > 200*time.Millisecond {
			t.Errorf("%d after %v: %s; want a 5xx within 0.2s", resp.StatusCode, took, body)
		}
	}
	fs := scrapeAdmin(t, p.Admin)
	if v := fs.Value("itlproxy_upstream_ejections_total"); v != n*3 {
		t.Errorf("%v refusals counted, want %d: three servers tried for each request", v, n*3)
	}
	if v := fs.Value("itlproxy_requests_total", "code", "502"); v != n {
		t.Errorf("%v requests counted with a 502, want %d", v, n)
	}
	lines := strings.Count(p.Log(), "\n")
	t.Logf("%d log lines for %d requests to 400 refusing servers", lines, n)
	if lines > 40 {
		t.Errorf("%d log lines, over 40:\n%s", lines, p.Log())
	}
}

// TestGatewayAnswers: in front of a name whose answer holds the proxy's
// own address beside a model server's, the proxy leaves its own out (said
// once in the log, however many answers hold it) and sends every request
// to the server; when the name resolves to nothing, each request is
// answered 503 at once, and served again once it resolves again.
func TestGatewayAnswers(t *testing.T) {
	ips := []string{"127.0.0.1", "127.0.0.2"}
	port := freePortOn(t, ips...)
	pod := startPod(t, ips[1], port, time.Millisecond)
	dnsServer := testdns.Start(t, "llm.test.", ips...)
	p := e2e.Start(t, map[string]string{
		"ITLPROXY_LISTEN_ADDR":               net.JoinHostPort(ips[0], fmt.Sprint(port)),
		"ITLPROXY_UPSTREAM_URL":              fmt.Sprintf("http://llm.test:%d", port),
		"ITLPROXY_UPSTREAM_RESOLVE":          "dns",
		"ITLPROXY_UPSTREAM_RESOLVER":         dnsServer.Addr,
		"ITLPROXY_UPSTREAM_RESOLVE_INTERVAL": "50ms",
	})
	send := func() (int, time.Duration) {
		start := time.Now()
		resp, err := http.Post("http://"+p.Proxy+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	const n = 20
	for i := range n {
		if code, _ := send(); code != http.StatusOK {
			t.Fatalf("request %d: %d", i, code)
		}
		time.Sleep(10 * time.Millisecond) // answers come and go meanwhile
	}
	if got := pod.served.Load(); got != n {
		t.Errorf("the model server served %d of %d requests", got, n)
	}
	if got := strings.Count(p.Log(), "holds the proxy's own addresses"); got != 1 {
		t.Errorf("the proxy's own address in the answers told %d times, want once:\n%s", got, p.Log())
	}
	if got := strings.Count(p.Log(), "came back to this proxy"); got != 0 {
		t.Errorf("requests came back to the proxy: %d warnings", got)
	}

	dnsServer.Set()
	e2e.WaitFor(t, "no server left", 5*time.Second, func() bool {
		return scrapeAdmin(t, p.Admin).Value("itlproxy_upstream_endpoints") == 0
	})
	for range 5 {
		if code, took := send(); code != http.StatusServiceUnavailable || took > 200*time.Millisecond {
			t.Errorf("with no server: %d after %v, want 503 within 0.2s", code, took)
		}
	}
	dnsServer.Set(ips...)
	e2e.WaitFor(t, "the model server back", 5*time.Second, func() bool {
		return scrapeAdmin(t, p.Admin).Value("itlproxy_upstream_endpoints") == 1
	})
	if code, _ := send(); code != http.StatusOK {
		t.Errorf("once the name resolves again: %d", code)
	}
	if got := strings.Count(p.Log(), "resolves to no address"); got != 1 {
		t.Errorf("the outage told %d times, want once", got)
	}
	if got := strings.Count(p.Log(), "holds the proxy's own addresses"); got != 2 {
		t.Errorf("the proxy's own address told %d times in all, want twice: before the outage and after", got)
	}
}
