package proxy

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoakReturnsToBaseline runs a steady mixed load (streams completed,
// abandoned by the client, cut by the upstream, refused with 503) and then
// expects goroutines and the heap to come back to where they were.
func TestSoakReturnsToBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("-short leaves out this soak of about 10 s; run without -short to include it")
	}
	h := newHarness(t, soakUpstream())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	load := func(d time.Duration) (requests int64) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		var total atomic.Int64
		for w := range 16 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					reqCtx, stop := context.WithCancel(ctx)
					req, _ := http.NewRequestWithContext(reqCtx, http.MethodPost, h.proxy.URL+"/v1/chat/completions",
						strings.NewReader(`{"model":"m","stream":true}`))
					if resp, err := client.Do(req); err == nil {
						if (w+i)%5 == 0 {
							_, _ = io.ReadFull(resp.Body, make([]byte, 10)) // abandon it
						} else {
							_, _ = io.Copy(io.Discard, resp.Body)
						}
						resp.Body.Close()
					}
					stop()
					total.Add(1)
				}
			})
		}
		wg.Wait()
		return total.Load()
	}
	settle := func() (goroutines int, heap uint64) {
		client.CloseIdleConnections()
		h.proxyCloseIdle()
		h.logs.TakeAll() // the test's log observer keeps every line; the proxy does not
		for range 50 {
			runtime.GC()
			time.Sleep(20 * time.Millisecond)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	load(500 * time.Millisecond) // warm: pools, caches, the first connections
	baseG, baseHeap := settle()
	requests := load(4 * time.Second)
	g, heap := settle()
	// On a stalled machine the servers' connection goroutines may still be
	// on their way out: give them up to 5 s more before calling it a leak.
	for deadline := time.Now().Add(5 * time.Second); g > baseG+2 && time.Now().Before(deadline); {
		g, heap = settle()
	}
	t.Logf("%d requests; goroutines %d -> %d; heap %d KiB -> %d KiB", requests, baseG, g, baseHeap>>10, heap>>10)
	if g > baseG+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines grew from %d to %d:\n%s", baseG, g, buf[:runtime.Stack(buf, true)])
	}
	if heap > baseHeap+4<<20 {
		t.Errorf("heap grew from %d to %d bytes", baseHeap, heap)
	}
}

// soakUpstream answers the soak's requests in turn: a 503, a stream cut
// after its first token, and two complete streams of 20 tokens.
func soakUpstream() http.HandlerFunc {
	var n atomic.Int64
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch n.Add(1) % 4 {
		case 0:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"busy"}}`)
		case 1: // cut mid-stream
			writeChunks(w, r, [][]byte{[]byte(token)}, nil)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		default:
			var chunks [][]byte
			var gaps []time.Duration
			for range 20 {
				chunks = append(chunks, []byte(token))
				gaps = append(gaps, time.Millisecond)
			}
			writeChunks(w, r, append(chunks, []byte("data: [DONE]\n\n")), gaps)
		}
	}
}
