package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file is -watch-pid: the cost of the server (or proxy) under the
// load, read from Linux's /proc for exactly the measured run, which a
// script watching from outside could not tell apart from the warm-up.

// userHZ is the unit of /proc/PID/stat's CPU times: USER_HZ, 100 on every
// architecture Go's linux ports run on but alpha and ia64.
const userHZ = 100

// watchEvery is how often resident memory is sampled during the run.
const watchEvery = 100 * time.Millisecond

// procSample is one reading of the watched processes, summed over them.
type procSample struct {
	cpuTicks int64 // utime + stime, in 1/userHZ s
	rss      int64 // VmRSS, bytes
	hwm      int64 // VmHWM (each process's peak RSS since it started), bytes
}

// procWatch reads the watched processes before the warm-up, at the start
// and end of the measured run, and every watchEvery in between.
type procWatch struct {
	pids   []int
	before procSample // at itlbench's start, before any request
	start  procSample // when the measured run starts

	mu      sync.Mutex
	peakRSS int64
	samples int
	err     error // the first failed reading during the run

	done, finished chan struct{}
}

// processesJSON is the report's "processes" object.
type processesJSON struct {
	PIDs []int `json:"pids"`
	// CPUSeconds is user + system CPU time summed over the processes from
	// the start of the measured run (after the warm-up) to its end (every
	// request ended), at a resolution of CPUResolutionSeconds.
	CPUSeconds           float64 `json:"cpu_seconds"`
	CPUResolutionSeconds float64 `json:"cpu_resolution_seconds"`
	// RSS sums, in bytes: before any request of this run (warm-up
	// included), at the start of the measured run, the highest sampled
	// during it, and at its end.
	RSSBeforeBytes int64 `json:"rss_before_bytes"`
	RSSStartBytes  int64 `json:"rss_start_bytes"`
	RSSPeakBytes   int64 `json:"rss_peak_bytes"`
	RSSEndBytes    int64 `json:"rss_end_bytes"`
	// HWMBytes sums each process's VmHWM at the end: its peak RSS since
	// it started, as the kernel tracks it: the kernel raises its mark
	// lazily, so it can be a little below a peak sampled during the run
	// (it is never below the VmRSS read with it).
	HWMBytes int64   `json:"hwm_bytes"`
	Samples  int     `json:"samples"`
	Interval float64 `json:"sample_interval_seconds"`
	Error    string  `json:"error,omitempty"`
}

// parsePIDs reads -watch-pid's "PID[,PID...]".
func parsePIDs(s string) ([]int, error) {
	var pids []int
	for _, f := range strings.Split(s, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || pid < 1 {
			return nil, fmt.Errorf("%q: want process ids, comma-separated", s)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// newProcWatch takes the reading before the warm-up; it fails when a
// process cannot be read (gone, or no /proc).
func newProcWatch(pids []int) (*procWatch, error) {
	w := &procWatch{pids: pids}
	var err error
	w.before, err = readProcs(pids)
	return w, err
}

// startRun takes the run's first reading and samples until stopRun.
func (w *procWatch) startRun() {
	w.start, w.err = readProcs(w.pids)
	w.peakRSS = w.start.rss
	w.done, w.finished = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.finished)
		t := time.NewTicker(watchEvery)
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-t.C:
				w.sample()
			}
		}
	}()
}

// sample takes a reading and keeps the peak RSS.
func (w *procWatch) sample() procSample {
	s, err := readProcs(w.pids)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if w.err == nil {
			w.err = err
		}
		return s
	}
	w.samples++
	w.peakRSS = max(w.peakRSS, s.rss)
	return s
}

// stopRun takes the last reading and returns the report's numbers.
func (w *procWatch) stopRun() *processesJSON {
	close(w.done)
	<-w.finished
	end := w.sample()
	out := &processesJSON{
		PIDs:                 w.pids,
		CPUSeconds:           float64(end.cpuTicks-w.start.cpuTicks) / userHZ,
		CPUResolutionSeconds: 1.0 / userHZ,
		RSSBeforeBytes:       w.before.rss,
		RSSStartBytes:        w.start.rss,
		RSSPeakBytes:         w.peakRSS,
		RSSEndBytes:          end.rss,
		HWMBytes:             end.hwm,
		Samples:              w.samples,
		Interval:             watchEvery.Seconds(),
	}
	if w.err != nil {
		out.Error = w.err.Error()
	}
	return out
}

// readProcs reads and sums the processes' CPU times and memory.
func readProcs(pids []int) (procSample, error) {
	var sum procSample
	for _, pid := range pids {
		s, err := readProc(pid)
		if err != nil {
			return sum, err
		}
		sum.cpuTicks += s.cpuTicks
		sum.rss += s.rss
		sum.hwm += s.hwm
	}
	return sum, nil
}

func readProc(pid int) (procSample, error) {
	var s procSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	if s.cpuTicks, err = parseStatCPU(stat); err != nil {
		return s, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	s.rss = statusBytes(status, "VmRSS:")
	s.hwm = statusBytes(status, "VmHWM:")
	return s, nil
}

// parseStatCPU returns utime + stime (fields 14 and 15 of proc(5)'s
// /proc/PID/stat). The command name, field 2, is in parentheses and may
// hold spaces and parentheses itself: fields are counted after its last ')'.
func parseStatCPU(stat []byte) (int64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	f := strings.Fields(string(stat[i+1:])) // f[0] is field 3
	if len(f) < 13 {
		return 0, errors.New("too few fields")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return utime + stime, nil
}

// statusBytes reads a "Name:   123 kB" line of /proc/PID/status; 0 when
// absent (kernel threads have no memory lines).
func statusBytes(status []byte, name string) int64 {
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, name); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
