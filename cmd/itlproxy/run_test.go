package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/itlproxy/itlproxy/metrics/metricstest"
)

// TestMain lets a test run the real main in a child process, to check exit
// statuses from outside.
func TestMain(m *testing.M) {
	if os.Getenv("ITLPROXY_TEST_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// freeAddr returns a loopback address nothing listens on, with a port
// below the kernel's ephemeral range, so that no outgoing connection of a
// concurrent test takes it before it is used.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(10000))
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr
		}
	}
	t.Fatal("no free port")
	return ""
}

// instance is run() serving in the background.
type instance struct {
	t              *testing.T
	proxy, admin   string
	stdout, stderr *lockedBuffer
	stop           context.CancelFunc // the signal
	finished       chan struct{}      // closed when run has returned err
	err            error
}

// wait waits for run to return and returns its error.
func (in *instance) wait(limit time.Duration) error {
	in.t.Helper()
	select {
	case <-in.finished:
		return in.err
	case <-time.After(limit):
		in.t.Fatalf("itlproxy did not stop within %v", limit)
		return nil
	}
}

// start runs itlproxy with args and environ, listening on ports the
// system picks, reads the bound addresses from its start-up log line, and
// waits until /readyz answers.
func start(t *testing.T, args []string, environ map[string]string) *instance {
	t.Helper()
	in := &instance{t: t, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, finished: make(chan struct{})}
	env := map[string]string{"ITLPROXY_LISTEN_ADDR": "127.0.0.1:0", "ITLPROXY_ADMIN_ADDR": "127.0.0.1:0"}
	for k, v := range environ {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.stop = cancel
	go func() {
		in.err = run(ctx, args, env, in.stdout, in.stderr)
		close(in.finished)
	}()
	t.Cleanup(func() {
		cancel()
		in.wait(10 * time.Second)
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if in.admin == "" {
			in.proxy, in.admin = startedAddrs(in.stderr.String())
		}
		resp, err := http.Get("http://" + in.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return in
			}
		}
		select {
		case <-in.finished:
			t.Fatalf("itlproxy exited: %v\n%s", in.err, in.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("itlproxy not ready after 10s\n%s", in.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startedAddrs reads the listen addresses from the start-up log line.
func startedAddrs(log string) (proxy, admin string) {
	for _, line := range strings.Split(log, "\n") {
		var entry struct {
			Msg       string `json:"msg"`
			ProxyAddr string `json:"proxy_addr"`
			AdminAddr string `json:"admin_addr"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "itlproxy started" {
			return entry.ProxyAddr, entry.AdminAddr
		}
	}
	return "", ""
}

// scrape reads /metrics as Prometheus does.
func (in *instance) scrape() metricstest.Families {
	in.t.Helper()
	resp, err := http.Get("http://" + in.admin + "/metrics")
	if err != nil {
		in.t.Fatal(err)
	}
	defer resp.Body.Close()
	families, err := metricstest.Parse(resp.Body)
	if err != nil {
		in.t.Fatal(err)
	}
	return families
}

// scheduledUpstream streams, for each model, a role chunk, then tokens
// after the TTFT and gaps its schedule gives, then usage and [DONE].
type scheduledUpstream struct {
	schedule func(model string) (ttft time.Duration, gaps []time.Duration)
}

// randomSchedule gives each model "mN" its own TTFT and jittered gaps,
// drawn from N, for the given number of tokens.
func randomSchedule(tokens int) func(string) (time.Duration, []time.Duration) {
	return func(model string) (time.Duration, []time.Duration) {
		var n uint64
		fmt.Sscanf(model, "m%d", &n)
		rng := rand.New(rand.NewPCG(n, 99))
		ttft := time.Duration(60+rng.IntN(120)) * time.Millisecond
		gaps := make([]time.Duration, tokens-1)
		for i := range gaps {
			gaps[i] = time.Duration(2+rng.IntN(40)) * time.Millisecond
		}
		return ttft, gaps
	}
}

func (u scheduledUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var model string
	if i := bytes.Index(body, []byte(`"model":"`)); i >= 0 {
		rest := body[i+len(`"model":"`):]
		model = string(rest[:bytes.IndexByte(rest, '"')])
	}
	ttft, gaps := u.schedule(model)
	tokens := len(gaps) + 1
	f := formatFor(r.URL.Path, model)
	send := rawEventWriter(w)
	for _, ev := range f.start {
		if !send(ev) {
			return
		}
	}
	wait := ttft
	for i := range tokens {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(wait):
		}
		if !send(f.token(i)) {
			return
		}
		if i < len(gaps) {
			wait = gaps[i]
		}
	}
	for _, ev := range f.end(tokens) {
		send(ev)
	}
}

// streamFormat is how an API's stream says the same thing: events before
// the first token, each token ("w<i> "), the events after the last.
type streamFormat struct {
	start []string
	token func(i int) string
	end   func(tokens int) []string
}

// formatFor returns the stream format of the API at path, each event as
// its lines (without the blank line that ends it); the Responses and
// Messages APIs name their events.
func formatFor(path, model string) streamFormat {
	switch path {
	case "/v1/responses":
		return streamFormat{
			start: []string{named("response.created", `{"type":"response.created","response":{"id":"r","status":"in_progress","usage":null}}`)},
			token: func(i int) string {
				return named("response.output_text.delta", fmt.Sprintf(`{"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":"w%d "}`, i))
			},
			end: func(n int) []string {
				return []string{named("response.completed", fmt.Sprintf(`{"type":"response.completed","response":{"id":"r","status":"completed","usage":{"input_tokens":5,"output_tokens":%d,"total_tokens":%d}}}`, n, n+5))}
			},
		}
	case "/v1/messages":
		return streamFormat{
			start: []string{
				named("message_start", `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"`+model+`","usage":{"input_tokens":5,"output_tokens":1}}}`),
				named("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
				named("ping", `{"type":"ping"}`),
			},
			token: func(i int) string {
				return named("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"w%d "}}`, i))
			},
			end: func(n int) []string {
				return []string{named("content_block_stop", `{"type":"content_block_stop","index":0}`),
					named("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":%d}}`, n)),
					named("message_stop", `{"type":"message_stop"}`)}
			},
		}
	}
	head := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"` + model + `",`
	return streamFormat{
		start: []string{head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`},
		token: func(i int) string {
			return head + fmt.Sprintf(`"choices":[{"index":0,"delta":{"content":"w%d "}}]}`, i)
		},
		end: func(n int) []string {
			return []string{head + `"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
				head + fmt.Sprintf(`"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}`, n, n+5),
				"data: [DONE]"}
		},
	}
}

// agreeWithClientClock checks what /metrics says of one stream against
// what the client saw on its own clock: TTFT and ITL counts exact, their
// sums within 2% and 3 ms, output tokens from the usage.
func agreeWithClientClock(t *testing.T, families metricstest.Families, cs clientStream, endpoint string, tokens int) {
	t.Helper()
	clientTTFT := cs.arrivals[0].Sub(cs.sent).Seconds()
	clientITL := cs.arrivals[len(cs.arrivals)-1].Sub(cs.arrivals[0]).Seconds()
	n, proxyTTFT := families.Histogram("itlproxy_time_to_first_token_seconds", "model", cs.model, "endpoint", endpoint)
	if n != 1 {
		t.Errorf("%s: TTFT count %d, want 1", cs.model, n)
	}
	n, proxyITL := families.Histogram("itlproxy_inter_token_latency_seconds", "model", cs.model, "endpoint", endpoint)
	if n != uint64(tokens-1) {
		t.Errorf("%s: ITL count %d, want %d", cs.model, n, tokens-1)
	}
	for _, c := range []struct {
		what          string
		proxy, client float64
	}{{"TTFT", proxyTTFT, clientTTFT}, {"ITL sum", proxyITL, clientITL}} {
		diff := math.Abs(c.proxy - c.client)
		t.Logf("%s %s %s: proxy %.2fms, client %.2fms", endpoint, cs.model, c.what, c.proxy*1000, c.client*1000)
		if diff > 0.003 || diff > 0.02*c.client {
			t.Errorf("%s %s %s: proxy %.2fms vs client %.2fms: off by %.2fms, want within 2%% and 3ms",
				endpoint, cs.model, c.what, c.proxy*1000, c.client*1000, diff*1000)
		}
	}
	if v := families.Value("itlproxy_output_tokens_total", "model", cs.model, "endpoint", endpoint); v != float64(tokens) {
		t.Errorf("%s: output tokens %v, want %d", cs.model, v, tokens)
	}
}

// named returns the lines of an event with a name.
func named(name, data string) string { return "event: " + name + "\ndata: " + data }

// rawEventWriter starts an event stream on w and returns a function that
// sends one event, given its lines, and flushes it, reporting whether the
// client is still there.
func rawEventWriter(w http.ResponseWriter) func(lines string) bool {
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	return func(lines string) bool {
		_, err := io.WriteString(w, lines+"\n\n")
		return err == nil && rc.Flush() == nil
	}
}

// eventWriter is rawEventWriter for events that are one data line.
func eventWriter(w http.ResponseWriter) func(data string) bool {
	send := rawEventWriter(w)
	return func(data string) bool { return send("data: " + data) }
}

// clientStream is what the client saw of one stream, on its own clock.
type clientStream struct {
	model       string
	sent        time.Time   // the request was written to the connection
	arrivals    []time.Time // when each event carrying content arrived
	content     string      // the content the SDK decoded
	err         error
	totalTokens int64
}

// arrivalClock is the client's own clock: a transport that stamps each
// event carrying content as its bytes arrive, before the SDK decodes it,
// so that the SDK's decoding time does not count as latency.
type arrivalClock struct {
	mu      sync.Mutex
	streams map[string]*clientStream // by model
}

func (c *arrivalClock) RoundTrip(r *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	c.mu.Lock()
	cs := &clientStream{} // a request of no interest, stamped anyway
	for model, s := range c.streams {
		if bytes.Contains(body, []byte(`"model":"`+model+`"`)) {
			cs = s
		}
	}
	c.mu.Unlock()
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { cs.sent = time.Now() },
	}))
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &stampingBody{ReadCloser: resp.Body, cs: cs}
	}
	return resp, err
}

// tokenEvent matches the token events of formatFor, in any API.
var tokenEvent = regexp.MustCompile(`"(content|delta|text)":"w\d`)

type stampingBody struct {
	io.ReadCloser
	cs      *clientStream
	pending []byte
}

func (b *stampingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	now := time.Now()
	b.pending = append(b.pending, p[:n]...)
	for {
		i := bytes.Index(b.pending, []byte("\n\n"))
		if i < 0 {
			break
		}
		if tokenEvent.Match(b.pending[:i]) {
			b.cs.arrivals = append(b.cs.arrivals, now)
		}
		b.pending = b.pending[i+2:]
	}
	return n, err
}

// TestEndToEndAgainstClientClock drives the real binary's run() with the
// official OpenAI Go client and checks what /metrics says against the
// client's own clock: counts exact, TTFT and ITL sums per stream within 2%
// and 3 ms.
func TestEndToEndAgainstClientClock(t *testing.T) {
	const streams, tokens = 8, 40
	up := httptest.NewServer(scheduledUpstream{randomSchedule(tokens)})
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL})

	client, results := clockedOpenAIClient(in, streams)
	staggered(results, func(cs *clientStream) {
		stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model:         cs.model,
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("count to forty")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		for stream.Next() {
			chunk := stream.Current()
			if len(chunk.Choices) > 0 {
				cs.content += chunk.Choices[0].Delta.Content
			}
			if chunk.Usage.CompletionTokens > 0 {
				cs.totalTokens = chunk.Usage.CompletionTokens
			}
		}
		cs.err = stream.Err()
	})

	var wantContent strings.Builder
	for i := range tokens {
		fmt.Fprintf(&wantContent, "w%d ", i)
	}
	// The proxy records a stream as its handler returns, which can be just
	// after the client has read the end: wait for all of them.
	var families metricstest.Families
	waitFor(t, "every stream to be recorded", 5*time.Second, func() bool {
		families = in.scrape()
		return families.Value("itlproxy_streams_total") == streams+1
	})
	for _, cs := range results {
		if cs.err != nil || cs.content != wantContent.String() || cs.totalTokens != tokens || len(cs.arrivals) != tokens {
			t.Errorf("%s: client got %q (%v), usage %d, %d stamped", cs.model, cs.content, cs.err, cs.totalTokens, len(cs.arrivals))
			continue
		}
		agreeWithClientClock(t, families, cs, "chat_completions", tokens)
		if v := families.Value("itlproxy_streams_total", "model", cs.model, "outcome", "completed"); v != 1 {
			t.Errorf("%s: completed streams %v, want 1", cs.model, v)
		}
	}
	if strings.Contains(in.stderr.String(), "sk-test") {
		t.Error("the API key reached the log")
	}
}

// TestDemoExportsITL runs the README's demo command and expects ITL samples
// on /metrics within seconds, and the table on stdout.
func TestDemoExportsITL(t *testing.T) {
	in := start(t, []string{"demo"}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, _ := in.scrape().Histogram("itlproxy_inter_token_latency_seconds")
		if n > 0 {
			t.Logf("%d ITL samples after %v", n, 5*time.Second-time.Until(deadline))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ITL samples after 5s\n%s", in.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	deadline = time.Now().Add(demoTableEvery + 3*time.Second)
	for !strings.Contains(in.stdout.String(), "ITL p50") {
		if time.Now().After(deadline) {
			t.Fatalf("no table on stdout:\n%s", in.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range demoModels {
		if !strings.Contains(in.stdout.String(), m.Name) {
			t.Errorf("table does not show %s:\n%s", m.Name, in.stdout)
		}
	}
	in.stop()
	if err := in.wait(10 * time.Second); err != nil {
		t.Errorf("demo ended with %v", err)
	}
}

// TestGracefulShutdown: on the signal, readiness fails at once, the proxy
// keeps accepting for the delay, then refuses new connections, while a
// stream in flight runs to its end.
func TestGracefulShutdown(t *testing.T) {
	up := httptest.NewServer(scheduledUpstream{randomSchedule(25)})
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
	waitFor(t, "readiness to fail", time.Second, func() bool {
		r, err := http.Get("http://" + in.admin + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusServiceUnavailable
	})
	if time.Since(signaled) < 300*time.Millisecond {
		// Still inside the delay: new connections are served.
		c, err := net.Dial("tcp", in.proxy)
		if err != nil {
			t.Errorf("new connection refused during the shutdown delay: %v", err)
		} else {
			c.Close()
		}
	}
	waitFor(t, "new connections to be refused", 2*time.Second, func() bool {
		c, err := net.Dial("tcp", in.proxy)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
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
	up := httptest.NewServer(scheduledUpstream{randomSchedule(500)})
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

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNoSecretsInLogs plants credentials, a prompt and a completion, logs
// at debug level through successful and failing requests, and greps the
// whole log for them.
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
		in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": upstream, "ITLPROXY_LOG_LEVEL": "debug"})
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
		{"unknown command", []string{"serve"}, nil, 2, `unknown argument "serve"`},
		{"help", []string{"-h"}, nil, 0, "ITLPROXY_UPSTREAM_URL"},
		{"version", []string{"version"}, nil, 0, "itlproxy dev"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], c.args...)
			cmd.Env = append(os.Environ(), "ITLPROXY_TEST_RUN_MAIN=1",
				"ITLPROXY_LISTEN_ADDR="+proxyAddr, "ITLPROXY_ADMIN_ADDR="+adminAddr)
			cmd.Env = append(cmd.Env, c.env...)
			out, err := cmd.CombinedOutput()
			status := 0
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				status = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != c.status || !strings.Contains(string(out), c.output) {
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
