package prometheus_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/internal/testenv"
)

// starve runs hogs busy loops pinned to cpu, each a process of its own,
// until the test ends: the CPU a proxy pinned there shares with them, as
// a contended node's or a CPU limit's.
func starve(t *testing.T, cpu string, hogs int) {
	t.Helper()
	taskset := testenv.LookPath(t, "taskset", "util-linux's taskset: apt-get install util-linux")
	ctx, cancel := context.WithCancel(context.Background())
	var cmds []*exec.Cmd
	t.Cleanup(func() {
		cancel()
		for _, cmd := range cmds {
			_ = cmd.Wait()
		}
	})
	for range hogs {
		cmd := exec.CommandContext(ctx, taskset, "-c", cpu, "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
}

// burstUpstream streams chat completions whose tokens all streams send at
// the same instants, every gap: a proxy in front of it gets each token of
// every stream at once, and its goroutines all become ready together.
type burstUpstream struct {
	gap    time.Duration
	tokens int

	once sync.Once
	mu   sync.Mutex
	tick chan struct{} // closed at each instant, then replaced
}

func (u *burstUpstream) next() <-chan struct{} {
	u.once.Do(func() {
		u.tick = make(chan struct{})
		go func() {
			for range time.Tick(u.gap) {
				u.mu.Lock()
				close(u.tick)
				u.tick = make(chan struct{})
				u.mu.Unlock()
			}
		}()
	})
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.tick
}

func (u *burstUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for range u.tokens {
		select {
		case <-u.next():
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"t"}}]}`+"\n\n")
		_ = rc.Flush()
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// TestAddsDelayAlertInRealPrometheus runs two proxies: one pinned to a
// CPU it shares with busy loops, in front of an upstream whose streams
// all send their tokens at once (each burst must wait for the CPU), and
// one with the machine to itself and a light load. In a real Prometheus
// loading rules.yaml, the alert on what a proxy adds holds for the
// starved one only.
func TestAddsDelayAlertInRealPrometheus(t *testing.T) {
	taskset := testenv.LookPath(t, "taskset", "util-linux's taskset: apt-get install util-linux")
	bursts := httptest.NewServer(&burstUpstream{gap: 20 * ms, tokens: 50})
	defer bursts.Close()
	light := httptest.NewServer(&e2e.Upstream{Models: map[string]e2e.Model{
		"m": {TTFT: 20 * ms, Tokens: 40, Gap: e2e.Uniform(5*ms, 10*ms)},
	}})
	defer light.Close()
	starved := exec.Command(taskset, "-c", "0", e2e.Build(t))
	starved.Env = []string{"ITLPROXY_UPSTREAM_URL=" + bursts.URL, "ITLPROXY_LISTEN_ADDR=127.0.0.1:0", "ITLPROXY_ADMIN_ADDR=127.0.0.1:0"}
	slow := e2e.Run(t, starved)
	free := e2e.Start(t, map[string]string{"ITLPROXY_UPSTREAM_URL": light.URL})
	starve(t, "0", 4)
	prom := e2e.StartPrometheusScraping(t, fmt.Sprintf(`  - job_name: itlproxy
    static_configs:
      - targets: [%q, %q]
`, slow.Admin, free.Admin), "rules.yaml")

	done := make(chan struct{})
	go func() {
		defer close(done)
		e2e.Load(t, slow.Proxy, 20*time.Second, e2e.Streams(200, "m")...)
	}()
	e2e.Load(t, free.Proxy, 20*time.Second, e2e.Streams(4, "m")...)
	<-done

	var held bool
	defer func() {
		if !held {
			logQuantiles(t, prom)
		}
	}()
	e2e.WaitFor(t, "the alert on what the proxy adds to hold for the starved proxy", 30*time.Second, func() bool {
		for _, a := range prom.Alerts() {
			if a.Labels["alertname"] == "ItlproxyAddsDelay" && a.Labels["instance"] == slow.Admin {
				held = true
			}
		}
		return held
	})
	for _, a := range prom.Alerts() {
		if a.Labels["alertname"] == "ItlproxyAddsDelay" && a.Labels["instance"] != slow.Admin {
			t.Errorf("the alert holds for %s, which has CPU to spare (%s)", a.Labels["instance"], a.State)
		}
	}
	if testing.Verbose() || t.Failed() {
		logQuantiles(t, prom)
	}
}

// logQuantiles logs what each proxy adds, as the recording rules say.
func logQuantiles(t *testing.T, prom *e2e.Prometheus) {
	t.Helper()
	for _, q := range []string{
		"instance:itlproxy_event_delay_seconds:p99_rate5m",
		"instance:itlproxy_scheduler_latency_seconds:p99_rate5m",
		"instance:itlproxy_client_write_seconds:p99_rate5m",
		"instance:itlproxy_request_forward_seconds:p99_rate5m",
	} {
		for _, s := range prom.Query(q) {
			t.Logf("%s{instance=%q} = %v", q, s.Metric["instance"], s.Value[1])
		}
	}
}
