package main

import (
	"bufio"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/proxy"
)

// rssKiB reads the resident memory of a process, in KiB.
func rssKiB(t *testing.T, p *e2e.Process) int {
	t.Helper()
	proc, err := procfs.NewProc(p.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	status, err := proc.NewStatus()
	if err != nil {
		t.Fatal(err)
	}
	return int(status.VmRSS >> 10)
}

// TestSlowReaders: 1,000 clients open streams and read nothing while the
// upstream has megabytes for each. The proxy must not buffer the streams:
// backpressure reaches the upstream, and RSS stays bounded.
func TestSlowReaders(t *testing.T) {
	const clients = 1000
	const perStream = 4 << 20 // what the upstream would send to each
	event := "data: " + `{"choices":[{"delta":{"content":"` + strings.Repeat("x", 900) + `"}}]}` + "\n\n"
	upstream, total := floodingUpstream(t, event, perStream)
	p := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":       upstream,
		"ITLPROXY_CLIENT_SEND_BUFFER": "64KiB",
	})
	idle := rssKiB(t, p)

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// A prompt of a realistic size: the proxy reads it to find the model,
	// and must not keep it for the stream's life.
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 1000) + `"}]}`
	for range clients {
		c, err := net.Dial("tcp", p.Proxy)
		if err != nil {
			t.Fatal(err)
		}
		// A small receive buffer, so the backpressure is quick to show.
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		conns = append(conns, c)
	}
	// Wait until every stream has started and the upstream writers are
	// blocked: what each sent stops growing.
	var last int
	waitFor(t, "every stream to block on backpressure", 60*time.Second, func() bool {
		n, streams := total()
		stable := streams == clients && n == last
		last = n
		time.Sleep(300 * time.Millisecond)
		return stable
	})
	sent, _ := total()
	rss := rssKiB(t, p)
	perStreamKiB := float64(rss-idle) / clients
	t.Logf("%d slow readers: the upstream wrote %.0f KiB each (of %d KiB) before blocking; proxy RSS %d -> %d KiB, %.1f KiB per stream",
		clients, float64(sent)/clients/1024, perStream>>10, idle, rss, perStreamKiB)
	// Backpressure: every writer blocked long before the end of its 4 MiB,
	// with what it wrote parked in kernel socket buffers, not in the proxy.
	if sent > clients*perStream/4 {
		t.Errorf("the upstream wrote %d bytes: the proxy is not passing backpressure on", sent)
	}
	// What each blocked stream costs: measured at 77-88 KiB, most of it Go's
	// connection buffers, goroutine stacks and the collector's headroom.
	if perStreamKiB > 128 {
		t.Errorf("RSS grew %.1f KiB per slow stream, want at most 128", perStreamKiB)
	}
	// A reader that resumes gets its stream, intact, from where it was.
	// (Its 4 KiB receive window makes this slow: read a little of it.)
	br := bufio.NewReader(conns[0])
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first client: %v", err)
	}
	got := make([]byte, 100*len(event))
	if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != strings.Repeat(event, 100) {
		t.Errorf("the first client read %v: the events are not intact", err)
	}
}

