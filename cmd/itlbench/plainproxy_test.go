package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// startServing runs an itlbench subcommand that serves until ctx ends,
// and returns the base URL it printed.
func startServing(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	var stderr lockedBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, io.Discard, &stderr) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("itlbench %s: %v", args[0], err)
		}
	})
	serving := regexp.MustCompile(`serving (https?://[^ /\n]+)`)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := serving.FindStringSubmatch(stderr.String()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("itlbench %s did not start: %s", args[0], stderr.String())
	return ""
}

// TestPlainProxyStreamsEventByEvent: the baseline proxy forwards the
// request unchanged (the upstream's Host, X-Forwarded-For added) and hands
// each event to the client before the upstream writes the next one, so it
// delays nothing; the bytes arrive as written, on a kept-alive connection.
func TestPlainProxyStreamsEventByEvent(t *testing.T) {
	var events []string
	for i := range 20 {
		events = append(events, fmt.Sprintf("data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i))
	}
	received := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if string(body) != `{"model":"m"}` || r.Host != r.Context().Value(http.LocalAddrContextKey).(net.Addr).String() ||
			r.Header.Get("X-Forwarded-For") != "127.0.0.1" {
			t.Errorf("upstream got body %q, Host %q, X-Forwarded-For %q", body, r.Host, r.Header.Get("X-Forwarded-For"))
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i, ev := range events {
			if _, err := io.WriteString(w, ev); err != nil || rc.Flush() != nil {
				return
			}
			select {
			case <-received:
			case <-time.After(5 * time.Second):
				t.Errorf("event %d did not reach the client in 5s: the proxy holds it back", i)
				return
			}
		}
	}))
	defer upstream.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := startServing(t, ctx, "plainproxy", "-addr", "127.0.0.1:0", "-upstream", upstream.URL)

	for range 3 { // on one connection, kept alive
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		br := bufio.NewReader(resp.Body)
		for i := 0; ; i++ {
			line, err := br.ReadString('\n')
			got.WriteString(line)
			if line == "\n" {
				received <- struct{}{}
			}
			if err != nil {
				if err != io.EOF {
					t.Fatalf("after %d lines: %v", i, err)
				}
				break
			}
		}
		resp.Body.Close()
		if want := strings.Join(events, ""); got.String() != want {
			t.Fatalf("the client got\n%q\nthe upstream wrote\n%q", got.String(), want)
		}
	}
}
