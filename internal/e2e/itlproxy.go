package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/testenv"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// Build builds cmd/itlproxy once per test binary and returns its path.
func Build(t testing.TB) string {
	t.Helper()
	goTool := testenv.Go(t)
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "itlproxy-test-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "itlproxy")
		out, err := exec.Command(goTool, "build", "-o", binary, "github.com/itlproxy/itlproxy/cmd/itlproxy").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// Process is an itlproxy process serving on loopback.
type Process struct {
	Cmd          *exec.Cmd
	Proxy, Admin string // the addresses its listeners bound

	mu     sync.Mutex
	log    strings.Builder // what it wrote to stderr so far
	exited chan struct{}
	err    error // how it exited, once exited is closed
}

// Start runs the binary Build makes with environ as its whole environment,
// listening on ports the system picks, and waits until it is ready.
func Start(t testing.TB, environ map[string]string) *Process {
	t.Helper()
	cmd := exec.Command(Build(t))
	cmd.Env = []string{"ITLPROXY_LISTEN_ADDR=127.0.0.1:0", "ITLPROXY_ADMIN_ADDR=127.0.0.1:0"}
	for k, v := range environ {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return Run(t, cmd)
}

// Run starts cmd, an itlproxy command whose environment makes it listen on
// ports the system picks, reads the bound addresses from its start-up log
// line, and waits until /readyz answers 200. The process is killed when
// the test ends.
func Run(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{Cmd: cmd, exited: make(chan struct{})}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr) // past a line too long to scan
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for !p.ready() {
		select {
		case <-p.exited:
			t.Fatalf("%s exited: %v\n%s", cmd.Path, p.err, p.Log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 30s\n%s", cmd.Path, p.Log())
		}
	}
	return p
}

func (p *Process) ready() bool {
	if p.Admin == "" {
		p.Proxy, p.Admin = StartedAddrs(p.Log())
		if p.Admin == "" {
			return false
		}
	}
	resp, err := http.Get("http://" + p.Admin + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Log returns what the process has written to stderr so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Exited is closed when the process has exited; Err then says how.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit error (nil for status 0), once Exited is
// closed.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// StartedAddrs reads the listen addresses from itlproxy's start-up log
// line, in log.
func StartedAddrs(log string) (proxy, admin string) {
	for line := range strings.Lines(log) {
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

// FreeAddr returns a loopback address nothing listens on, with a port
// below the kernel's ephemeral range, so that no outgoing connection of a
// concurrent test takes it before it is used.
func FreeAddr(t testing.TB) string {
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

// WaitFor polls cond every 10ms until it holds, and fails t if it does not
// within limit.
func WaitFor(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
