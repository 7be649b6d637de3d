package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/reload"
	"github.com/itlproxy/itlproxy/internal/e2e"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// heldUpstream streams five tokens 60ms apart; for model "held" it waits
// for release before the third.
type heldUpstream struct{ release chan struct{} }

func (u heldUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	send := eventWriter(w)
	for i := range heldTokens {
		switch {
		case i == 2 && bytes.Contains(body, []byte(`"held"`)):
			select {
			case <-u.release:
			case <-r.Context().Done():
				return
			}
		case i > 0:
			time.Sleep(60 * ms)
		}
		if !send(heldToken(i)) {
			return
		}
	}
	send("[DONE]")
}

const heldTokens = 5

func heldToken(i int) string {
	return fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":"w%d "}}]}`, i)
}

// heldBody is what the client must receive, byte for byte.
func heldBody() string {
	var b strings.Builder
	for i := range heldTokens {
		b.WriteString("data: " + heldToken(i) + "\n\n")
	}
	return b.String() + "data: [DONE]\n\n"
}

// streamThrough posts a streaming chat request for model and returns the
// status and body once the stream ends.
func streamThrough(t *testing.T, proxy, model string) (int, string, error) {
	resp, err := http.Post("http://"+proxy+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","stream":true}`))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestReloadSLOFile reloads the SLO file every way while a stream is in
// flight: the kubelet's ConfigMap swap (seen by the watcher), an edit
// put in effect by SIGHUP, an invalid edit refused by POST /-/reload, and
// a valid one put in effect by it. The stream in flight completes
// untouched and is judged against the objectives it started with; a
// stream started after the last reload against the new ones.
func TestReloadSLOFile(t *testing.T) {
	up := heldUpstream{release: make(chan struct{})}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	release := sync.OnceFunc(func() { close(up.release) })
	defer release() // before Close, which waits for the held stream
	vol := newConfigMapDir(t, map[string][]byte{"slo.yaml": []byte("default: {itl: 20ms}\n")})
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": upSrv.URL, "ITLPROXY_SLO_FILE": vol.path("slo.yaml"),
		"ITLPROXY_WEB_ENABLE_LIFECYCLE": "true"})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("itlproxy's log:\n%s", in.stderr)
		}
	})
	held := startHeldStream(t, in)
	startedAt := time.Now()

	vol.swap(map[string][]byte{"slo.yaml": []byte("default: {itl: 30ms}\nmodels:\n  fresh: {itl: 40ms}\nclasses:\n  batch: {ttft: 30s}\n")})
	waitITL(t, in, "the ConfigMap swap", "_other", 0.03)
	waitITL(t, in, "the ConfigMap swap", "fresh", 0.04)
	if n := len(in.scrape().Series("itlproxy_slo_objective_seconds", "class", "batch", "slo", "ttft")); n == 0 {
		t.Error("no objective of the new class batch")
	}

	vol.editUnseen("slo.yaml", []byte("default: {itl: 100ms}\n"))
	time.Sleep(3 * reload.SettleDelay)
	if got := itlObjective(in, "_other"); got != 0.03 {
		t.Fatalf("an edit the watcher cannot see was put in effect (itl %v): the SIGHUP step proves nothing", got)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitITL(t, in, "SIGHUP", "_other", 0.1)
	// fresh keeps its label, now on the default objective; the class
	// batch is gone, and so are its objectives.
	if got := itlObjective(in, "fresh"); got != 0.1 {
		t.Errorf("fresh's itl objective = %v, want the new default 0.1", got)
	}
	if n := len(in.scrape().Series("itlproxy_slo_objective_seconds", "class", "batch")); n != 0 {
		t.Errorf("%d objective series of the class the file no longer defines", n)
	}

	lastSuccess := checkRefusedSLOFile(t, in, vol)
	vol.editUnseen("slo.yaml", []byte("default: {itl: 200ms}\n"))
	if code, msg := postReload(t, in.admin); code != http.StatusOK {
		t.Errorf("POST /-/reload: %d %q", code, msg)
	}
	waitITL(t, in, "POST /-/reload", "_other", 0.2)
	fs := in.scrape()
	if got := fs.Value("itlproxy_config_last_reload_successful"); got != 1 {
		t.Errorf("last reload successful = %v, want 1", got)
	}
	if got := fs.Value("itlproxy_config_last_reload_success_timestamp_seconds"); got <= lastSuccess {
		t.Errorf("last success time %v, not after %v", got, lastSuccess)
	}
	for _, trigger := range []string{`"trigger":"file change"`, `"trigger":"SIGHUP"`, `"trigger":"http"`} {
		if !strings.Contains(in.stderr.String(), trigger) {
			t.Errorf("no reload logged with %s", trigger)
		}
	}

	// The held gap must be over the last objective, whatever objectives
	// judge it.
	time.Sleep(300*ms - time.Since(startedAt))
	release()
	checkJudgedByTheirStart(t, in, held)
}

// heldResult is how a stream through the proxy ended.
type heldResult struct {
	code int
	body string
	err  error
}

