package transport

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// connWatcher is an upstream that tracks the state of each connection it
// accepted, as http.Server sees it.
type connWatcher struct {
	srv   *httptest.Server
	mu    sync.Mutex
	state map[net.Conn]http.ConnState
}

func watchedServer(t *testing.T, h http.Handler) *connWatcher {
	t.Helper()
	w := &connWatcher{state: map[net.Conn]http.ConnState{}}
	w.srv = httptest.NewUnstartedServer(h)
	w.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.state[c] = s
	}
	w.srv.Start()
	t.Cleanup(w.srv.Close)
	return w
}

// open is how many of its connections are still open.
func (w *connWatcher) open() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.state {
		if s != http.StateClosed && s != http.StateHijacked {
			n++
		}
	}
	return n
}

func waitOpen(t *testing.T, w *connWatcher, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for w.open() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d connections open, want %d", what, w.open(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func answer(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(w, "ok")
}

// TestLeanIdleTimeoutOnItsOwn: an idle connection is closed at
// IdleTimeout though no request asks for its host again, as a pod's that
// left a Service is never asked for again.
func TestLeanIdleTimeoutOnItsOwn(t *testing.T) {
	up := watchedServer(t, http.HandlerFunc(answer))
	lean := NewLean(0, nil)
	lean.IdleTimeout = 200 * time.Millisecond
	defer lean.CloseIdleConnections()
	for range 2 {
		if code, _, err := roundTrip(t, lean, post(t, up.srv.URL, "x")); err != nil || code != 200 {
			t.Fatalf("%d %v", code, err)
		}
	}
	if n := up.open(); n != 1 {
		t.Fatalf("%d connections open after two requests, want the one kept idle", n)
	}
	start := time.Now()
	waitOpen(t, up, 0, "past the idle timeout")
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Errorf("the idle connection closed after %v, before its timeout", waited)
	}
}

// TestLeanCloseIdleConnectionsTo: when a server leaves the set, its idle
// connections close at once, and the one in use as it leaves closes when
// its exchange ends instead of waiting idle; another server's stay; a
// server that comes back (a request sent to it again) keeps its
// connections again.
func TestLeanCloseIdleConnectionsTo(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	leaving := watchedServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			w.(http.Flusher).Flush()
			<-release
		}
		answer(w, r)
	}))
	staying := watchedServer(t, http.HandlerFunc(answer))
	lean := NewLean(0, nil)
	defer lean.CloseIdleConnections()
	for _, u := range []string{leaving.srv.URL, staying.srv.URL} {
		if code, _, err := roundTrip(t, lean, post(t, u, "x")); err != nil || code != 200 {
			t.Fatalf("%d %v", code, err)
		}
	}
	// The idle connection, taken by a request held in flight as the
	// server leaves; then another, idle.
	held, err := lean.RoundTrip(post(t, leaving.srv.URL+"/hold", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if code, _, err := roundTrip(t, lean, post(t, leaving.srv.URL, "x")); err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	waitOpen(t, leaving, 2, "one idle connection and one in use")

	lean.CloseIdleConnectionsTo(leaving.srv.Listener.Addr().String())
	waitOpen(t, leaving, 1, "the idle connection of the server that left")
	free()
	if _, err := io.ReadAll(held.Body); err != nil {
		t.Fatal(err)
	}
	held.Body.Close()
	waitOpen(t, leaving, 0, "the connection in use once its exchange ended")
	if n := staying.open(); n != 1 {
		t.Errorf("the staying server has %d connections open, want its idle one", n)
	}

	// Back in the set: its connections are kept again.
	if code, _, err := roundTrip(t, lean, post(t, leaving.srv.URL, "x")); err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := leaving.open(); n != 1 {
		t.Errorf("a server back in the set has %d connections open after a request, want the one kept idle", n)
	}
}
