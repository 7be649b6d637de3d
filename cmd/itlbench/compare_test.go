package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
	"github.com/itlproxy/itlproxy/internal/testenv"
	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// buildItlproxy builds the real itlproxy binary.
func buildItlproxy(t *testing.T) string {
	t.Helper()
	goBin := testenv.Go(t)
	bin := filepath.Join(t.TempDir(), "itlproxy")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, "github.com/itlproxy/itlproxy/cmd/itlproxy")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build itlproxy: %v\n%s", err, out)
	}
	return bin
}

// startItlproxy runs the binary in front of upstream on ports the system
// picks, and returns its proxy and admin addresses from its start-up log.
func startItlproxy(t *testing.T, bin, upstream string) (proxyAddr, adminAddr string) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "ITLPROXY_UPSTREAM_URL="+upstream,
		"ITLPROXY_LISTEN_ADDR=127.0.0.1:0", "ITLPROXY_ADMIN_ADDR=127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	started := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var entry struct {
				Msg       string `json:"msg"`
				ProxyAddr string `json:"proxy_addr"`
				AdminAddr string `json:"admin_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &entry) == nil && entry.Msg == "itlproxy started" {
				started <- [2]string{entry.ProxyAddr, entry.AdminAddr}
			}
		}
	}()
	select {
	case a := <-started:
		return a[0], a[1]
	case <-time.After(15 * time.Second):
		t.Fatal("itlproxy did not start in 15s")
		return "", ""
	}
}

// TestCompareWithRealItlproxy runs itlbench through the real itlproxy
// binary in front of llmsim, after other traffic, with -compare-metrics:
// the proxy's counts for this run equal the client's, and its sums are
// within 2%; its own account counts every token event and request of
// the run, and none of the earlier traffic.
func TestCompareWithRealItlproxy(t *testing.T) {
	up := newSimServer(t, llmsim.Model{TTFT: 100 * time.Millisecond, ITL: 20 * time.Millisecond})
	proxyAddr, adminAddr := startItlproxy(t, buildItlproxy(t), up.URL)
	base := "http://" + proxyAddr + "/v1"
	metricsURL := "http://" + adminAddr + "/metrics"

	// A run that does not go through the fresh proxy: it has measured
	// nothing, and says so.
	rep, out, err := benchJSON(t, context.Background(), "-url", up.URL+"/v1", "-model", "a", "-requests", "2", "-max-tokens", "5",
		"-compare-metrics", metricsURL)
	if err != nil || rep.Compare != nil || !strings.Contains(rep.CompareError, "has measured nothing on chat_completions yet") {
		t.Fatalf("a run past the fresh proxy: %v, comparison %+v, error %q\n%s", err, rep.Compare, rep.CompareError, out)
	}
	// Earlier traffic, which the comparison below must leave out; its own
	// comparison starts from the proxy that had measured nothing.
	rep, out, err = benchJSON(t, context.Background(), "-url", base, "-model", "a", "-requests", "3", "-max-tokens", "5",
		"-compare-metrics", metricsURL)
	if err != nil || rep.Compare == nil || rep.CompareError != "" {
		t.Fatalf("a run through the fresh proxy: %v, comparison %+v, error %q\n%s", err, rep.Compare, rep.CompareError, out)
	}
	if n := rep.Compare.Sets[0].TTFT.Proxy.Count; n != 3 {
		t.Errorf("the first run through the proxy: %d TTFTs measured, want 3", n)
	}
	const sent, tokens = 12, 20
	rep, out, err = benchJSON(t, context.Background(), "-url", base, "-model", "a,b", "-c", "4", "-requests", fmt.Sprint(sent),
		"-warmup", "4", "-max-tokens", fmt.Sprint(tokens), "-compare-metrics", metricsURL)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	c := rep.Compare
	if c == nil || len(c.Sets) != 3 || rep.CompareError != "" {
		t.Fatalf("no comparison of all, a and b: %+v %s", c, rep.CompareError)
	}
	if c.Note != "" {
		t.Errorf("note: %s", c.Note)
	}
	for _, set := range c.Sets {
		n := int64(sent)
		if set.Model != "all" {
			n = sent / 2
		}
		for _, m := range []struct {
			name      string
			p         sidePair
			wantCount int64
		}{{"TTFT", set.TTFT, n}, {"ITL", set.ITL, n * (tokens - 1)}, {"TPOT", set.TPOT, n}} {
			if m.p.Client.Count != m.wantCount || m.p.Proxy.Count != m.wantCount {
				t.Errorf("%s %s count: client %d, proxy %d; want %d", set.Model, m.name, m.p.Client.Count, m.p.Proxy.Count, m.wantCount)
			}
			if m.name == "TTFT" {
				// The client's clock starts before the request leaves and
				// stops after the token has come back through the proxy:
				// its TTFT is never shorter than the proxy's, and is longer
				// by the round trip, a few ms on a busy machine under -race.
				// A proxy that stamped the role chunk would be ~100% short.
				if d := -m.p.Diff.Sum / m.p.Client.Sum; d < 0 || d > 0.10 {
					t.Errorf("%s TTFT sum: client %.4fs, proxy %.4fs: client longer by %.1f%%, want 0 to 10%%", set.Model, m.p.Client.Sum, m.p.Proxy.Sum, 100*d)
				}
			} else if d := math.Abs(m.p.Diff.Sum) / m.p.Client.Sum; d > 0.02 {
				t.Errorf("%s %s sum: client %.4fs, proxy %.4fs: %.1f%% apart, want within 2%%", set.Model, m.name, m.p.Client.Sum, m.p.Proxy.Sum, 100*d)
			}
			if m.p.Proxy.P50 == nil || m.p.Diff.P50 == nil || m.p.Proxy.Mean == nil {
				t.Errorf("%s %s: the proxy's median or mean is missing", set.Model, m.name)
			}
		}
	}
	checkOwnAccount(t, rep, sent)
	all := c.Sets[0]
	t.Logf("TTFT mean client %.2fms proxy %.2fms; ITL mean client %.3fms proxy %.3fms",
		*all.TTFT.Client.Mean*1e3, *all.TTFT.Proxy.Mean*1e3, *all.ITL.Client.Mean*1e3, *all.ITL.Proxy.Mean*1e3)

	var text bytes.Buffer
	if err := c.writeText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"itlproxy's view", "TTFT count", "ITL p99.9", "proxy−client", "histogram_quantile"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the comparison's text lacks %q:\n%s", want, text.String())
		}
	}
	t.Logf("\n%s", text.String())
}

// TestProxyHistogramArithmetic: the delta between scrapes, the
// histogram_quantile estimate, and the client's samples in the proxy's
// buckets.
func TestProxyHistogramArithmetic(t *testing.T) {
	bounds := []float64{0.01, 0.02, 0.05}
	before := scrape.Buckets{Count: 10, Sum: 0.1, Bounds: bounds, Cumulative: []uint64{10, 10, 10}}
	after := scrape.Buckets{Count: 30, Sum: 0.5, Bounds: bounds, Cumulative: []uint64{10, 20, 30}}
	d, err := minus(after, before)
	if err != nil || d.Count != 20 || math.Abs(d.Sum-0.4) > 1e-12 || fmt.Sprint(d.Cumulative) != "[0 10 20]" {
		t.Fatalf("delta %+v, %v", d, err)
	}
	// Rank 10 of 20 closes the (0.01, 0.02] bucket; rank 15 is half-way
	// through (0.02, 0.05].
	for q, want := range map[float64]float64{0.5: 0.02, 0.75: 0.035} {
		if got, ok := quantile(d, q); !ok || math.Abs(got-want) > 1e-12 {
			t.Errorf("q%v = %v, %v; want %v", q, got, ok, want)
		}
	}
	over := scrape.Buckets{Count: 2, Bounds: bounds, Cumulative: []uint64{1, 1, 1}}
	if _, ok := quantile(over, 0.99); ok {
		t.Error("a quantile in the +Inf bucket was estimated")
	}
	if _, err := minus(before, after); err == nil {
		t.Error("counts going down were not refused")
	}

	var h histogram
	for range 10 {
		h.record(time.Millisecond)
		h.record(15 * time.Millisecond)
		h.record(time.Second)
	}
	in := h.snapshot().inBuckets(bounds)
	if in.Count != 30 || fmt.Sprint(in.Cumulative) != "[10 20 20]" {
		t.Errorf("client in proxy buckets: count %d, cumulative %v; want 30, [10 20 20]", in.Count, in.Cumulative)
	}
}
