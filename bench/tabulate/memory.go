package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memory is itlproxy's memory with the profile run's streams in flight,
// read by bench/run.sh after a forced collection: memory.txt holds the
// runtime's figures (key=value), memory-top.txt the heap profile's top.
type memory struct {
	streams    int
	goroutines float64
	heapAlloc  float64 // bytes of live objects
	heapInuse  float64 // bytes of the heap's spans in use
	stackInuse float64 // bytes of goroutine stacks
	rssKiB     float64
	idleKiB    float64
	top        string
}

func readMemory(dir string) (*memory, error) {
	text, err := os.ReadFile(filepath.Join(dir, "memory.txt"))
	if err != nil {
		return nil, err
	}
	m := &memory{}
	fields := map[string]*float64{
		"go_goroutines":                 &m.goroutines,
		"go_memstats_heap_alloc_bytes":  &m.heapAlloc,
		"go_memstats_heap_inuse_bytes":  &m.heapInuse,
		"go_memstats_stack_inuse_bytes": &m.stackInuse,
		"vmrss_kib":                     &m.rssKiB,
		"rss_idle_kib":                  &m.idleKiB,
	}
	for line := range strings.Lines(string(text)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		if k == "streams" {
			m.streams, err = strconv.Atoi(v)
		} else if p := fields[k]; p != nil {
			*p, err = strconv.ParseFloat(v, 64)
		}
		if err != nil {
			return nil, fmt.Errorf("memory.txt: %s: %w", k, err)
		}
	}
	if m.streams <= 0 {
		return nil, fmt.Errorf("memory.txt: no streams")
	}
	if top, err := os.ReadFile(filepath.Join(dir, "memory-top.txt")); err == nil {
		m.top = string(top)
	}
	return m, nil
}

func (res *results) memoryTable(b *strings.Builder) {
	m := res.memory
	if m == nil {
		return
	}
	n := float64(m.streams)
	fmt.Fprintf(b, "#### Where itlproxy's memory goes\n\n")
	fmt.Fprintf(b, "With the profile run's %s streams in flight, after a forced collection (`memory.txt` and `memory-top.txt` in the results): "+
		"what is live, without the garbage that waits for the collector and that the peak RSS above includes (Go's default `GOGC=100` lets the heap grow to twice the live heap between collections).\n\n", count(m.streams))
	b.WriteString("| figure | MiB | KiB per stream |\n|---|--:|--:|\n")
	row := func(name string, bytes float64) {
		fmt.Fprintf(b, "| %s | %.1f | %.1f |\n", name, bytes/(1<<20), bytes/1024/n)
	}
	if m.rssKiB > 0 {
		row("RSS less the idle process's (after the collection; the heap's freed pages stay resident)", (m.rssKiB-m.idleKiB)*1024)
	}
	row("live heap objects (`go_memstats_heap_alloc_bytes`)", m.heapAlloc)
	row("heap spans in use (`go_memstats_heap_inuse_bytes`)", m.heapInuse)
	row("goroutine stacks (`go_memstats_stack_inuse_bytes`)", m.stackInuse)
	fmt.Fprintf(b, "| goroutines | %.0f in all | %.1f per stream |\n\n", m.goroutines, m.goroutines/n)
	if m.top == "" {
		return
	}
	// From the column headers, the first entries.
	lines := strings.Split(m.top, "\n")
	for i, l := range lines {
		if strings.Contains(l, "flat%") {
			lines = lines[i:min(len(lines), i+16)]
			break
		}
	}
	b.WriteString("The live heap by where it was allocated (`go tool pprof -top -sample_index=inuse_space`, sampled):\n\n```text\n")
	b.WriteString(strings.Join(lines, "\n"))
	b.WriteString("\n```\n\n")
}
