//go:build unix

package streamtest

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// PerEvent runs fn b.N times, each handling events events, and reports the
// cost per event: ns/event, B/event, allocs/event and cpu-ns/event (the
// process's user+system CPU time, where other goroutines share the work).
// Allocations are counted process-wide (runtime.MemStats), so those of
// goroutines fn waits for are included. bench/run.sh tabulates these
// units in BENCHMARKS.md.
func PerEvent(b *testing.B, events int, fn func()) {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fn()
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&after)
	n := float64(b.N) * float64(events)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/event")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/event")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/event")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/event")
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
