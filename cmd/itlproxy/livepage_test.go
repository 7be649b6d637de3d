package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/itlproxy/itlproxy/internal/testenv"
)

// chromiumDOM loads url in headless Chromium and returns the DOM it
// rendered; it saves a screenshot of the page as a test artifact, in
// $ITLPROXY_TEST_ARTIFACTS when set (CI keeps it), else in a temporary
// directory.
func chromiumDOM(t *testing.T, url string) string {
	t.Helper()
	bin := testenv.LookPath(t, "chromium", "sudo apt-get install -y chromium")
	profile := t.TempDir()
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + profile}
	chromium := func(args ...string) []byte {
		cmd := exec.Command(bin, append(flags, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}
	dom := string(chromium("--dump-dom", url))
	dir := os.Getenv("ITLPROXY_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "livepage.png")
	chromium("--window-size=1280,1600", "--screenshot="+shot, url)
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Errorf("no screenshot at %s: %v", shot, err)
	} else {
		t.Logf("screenshot: %s (%d bytes)", shot, fi.Size())
	}
	return dom
}

// TestLivePageInChromium loads the live page of a proxy under load in a
// real browser: each model's row, the slow stream the test injects and
// its stall mark at the right gap must be in the DOM Chromium rendered.
func TestLivePageInChromium(t *testing.T) {
	if _, err := exec.LookPath("chromium"); err != nil {
		testenv.LookPath(t, "chromium", "sudo apt-get install -y chromium")
	}
	// The stall: the third gap, before token 4, 900ms against a 500ms
	// threshold.
	up := httptest.NewServer(withStallFor("req-stall",
		scheduledUpstream{schedule: fixedSchedule(30*ms, 10*ms, 10*ms, 900*ms, 10*ms, 10*ms)},
		scheduledUpstream{schedule: randomSchedule(20)}))
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_STALL_THRESHOLD": "500ms",
		"ITLPROXY_SLO_ITL": "30ms", "ITLPROXY_SLO_TTFT": "5s"})

	models := []string{"m1", "m2", "m3"}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				stream(t, in.proxy, models[(i+n)%len(models)], fmt.Sprintf("load-%d-%d", i, n))
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	stream(t, in.proxy, "m2", "req-stall")

	dom := chromiumDOM(t, "http://"+in.admin+"/")
	for _, m := range models {
		if !regexp.MustCompile(`<tr class="model" data-model="` + m + `"><td rowspan="2">` + m + `</td>`).MatchString(dom) {
			t.Errorf("no row for model %s in the rendered page", m)
		}
	}
	// Every stream is judged against the TTFT objective: each model's
	// windows show attainment and goodput.
	if n := len(regexp.MustCompile(`<td class="attainment">\d+\.\d% of \d+</td><td class="goodput">\d+\.\d tokens/s</td>`).FindAllString(dom, -1)); n != 2*len(models) {
		t.Errorf("%d windows show attainment and goodput, want %d", n, 2*len(models))
	}
	if !strings.Contains(dom, `<table id="slowest-ttft">`) {
		t.Error("no table of the slowest streams by TTFT")
	}
	i := strings.Index(dom, `data-request-id="req-stall"`)
	if i < 0 {
		t.Fatalf("the stalled stream is not among the slowest:\n%s", dom)
	}
	slow := dom[i:]
	slow = slow[:strings.Index(slow, "</svg>")]
	for _, want := range []string{
		`<a href="/debug/streams/req-stall">req-stall</a>`,
		`<span class="stall-mark">stall at gap <span class="stall" data-gap="3" data-cause="upstream">3 (upstream)</span></span>`,
		`<rect class="stall" data-gap="3" data-cause="upstream"`,
	} {
		if !strings.Contains(slow, want) {
			t.Errorf("the stalled stream's entry lacks %s:\n%s", want, slow)
		}
	}
	if n := strings.Count(slow, "<rect"); n != 5 {
		t.Errorf("%d bars for 5 gaps", n)
	}
	if strings.Contains(dom, "<script") || regexp.MustCompile(`(src|href)="(https?:)?//`).MatchString(dom) {
		t.Error("the page has a script or an external asset")
	}
}

// TestLivePageAfterReload: after the SLO file is reloaded with a tighter
// ITL objective, a new stream's gaps over the new objective (and within
// the old one) are marked as breaches on the page, in a real browser; the
// stream recorded before the reload keeps the marks of the objective it
// was judged by.
func TestLivePageAfterReload(t *testing.T) {
	if _, err := exec.LookPath("chromium"); err != nil {
		testenv.LookPath(t, "chromium", "sudo apt-get install -y chromium")
	}
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(10*ms, 80*ms, 10*ms, 80*ms)})
	defer up.Close()
	vol := newConfigMapDir(t, map[string][]byte{"slo.yaml": []byte("default: {itl: 500ms}\n")})
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_SLO_FILE": vol.path("slo.yaml")})
	stream(t, in.proxy, "m", "before-reload")
	vol.swap(map[string][]byte{"slo.yaml": []byte("default: {itl: 50ms}\n")})
	waitITL(t, in, "the ConfigMap swap", "m", 0.05)
	stream(t, in.proxy, "m", "after-reload")

	dom := chromiumDOM(t, "http://"+in.admin+"/")
	bars := func(id string) string {
		i := strings.Index(dom, `data-request-id="`+id+`"`)
		if i < 0 {
			t.Fatalf("stream %s is not on the page:\n%s", id, dom)
		}
		s := dom[i:]
		return s[:strings.Index(s, "</svg>")]
	}
	after := bars("after-reload")
	for _, want := range []string{`<rect class="breach" x="0"`, `<rect class="breach" x="2"`} {
		if !strings.Contains(after, want) {
			t.Errorf("the stream after the reload lacks %s (its 80ms gaps 1 and 3 are over the new 50ms objective):\n%s", want, after)
		}
	}
	if n := strings.Count(after, `class="breach"`); n != 2 {
		t.Errorf("%d breaches marked after the reload, want 2", n)
	}
	if n := strings.Count(bars("before-reload"), `class="breach"`); n != 0 {
		t.Errorf("%d breaches marked on the stream judged by the 500ms objective, want 0", n)
	}
}