// floodingUpstream serves streams of event repeated up to perStream bytes
// from a listener with small kernel send buffers, and returns its URL and
// a function that sums what it has written to its streams so far.
func floodingUpstream(t *testing.T, event string, perStream int) (url string, total func() (n, streams int)) {
	t.Helper()
	var upstreamSent sync.Map // bytes written per request, once blocked
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		sent := 0
		for sent < perStream {
			n, err := io.WriteString(w, event)
			sent += n
			if err != nil || rc.Flush() != nil {
				break
			}
			upstreamSent.Store(r, sent)
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Small kernel send buffers on both sides, so that what sockets park
	// stays small next to what the upstream has to send.
	upLn := proxy.Listener(ln, 16<<10)
	go func() { _ = up.Serve(upLn) }()
	t.Cleanup(func() { up.Close() })
	return "http://" + upLn.Addr().String(), func() (n, streams int) {
		upstreamSent.Range(func(_, v any) bool { n += v.(int); streams++; return true })
		return n, streams
	}
}

// TestSIGTERMWithStreamsInFlight: hundreds of streams, then SIGTERM.
// Readiness fails at once, new connections are accepted during the drain
// delay and refused after it, every stream in flight completes, exit 0.
func TestSIGTERMWithStreamsInFlight(t *testing.T) {
	// Streams of 3 s outlast the 2 s drain delay; the delay leaves room for
	// a busy machine (this test process, under -race, is the upstream and
	// 300 readers) between the signal and the checks made during it.
	const streams, tokens = 300, 60
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(20*ms, repeatDuration(50*ms, tokens-1)...)})
	defer up.Close()
	p := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":     up.URL,
		"ITLPROXY_SHUTDOWN_DELAY":   "2s",
		"ITLPROXY_SHUTDOWN_TIMEOUT": "30s",
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	started := make(chan struct{}, streams)
	results := make(chan error, streams)
	for i := range streams {
		go func() {
			resp, err := client.Post("http://"+p.Proxy+"/v1/chat/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"model":"m%d","stream":true}`, i%4)))
			if err != nil {
				started <- struct{}{}
				results <- err
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			_, err = br.ReadString('\n')
			started <- struct{}{}
			rest, err2 := io.ReadAll(br)
			switch {
			case err != nil || err2 != nil:
				results <- fmt.Errorf("%v %v", err, err2)
			case strings.Count(string(rest), `"content":"w`) != tokens || !strings.HasSuffix(string(rest), "data: [DONE]\n\n"):
				results <- fmt.Errorf("incomplete stream: %d tokens", strings.Count(string(rest), `"content":"w`))
			default:
				results <- nil
			}
		}()
	}
	for range streams {
		<-started
	}
	signaled := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	checkDrain(t, p.Admin, p.Proxy, signaled, 1500*time.Millisecond, 3*time.Second)
	failed := 0
	for range streams {
		if err := <-results; err != nil {
			failed++
			if failed <= 3 {
				t.Error(err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d streams in flight did not complete", failed, streams)
	}
	select {
	case <-p.Exited():
		if err := p.Err(); err != nil {
			t.Errorf("exit: %v\n%s", err, p.Log())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not exit")
	}
	t.Logf("%d streams completed after SIGTERM; exited %v after the signal", streams, time.Since(signaled).Round(time.Millisecond))
}

func repeatDuration(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// rawExchange writes request bytes on a new connection and returns the
// status line of the answer ("" when the connection closed without one)
// and how long it took.
func rawExchange(t *testing.T, addr string, write func(net.Conn)) (status string, took time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	write(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), time.Since(start)
}

// TestHostileClients: slowloris, oversized headers and request smuggling
// attempts against the real binary.
func TestHostileClients(t *testing.T) {
	upstreamSaw := make(chan string, 10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		upstreamSaw <- r.Method + " " + r.URL.Path + " " + string(b)
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	p := e2e.Start(t, map[string]string{
		"ITLPROXY_UPSTREAM_URL":        up.URL,
		"ITLPROXY_READ_HEADER_TIMEOUT": "500ms",
		"ITLPROXY_MAX_HEADER_BYTES":    "8KiB",
	})

	status, took := rawExchange(t, p.Proxy, func(c net.Conn) {
		_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
		for range 20 { // a header line every 100ms, never the end
			time.Sleep(100 * time.Millisecond)
			if _, err := io.WriteString(c, "X-Slow: a\r\n"); err != nil {
				return
			}
		}
	})
	if took > 1500*time.Millisecond {
		t.Errorf("slowloris: the connection was held %v (answer %q); the header timeout is 500ms", took, status)
	}

	status, _ = rawExchange(t, p.Proxy, func(c net.Conn) {
		fmt.Fprintf(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 16<<10))
	})
	if !strings.Contains(status, "431") {
		t.Errorf("oversized headers: %q, want 431", status)
	}

	for name, req := range map[string]string{
		"two different Content-Lengths":   "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 30\r\n\r\nabcd",
		"an obfuscated Transfer-Encoding": "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n",
	} {
		// 400, or 501 for a coding Go's server does not implement.
		status, _ := rawExchange(t, p.Proxy, func(c net.Conn) { _, _ = io.WriteString(c, req) })
		if !strings.HasPrefix(status, "HTTP/1.1 400") && !strings.HasPrefix(status, "HTTP/1.1 501") {
			t.Errorf("%s: %q, want a refusal", name, status)
		}
	}
	select {
	case saw := <-upstreamSaw:
		t.Errorf("a hostile request reached the upstream: %s", saw)
	default:
	}

	// Both Content-Length and Transfer-Encoding, a request hidden in what
	// the Content-Length counts as the body: served by the
	// Transfer-Encoding, then the connection closes, unread.
	c, err := net.Dial("tcp", p.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	all, _ := io.ReadAll(c)
	if n := strings.Count(string(all), "HTTP/1.1 "); n != 1 || !strings.HasPrefix(string(all), "HTTP/1.1 200") {
		t.Errorf("Content-Length and Transfer-Encoding: %d answers (%q), want one 200 and the connection closed", n, all)
	}
	if saw := <-upstreamSaw; saw != "POST /v1/chat/completions " {
		t.Errorf("the upstream saw %q, want the request read by its Transfer-Encoding", saw)
	}
	select {
	case saw := <-upstreamSaw:
		t.Errorf("a hidden request reached the upstream: %s", saw)
	default:
	}
}

// TestUpstreamCAFile: an https upstream with a private CA is reached with
// ITLPROXY_UPSTREAM_CA_FILE, refused (502) without it, and a bad file is a
// configuration error.
func TestUpstreamCAFile(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	defer up.Close()
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pemOf(up.Certificate().Raw), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want int
	}{
		{"with the CA", map[string]string{"ITLPROXY_UPSTREAM_CA_FILE": caFile}, http.StatusOK},
		{"without it", nil, http.StatusBadGateway},
		{"insecure", map[string]string{"ITLPROXY_UPSTREAM_INSECURE_SKIP_VERIFY": "true"}, http.StatusOK},
	} {
		in, code := postStatus(t, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL}, c.env)
		if code != c.want {
			t.Errorf("%s: %d, want %d", c.name, code, c.want)
		}
		if c.name == "insecure" && !strings.Contains(in.stderr.String(), "NOT verified") {
			t.Error("insecure mode was not logged")
		}
	}
	bad := filepath.Join(dir, "bad.pem")
	_ = os.WriteFile(bad, []byte("not a certificate"), 0o600)
	_, err := loadConfig(map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_UPSTREAM_CA_FILE": bad}, false)
	if err == nil || !strings.Contains(err.Error(), `ITLPROXY_UPSTREAM_CA_FILE="`+bad+`": no PEM certificate in it`) {
		t.Errorf("bad CA file: %v", err)
	}
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
