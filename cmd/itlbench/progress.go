package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progressEvery is how often the progress line is redrawn.
const progressEvery = time.Second

// startProgress draws a live progress line on stderr while the run goes:
// redrawn in place on a terminal, one line a second elsewhere (-progress
// always). It returns the function that stops it and clears the line.
func startProgress(b *bench, stderr io.Writer, mode string) (stop func()) {
	if !showProgress(stderr, mode) {
		return func() {}
	}
	term := isTerminal(stderr)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		ticker := time.NewTicker(progressEvery)
		defer ticker.Stop()
		var last result
		lastAt := b.start
		for {
			select {
			case <-done:
				if term {
					fmt.Fprint(stderr, "\r\033[K")
				}
				return
			case now := <-ticker.C:
				var rs []result
				for _, s := range b.stats {
					rs = append(rs, s.result())
				}
				cur := total(rs)
				line := progressLine(cur, last, now.Sub(b.start), now.Sub(lastAt), b.inFlight.Load())
				last, lastAt = cur, now
				if term {
					fmt.Fprint(stderr, "\r\033[K"+line)
				} else {
					fmt.Fprintln(stderr, line)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// progressLine shows totals so far, and rates over the last interval.
func progressLine(cur, last result, elapsed, interval time.Duration, inFlight int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5.0fs  in flight %d  ok %d  failed %d  %.1f req/s  %.0f tok/s",
		elapsed.Seconds(), inFlight, cur.ok, cur.failed(),
		perSecond(cur.ok-last.ok, interval), perSecond(cur.outputTokens-last.outputTokens, interval))
	if cur.ttft.count > 0 {
		fmt.Fprintf(&b, "  TTFT p50 %s p99 %s", fmtDuration(cur.ttft.quantile(0.5)), fmtDuration(cur.ttft.quantile(0.99)))
	}
	if cur.itl.count > 0 {
		fmt.Fprintf(&b, "  ITL p50 %s p99 %s", fmtDuration(cur.itl.quantile(0.5)), fmtDuration(cur.itl.quantile(0.99)))
	}
	return b.String()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
