package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// This file is -watch-pid: the cost of the server (or proxy) under the
// load, read from Linux's /proc for exactly the measured run, which a
// script watching from outside could not tell apart from the warm-up.

// userHZ is the unit of /proc/PID/stat's CPU times: USER_HZ, 100 on every
// architecture Go's linux ports run on but alpha and ia64 (procfs assumes
// it too).
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
	fs     procfs.FS
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
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	w := &procWatch{fs: fs, pids: pids}
	w.before, err = w.read()
	return w, err
}

// startRun takes the run's first reading and samples until stopRun.
func (w *procWatch) startRun() {
	w.start, w.err = w.read()
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
	s, err := w.read()
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

// read reads and sums the processes' CPU times and memory.
func (w *procWatch) read() (procSample, error) {
	var sum procSample
	for _, pid := range w.pids {
		s, err := readProc(w.fs, pid)
		if err != nil {
			return sum, fmt.Errorf("process %d: %w", pid, err)
		}
		sum.cpuTicks += s.cpuTicks
		sum.rss += s.rss
		sum.hwm += s.hwm
	}
	return sum, nil
}

// readProc reads a process's CPU times from /proc/PID/stat (utime and
// stime, fields 14 and 15 of proc(5)) and its memory from /proc/PID/status
// (VmRSS and VmHWM, which kernel threads lack: 0 then).
func readProc(fs procfs.FS, pid int) (procSample, error) {
	p, err := fs.Proc(pid)
	if err != nil {
		return procSample{}, err
	}
	stat, err := p.Stat()
	if err != nil {
		return procSample{}, err
	}
	status, err := p.NewStatus()
	if err != nil {
		return procSample{}, err
	}
	return procSample{
		cpuTicks: int64(stat.UTime + stat.STime),
		rss:      int64(status.VmRSS),
		hwm:      int64(status.VmHWM),
	}, nil
}
