package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/testenv"
)

// countingPod serves h and counts the requests it began.
type countingPod struct {
	h      http.Handler
	served atomic.Int64
}

func (p *countingPod) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.served.Add(1)
	p.h.ServeHTTP(w, r)
}

// TestLivePageNamesUpstreams loads the live page of a proxy balancing over
// three pods, one of them slow (TTFT 120 ms, gaps 60 ms, against 20 and
// 10 ms), in a real browser: the table of upstream endpoints has a row
// for each pod with the streams it served and its ITL p99 the highest;
// the slowest streams, by longest gap and by TTFT, each name the pod that
// served them, the slow pod first.
func TestLivePageNamesUpstreams(t *testing.T) {
	if _, err := exec.LookPath("chromium"); err != nil {
		testenv.LookPath(t, "chromium", "sudo apt-get install -y chromium")
	}
	fast := scheduledUpstream{schedule: fixedSchedule(20*ms, 10*ms, 10*ms, 10*ms, 10*ms, 10*ms)}
	slow := scheduledUpstream{schedule: fixedSchedule(120*ms, 60*ms, 60*ms, 60*ms, 60*ms, 60*ms)}
	pods := map[string]*countingPod{}
	var urls []string
	var slowPod string
	for i, h := range []http.Handler{fast, fast, slow} {
		p := &countingPod{h: h}
		s := httptest.NewServer(p)
		t.Cleanup(s.Close)
		addr := strings.TrimPrefix(s.URL, "http://")
		pods[addr] = p
		urls = append(urls, s.URL)
		if i == 2 {
			slowPod = addr
		}
	}
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": strings.Join(urls, ",")})

	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for i := range 6 {
		wg.Go(func() {
			for n := 0; time.Now().Before(deadline); n++ {
				stream(t, in.proxy, "m", fmt.Sprintf("load-%d-%d", i, n))
			}
		})
	}
	wg.Wait()
	served := 0.0
	for _, p := range pods {
		served += float64(p.served.Load())
	}
	waitFor(t, "the proxy to count every stream", 5*time.Second, func() bool {
		return scrapeAdmin(t, in.admin).Value("itlproxy_upstream_streams_total") == served
	})

	dom := chromiumDOM(t, "http://"+in.admin+"/")
	row := regexp.MustCompile(`<tr class="upstream" data-model="m" data-upstream="([^"]+)">.*?<td class="streams">([^<]*)</td>.*?<td class="itl-p99">([^<]*)</td></tr>`)
	itl := map[string]time.Duration{}
	for _, m := range row.FindAllStringSubmatch(dom, -1) {
		p := pods[m[1]]
		if p == nil {
			t.Errorf("a row for %s, which is no pod", m[1])
			continue
		}
		if want := fmt.Sprint(p.served.Load()); m[2] != want {
			t.Errorf("%s: %s streams on the page, the pod served %s", m[1], m[2], want)
		}
		d, err := time.ParseDuration(m[3])
		if err != nil {
			t.Errorf("%s: ITL p99 %q: %v", m[1], m[3], err)
		}
		itl[m[1]] = d
	}
	if len(itl) != len(pods) {
		t.Fatalf("%d rows of upstream endpoints, want one per pod (%d):\n%s", len(itl), len(pods), dom)
	}
	for addr, d := range itl {
		if addr != slowPod && !(itl[slowPod] >= 2*d) {
			t.Errorf("ITL p99 on the page: the slow pod's %v is not twice %s's %v", itl[slowPod], addr, d)
		}
	}

	byGap := regexp.MustCompile(`<div class="stream" data-request-id="[^"]+">\s*<div>.*? on <span class="upstream">([^<]+)</span>`).FindAllStringSubmatch(dom, -1)
	byTTFT := regexp.MustCompile(`<tr data-request-id="[^"]+"><td>.*?</td><td>m</td><td class="upstream">([^<]+)</td>`).FindAllStringSubmatch(dom, -1)
	for _, list := range []struct {
		name string
		got  [][]string
	}{{"longest gap", byGap}, {"TTFT", byTTFT}} {
		if len(list.got) == 0 {
			t.Errorf("no stream among the slowest by %s names its upstream", list.name)
			continue
		}
		if list.got[0][1] != slowPod {
			t.Errorf("the slowest stream by %s names %s, not the slow pod %s", list.name, list.got[0][1], slowPod)
		}
		for _, m := range list.got {
			if pods[m[1]] == nil {
				t.Errorf("a stream among the slowest by %s names %s, which is no pod", list.name, m[1])
			}
		}
	}
	if n := strings.Count(dom, `class="stream"`); len(byGap) != n {
		t.Errorf("%d of the %d slowest streams by longest gap name their upstream", len(byGap), n)
	}
}
