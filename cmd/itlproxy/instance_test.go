package main

import (
	"context"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/cmdtest"
	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// TestMain lets a test run the real main in a child process
// (cmdtest.RunMain), to check exit statuses from outside.
func TestMain(m *testing.M) { cmdtest.Main(m, main) }

// lockedBuffer is an io.Writer safe to read while run writes to it.
type lockedBuffer = cmdtest.LockedBuffer

// What the command's tests share with the end-to-end tests.
var (
	freeAddr     = e2e.FreeAddr
	waitFor      = e2e.WaitFor
	startedAddrs = e2e.StartedAddrs
)

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
	return startAdmin(t, args, environ, "http", http.DefaultClient)
}

// startAdmin is start with an admin listener that client reaches with
// scheme: https when the web configuration file sets a certificate.
func startAdmin(t *testing.T, args []string, environ map[string]string, scheme string, client *http.Client) *instance {
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
		resp, err := client.Get(scheme + "://" + in.admin + "/readyz")
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

// scrape reads /metrics as Prometheus does.
func (in *instance) scrape() scrape.Families {
	in.t.Helper()
	return scrapeAdmin(in.t, in.admin)
}

// scrapeAdmin reads the /metrics of the itlproxy whose admin listener is
// at admin, as Prometheus does.
func scrapeAdmin(t *testing.T, admin string) scrape.Families {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	fs, err := scrape.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// checkDrain follows a shutdown signaled at signaled: /readyz on admin
// fails within a second; while less than open has passed since the
// signal (inside the drain delay), proxy still accepts a new connection;
// within refuseWithin, it refuses them.
func checkDrain(t *testing.T, admin, proxy string, signaled time.Time, open, refuseWithin time.Duration) {
	t.Helper()
	waitFor(t, "readiness to fail", time.Second, func() bool {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	if time.Since(signaled) < open {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Errorf("a new connection was refused during the drain delay: %v", err)
		} else {
			c.Close()
		}
	}
	waitFor(t, "new connections to be refused after the delay", refuseWithin, func() bool {
		c, err := net.Dial("tcp", proxy)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}

// postStatus starts itlproxy with base and extra (extra wins), posts a chat
// request through it, and returns the instance and the response's status.
func postStatus(t *testing.T, base, extra map[string]string) (*instance, int) {
	t.Helper()
	env := maps.Clone(base)
	maps.Copy(env, extra)
	in := start(t, nil, env)
	resp, err := http.Post("http://"+in.proxy+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return in, resp.StatusCode
}
