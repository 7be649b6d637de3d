package validate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/itlproxy/itlproxy/internal/testenv"
)

// vllmMetrics is where the vLLM example's preStop hook reads vLLM's load.
const vllmMetrics = "http://127.0.0.1:8000/metrics"

// TestVLLMDrainHook runs the vLLM example's preStop hook, as rendered,
// against a stand-in for vLLM's /metrics: the hook must hold vLLM's SIGTERM
// back while requests run or wait, and let it go once none do, or at once
// when vLLM no longer answers.
func TestVLLMDrainHook(t *testing.T) {
	// The vLLM preStop hook is a Python script; the machine image and CI
	// have python3.
	python := testenv.LookPath(t, "python3", "`apt-get install python3`")
	r := render(t, filepath.Join(kubernetesDir, "examples", "vllm"))
	var hook []string
	for _, d := range r.deployments {
		i := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "vllm" })
		if i >= 0 {
			if h := d.Spec.Template.Spec.Containers[i].Lifecycle; h != nil && h.PreStop != nil && h.PreStop.Exec != nil {
				hook = h.PreStop.Exec.Command
			}
		}
	}
	if len(hook) != 3 || hook[0] != "python3" || hook[1] != "-c" || !strings.Contains(hook[2], vllmMetrics) {
		t.Fatalf("vLLM preStop hook %q: want python3 -c and a script reading %s", hook, vllmMetrics)
	}
	// run runs the hook against metrics and returns how long it took.
	run := func(t *testing.T, metrics string) time.Duration {
		start := time.Now()
		out, err := exec.Command(python, "-c", strings.ReplaceAll(hook[2], vllmMetrics, metrics)).CombinedOutput()
		if err != nil {
			t.Fatalf("preStop hook: %v\n%s", err, out)
		}
		return time.Since(start)
	}

	t.Run("waits for requests", func(t *testing.T) {
		t.Parallel()
		// Busy at the first two polls (one running, then two waiting), idle
		// from the third.
		var polls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			running, waiting := 0, 0
			switch polls.Add(1) {
			case 1:
				running = 1
			case 2:
				waiting = 2
			}
			fmt.Fprintf(w, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"+
				"# TYPE vllm:num_requests_running gauge\n"+
				"vllm:num_requests_running{engine=\"0\",model_name=\"Qwen/Qwen2.5-1.5B-Instruct\"} %d.0\n"+
				"# TYPE vllm:num_requests_waiting gauge\n"+
				"vllm:num_requests_waiting{engine=\"0\",model_name=\"Qwen/Qwen2.5-1.5B-Instruct\"} %d.0\n"+
				"# TYPE vllm:num_preemptions_total counter\n"+
				"vllm:num_preemptions_total{engine=\"0\",model_name=\"Qwen/Qwen2.5-1.5B-Instruct\"} 7.0\n",
				running, waiting)
		}))
		defer srv.Close()
		took := run(t, srv.URL+"/metrics")
		if n := polls.Load(); n != 3 {
			t.Errorf("the hook read the metrics %d times, want 3 (until nothing runs or waits)", n)
		}
		// 5s for the endpoints, then two 2s waits while busy.
		if took < 9*time.Second || took > 30*time.Second {
			t.Errorf("the hook took %s, want about 9s", took)
		}
	})

	t.Run("vLLM gone", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close() // nothing listens there any more
		if took := run(t, url+"/metrics"); took > 15*time.Second {
			t.Errorf("the hook took %s with vLLM gone, want about 5s", took)
		}
	})
}
