package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplaceSection: only the mode's section changes; the rest of the
// document, the other mode's section included, stays byte for byte.
func TestReplaceSection(t *testing.T) {
	doc := "# Benchmarks\nintro\n<!-- bench:smoke:begin -->\nold smoke\n<!-- bench:smoke:end -->\nmiddle\n<!-- bench:full:begin -->\nold full\n<!-- bench:full:end -->\nend\n"
	got, err := replaceSection([]byte(doc), "smoke", "new\ntables\n")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(doc, "old smoke\n", "new\ntables\n", 1)
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	again, _ := replaceSection(got, "smoke", "new\ntables\n")
	if !bytes.Equal(again, got) {
		t.Error("replacing twice with the same tables changed the document")
	}
	if _, err := replaceSection([]byte("no markers"), "full", "x"); err == nil {
		t.Error("a document without markers: no error")
	}
}

// TestParseBenchmarks: names lose their GOMAXPROCS suffix, runs of
// -count are reduced to their median, log lines are skipped.
func TestParseBenchmarks(t *testing.T) {
	out := `goos: linux
BenchmarkMeasureEvent-2   	 2000	       431.8 ns/op	 472.45 MB/s	       9 B/op	       0 allocs/op
BenchmarkMeasureEvent-2   	 2000	       400.0 ns/op	 472.45 MB/s	       9 B/op	       0 allocs/op
BenchmarkMeasureEvent-2   	 2000	       500.0 ns/op	 472.45 MB/s	       9 B/op	       0 allocs/op
BenchmarkProxyStream/burst/plain-2  2026/11/22 00:56:21 httputil: ReverseProxy read error
BenchmarkProxyStream/burst/plain-2  	 2000	  485552 ns/op	 700.4 B/event	 2.786 allocs/event	 8100 cpu-ns/event	 7140 ns/event
PASS
`
	bs := parseBenchmarks(out)
	if len(bs) != 2 {
		t.Fatalf("got %d benchmarks: %+v", len(bs), bs)
	}
	if ns, _, allocs, cpu, ok := bs[0].perEvent(); bs[0].name != "BenchmarkMeasureEvent" || bs[0].runs != 3 || !ok || ns != 431.8 || allocs != 0 || cpu != -1 {
		t.Errorf("%+v: per event %v ns, %v allocs, cpu %v", bs[0], ns, allocs, cpu)
	}
	if ns, b, allocs, cpu, ok := bs[1].perEvent(); bs[1].name != "BenchmarkProxyStream/burst/plain" || !ok || ns != 7140 || b != 700.4 || allocs != 2.786 || cpu != 8100 {
		t.Errorf("%+v: per event %v ns, %v B, %v allocs, cpu %v", bs[1], ns, b, allocs, cpu)
	}
}

// TestRatios: CPU per 1,000 events and RSS per stream, and their ratios
// to another target at the same number of streams, from itlbench reports.
func TestRatios(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("env.txt", "mode=smoke\nstreams=400\n")
	proc := func(cpu float64, before, peak int64) string {
		return fmt.Sprintf(`{"concurrency":400,"total":{"requests":{"ok":10},"token_events":200000,"itl":{"p99":0.0215}},`+
			`"processes":{"cpu_seconds":%g,"rss_before_bytes":%d,"rss_peak_bytes":%d}}`, cpu, before, peak)
	}
	write("load-00400-direct.json", `{"concurrency":400,"total":{"requests":{"ok":10},"token_events":200000,"itl":{"p99":0.0210}}}`)
	write("load-00400-itlproxy.json", proc(3, 10<<20, 10<<20+400*40<<10))
	write("load-00400-nginx.json", proc(2, 5<<20, 5<<20+400*20<<10))
	res, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := res.find("load", 400, "itlproxy")
	if cpu, ok := r.cpuPer1k(); !ok || cpu != 15 {
		t.Errorf("CPU per 1,000 events = %v, %v; want 15 ms", cpu, ok)
	}
	if kib, ok := r.rssPerStream(); !ok || kib != 40 {
		t.Errorf("RSS per stream = %v KiB, want 40", kib)
	}
	if x, ok := res.ratio(r, "nginx", (*row).cpuPer1k); !ok || x != 1.5 {
		t.Errorf("CPU × nginx = %v, %v; want 1.5", x, ok)
	}
	if _, ok := res.ratio(r, "plain", (*row).cpuPer1k); ok {
		t.Error("a ratio to a target that did not run")
	}
	md := res.markdown()
	for _, want := range []string{"| 400 | itlproxy | 10 | 0 | 0 | 200000 |", "+0.50 |\n", "| CPU per token event within 1.3× nginx's at 400 and 1,000 streams | 1.50× at 400 | **missed**: 1.50× at 400 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the tables lack %q:\n%s", want, md)
		}
	}
}

// TestAddedGapPaced: the added p99 gap at 1,000 streams, no longer a
// target, is still shown for reference: the comparison's, and the paced
// run's when there is one.
func TestAddedGapPaced(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := func(itlP99 float64) string {
		return fmt.Sprintf(`{"concurrency":1000,"total":{"requests":{"ok":10},"token_events":1000,"itl":{"p99":%g}}}`, itlP99)
	}
	write("env.txt", "mode=full\nstreams=1000\n")
	write("load-01000-direct.json", rep(0.030))
	write("load-01000-itlproxy.json", rep(0.060))
	write("load-01000-nginx.json", rep(0.055))
	res, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	md := res.markdown()
	if !strings.Contains(md, "not a target: itlproxy's added ITL p99 (through it − direct) +30.000 ms at 1,000 streams at the comparison's rate (nginx +25.000).\n") {
		t.Errorf("without a paced run, the comparison's figure alone:\n%s", md)
	}
	write("paced-01000-direct.json", rep(0.1030))
	write("paced-01000-itlproxy.json", rep(0.1035))
	if res, err = load(dir); err != nil {
		t.Fatal(err)
	}
	md = res.markdown()
	for _, want := range []string{"+30.000 ms at 1,000 streams at the comparison's rate (nginx +25.000); **+0.500 ms** at 1,000 streams paced.\n", "#### Latency the client sees, paced"} {
		if !strings.Contains(md, want) {
			t.Errorf("the tables lack %q:\n%s", want, md)
		}
	}
	if got := len(res.of("paced")); got != 2 {
		t.Errorf("%d paced rows, want 2", got)
	}
}

// TestMemory: the runtime's figures per stream.
func TestMemory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "env.txt"), []byte("mode=smoke\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := "streams=200\ngo_goroutines=812\ngo_memstats_heap_alloc_bytes=8.192e+06\ngo_memstats_heap_inuse_bytes=1.2288e+07\n" +
		"go_memstats_stack_inuse_bytes=6.144e+06\nvmrss_kib=40000\nrss_idle_kib=12000\n"
	if err := os.WriteFile(filepath.Join(dir, "memory.txt"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	md := res.markdown()
	for _, want := range []string{"| live heap objects (`go_memstats_heap_alloc_bytes`) | 7.8 | 40.0 |", "| goroutine stacks (`go_memstats_stack_inuse_bytes`) | 5.9 | 30.0 |", "| 140.0 |", "| goroutines | 812 in all | 4.1 per stream |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the tables lack %q:\n%s", want, md)
		}
	}
}