// startHeldStream starts a stream of model held and waits until the proxy
// counts it in flight.
func startHeldStream(t *testing.T, in *instance) <-chan heldResult {
	t.Helper()
	held := make(chan heldResult, 1)
	go func() {
		code, body, err := streamThrough(t, in.proxy, "held")
		held <- heldResult{code, body, err}
	}()
	waitFor(t, "the held stream to start", 5*time.Second, func() bool {
		return in.scrape().Value("itlproxy_active_streams") == 1
	})
	return held
}

// itlObjective returns the itl objective of model in the default class,
// or -1 unless there is exactly one such series.
func itlObjective(in *instance, model string) float64 {
	s := in.scrape().Series("itlproxy_slo_objective_seconds", "model", model, "class", "default", "slo", "itl")
	if len(s) != 1 {
		return -1
	}
	return s[0].GetGauge().GetValue()
}

func waitITL(t *testing.T, in *instance, how, model string, want float64) {
	t.Helper()
	waitFor(t, how+" to put itl "+fmt.Sprint(want)+" in effect for "+model, 5*time.Second, func() bool {
		return itlObjective(in, model) == want
	})
}

// checkRefusedSLOFile writes an invalid SLO file and expects POST
// /-/reload to refuse it with its file:line:column, the log to say the
// same, the objectives in use to stay and the reload metric to show it.
// It returns the last success's time.
func checkRefusedSLOFile(t *testing.T, in *instance, vol *configMapDir) float64 {
	t.Helper()
	before := itlObjective(in, "_other")
	vol.editUnseen("slo.yaml", []byte("default: {itl: 150ms}\nmodels:\n  x: {itl: soon}\n"))
	code, msg := postReload(t, in.admin)
	wantProblem := vol.path("slo.yaml") + `:3:12: models["x"].itl: "soon" is not a duration (e.g. 40ms, 1.5s)`
	if code != http.StatusInternalServerError || !strings.Contains(msg, wantProblem) {
		t.Errorf("POST /-/reload of an invalid file: %d %q, want 500 with %q", code, msg, wantProblem)
	}
	if !strings.Contains(in.stderr.String(), strings.ReplaceAll(wantProblem, `"`, `\"`)) {
		t.Errorf("the refused file's problem is not logged:\n%s", in.stderr)
	}
	fs := in.scrape()
	if got := fs.Value("itlproxy_config_last_reload_successful"); got != 0 {
		t.Errorf("last reload successful = %v after a refused file, want 0", got)
	}
	if got := itlObjective(in, "_other"); got != before {
		t.Errorf("itl %v after a refused file, want %v still", got, before)
	}
	return fs.Value("itlproxy_config_last_reload_success_timestamp_seconds")
}

// checkJudgedByTheirStart expects the held stream, in flight across the
// reloads, and one started after them to complete untouched, each judged
// against the objectives in effect when it started: the held one's four
// 60ms gaps against 20ms (all breach), the later one's against 200ms
// (none does).
func checkJudgedByTheirStart(t *testing.T, in *instance, held <-chan heldResult) {
	t.Helper()
	r := <-held
	if r.err != nil || r.code != http.StatusOK || r.body != heldBody() {
		t.Fatalf("the stream in flight across the reloads: %d %v\n%q\nwant\n%q", r.code, r.err, r.body, heldBody())
	}
	if code, body, err := streamThrough(t, in.proxy, "after"); err != nil || code != http.StatusOK || body != heldBody() {
		t.Fatalf("a stream after the reloads: %d %v %q", code, err, body)
	}
	waitFor(t, "both streams to be recorded", 5*time.Second, func() bool {
		return in.scrape().Value("itlproxy_streams_total") == 2
	})
	fs := in.scrape()
	if got := fs.Value("itlproxy_slo_breaches_total", "slo", "itl"); got != heldTokens-1 {
		t.Errorf("ITL breaches = %v, want %d: the held stream's four gaps over its 20ms", got, heldTokens-1)
	}
	if got := fs.Value("itlproxy_slo_observations_total", "slo", "itl"); got != 2*(heldTokens-1) {
		t.Errorf("ITL observations = %v, want %d", got, 2*(heldTokens-1))
	}
}

func postReload(t *testing.T, admin string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+admin+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestSIGHUPToTheBinary: the built binary, as main runs it, reloads on
// SIGHUP instead of dying of it, and still shuts down cleanly on SIGTERM.
func TestSIGHUPToTheBinary(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	vol := newConfigMapDir(t, map[string][]byte{"slo.yaml": []byte("default: {ttft: 1s}\n")})
	p := e2e.Start(t, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_SLO_FILE": vol.path("slo.yaml")})
	objective := func() float64 {
		resp, err := http.Get("http://" + p.Admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		fs, err := scrape.Parse(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return fs.Value("itlproxy_slo_objective_seconds", "model", "_other", "slo", "ttft")
	}
	vol.editUnseen("slo.yaml", []byte("default: {ttft: 2s}\n"))
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGHUP to put the new objective in effect", 10*time.Second, func() bool { return objective() == 2 })
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
		if err := p.Err(); err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, p.Log())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no exit 10s after SIGTERM\n%s", p.Log())
	}
}
