package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/itlproxy/itlproxy/internal/testenv"
)

// TestReadProc reads processes of a /proc written by the test: CPU ticks
// are utime + stime, memory is VmRSS and VmHWM in bytes (0 when absent, as
// for kernel threads), and a stat file that does not parse is an error.
func TestReadProc(t *testing.T) {
	// Fields 16 to 52 of proc(5), after utime and stime.
	const rest = " 0 0 20 0 1 0 5 1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0"
	const status = "Name:\tnginx\nVmHWM:\t    2048 kB\nVmRSS:\t    1536 kB\nThreads:\t1\n"
	for _, c := range []struct {
		name, stat, status string
		want               procSample
		err                bool
	}{
		{"plain", "42 (nginx) S 1 42 42 0 -1 4194624 100 0 0 0 150 25" + rest, status, procSample{175, 1536 << 10, 2048 << 10}, false},
		// The command name may hold spaces and parentheses: fields are
		// counted after its last ')'.
		{"odd name", "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 3 4" + rest, status, procSample{7, 1536 << 10, 2048 << 10}, false},
		{"kernel thread", "2 (kthreadd) S 0 0 0 0 -1 0 0 0 0 0 3 4" + rest, "Name:\tkthreadd\nThreads:\t1\n", procSample{cpuTicks: 7}, false},
		{"no name", "7 a R 1" + rest, status, procSample{}, true},
		{"short", "7 (a) R 1 7 7", status, procSample{}, true},
		{"not a number", "7 (a) R 1 7 7 0 -1 0 0 0 0 0 x 4" + rest, status, procSample{}, true},
	} {
		root := t.TempDir()
		dir := filepath.Join(root, "7")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range map[string]string{"stat": c.stat + "\n", "status": c.status} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		fs, err := procfs.NewFS(root)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readProc(fs, 7)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("%s: %+v, %v; want %+v, error %v", c.name, got, err, c.want, c.err)
		}
	}
}

// TestWatchPID watches the test process itself: the report carries its
// CPU time over the run and its memory, and a process that cannot be read
// stops the run before it starts.
func TestWatchPID(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		testenv.Missing(t, "/proc ("+err.Error()+")", "run the tests on Linux, as CI does")
	}
	up := httptest.NewServer(http.HandlerFunc(faultyUpstream))
	defer up.Close()
	pid := os.Getpid()
	rep, out, err := benchJSON(t, context.Background(), "-url", up.URL+"/v1", "-model", "ok", "-requests", "20", "-c", "4",
		"-watch-pid", fmt.Sprintf("%d,%d", pid, pid))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p := rep.Processes
	if p == nil {
		t.Fatalf("no processes in the report:\n%s", out)
	}
	// The same process twice: every figure is doubled, so it is even.
	// VmHWM is at least the VmRSS read with it, but the kernel raises its
	// mark lazily, so it may be below an RSS sampled earlier (seen in CI:
	// 116.74 MB against a sampled 116.90 MB).
	if !slices.Equal(p.PIDs, []int{pid, pid}) || p.RSSBeforeBytes <= 0 || p.RSSStartBytes <= 0 || p.RSSPeakBytes < p.RSSStartBytes ||
		p.RSSPeakBytes < p.RSSEndBytes || p.HWMBytes < p.RSSEndBytes || p.RSSPeakBytes%2 != 0 || p.CPUSeconds < 0 ||
		p.CPUResolutionSeconds != 0.01 || p.Error != "" {
		t.Errorf("processes %+v", *p)
	}
	if rep.PeakInFlight < 1 || rep.PeakInFlight > 4 {
		t.Errorf("peak in flight %d, want 1 to 4", rep.PeakInFlight)
	}

	err = run(context.Background(), []string{"-url", up.URL + "/v1", "-model", "ok", "-requests", "1", "-watch-pid", "999999999"}, &strings.Builder{}, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "-watch-pid: process 999999999: stat /proc/999999999: no such file or directory") {
		t.Errorf("an unreadable process: %v", err)
	}
}
