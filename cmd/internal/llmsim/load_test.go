package llmsim

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLoadLengthensGaps streams n requests at once from a server whose
// gaps follow the law 20ms + (n-1) × 10ms, and checks each stream's mean
// gap, read on the client as the data lines arrive, against the law at n:
// 20ms alone, 50ms with four. Timers fire late, never early: the bound
// above is the looser.
func TestLoadLengthensGaps(t *testing.T) {
	load := &Load{PerStream: 10 * time.Millisecond}
	m := Model{TTFT: 5 * time.Millisecond, ITL: 20 * time.Millisecond, Load: load}
	srv := httptest.NewServer(New().ServeAnyModel(m))
	defer srv.Close()
	const tokens = 21
	for _, n := range []int{1, 4} {
		want := load.Gap(m.ITL, n)
		means := make([]time.Duration, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				body := `{"model":"m","stream":true,"max_tokens":21,"messages":[{"role":"user","content":"hi"}]}`
				resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				var first, last time.Time
				count := 0
				for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
					if line := sc.Text(); !strings.Contains(line, `"delta":{"content":"`) || strings.Contains(line, `"content":""`) {
						continue
					}
					if last = time.Now(); count == 0 {
						first = last
					}
					count++
				}
				if count != tokens {
					t.Errorf("%d tokens, want %d", count, tokens)
					return
				}
				means[i] = last.Sub(first) / (tokens - 1)
			})
		}
		wg.Wait()
		for i, got := range means {
			if got == 0 {
				continue // the stream failed, and said so
			}
			if got < want-want/50 || got > want+want/10 {
				t.Errorf("%d streams, stream %d: mean gap %v, want the law's %v", n, i, got, want)
			}
		}
	}
	if n := load.decoding.Load(); n != 0 {
		t.Errorf("%d requests still counted in flight after every stream ended", n)
	}
}
