package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

// realtimeSession dials the proxy's Realtime API, reads session.created
// and asks for a response planned as plan says.
func realtimeSession(t *testing.T, in *instance, plan string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+in.proxy+"/v1/realtime?model=gpt-realtime", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	if _, msg, err := ws.Read(ctx); err != nil || !strings.Contains(string(msg), "session.created") {
		t.Fatalf("first message %q, %v", msg, err)
	}
	create, _ := json.Marshal(map[string]any{"type": "response.create", "response": map[string]any{"metadata": map[string]string{"plan": plan}}})
	if err := ws.Write(ctx, websocket.MessageText, create); err != nil {
		t.Fatal(err)
	}
	return ws
}

// realtimeResponding starts itlproxy, with shutdownTimeout, in front of a
// Realtime upstream, and returns it with a session whose response, planned
// as plan says, has begun (its response.created read).
func realtimeResponding(ctx context.Context, t *testing.T, shutdownTimeout, plan string) (*instance, *websocket.Conn) {
	t.Helper()
	up := httptest.NewServer(&e2e.RealtimeUpstream{})
	t.Cleanup(up.Close)
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_SHUTDOWN_TIMEOUT": shutdownTimeout})
	ws := realtimeSession(t, in, plan)
	if typ, err := readEvent(ctx, ws); err != nil || typ != "response.created" {
		t.Fatalf("read %q, %v", typ, err)
	}
	return in, ws
}

// readEvent reads the next event's type.
func readEvent(ctx context.Context, ws *websocket.Conn) (string, error) {
	_, msg, err := ws.Read(ctx)
	if err != nil {
		return "", err
	}
	var ev struct{ Type string }
	_ = json.Unmarshal(msg, &ev)
	return ev.Type, nil
}

// TestShutdownWaitsForWebSockets: on SIGTERM a Realtime connection in
// flight is not cut: its response runs to the end and is recorded, the
// connection stays until the client closes it, and only then does run
// return.
func TestShutdownWaitsForWebSockets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, ws := realtimeResponding(ctx, t, "30s", "kind=text deltas=40 ttft=20ms gap=10ms tokens=40")
	in.stop()
	deltas := 0
	for {
		typ, err := readEvent(ctx, ws)
		if err != nil {
			t.Fatalf("the connection ended during the shutdown after %d deltas: %v", deltas, err)
		}
		if typ == "response.output_text.delta" {
			deltas++
		}
		if typ == "response.done" {
			break
		}
	}
	if deltas != 40 {
		t.Errorf("%d deltas, want 40", deltas)
	}
	waitFor(t, "the response to be recorded", 5*time.Second, func() bool {
		return in.scrape().Value("itlproxy_streams_total", "endpoint", "realtime", "outcome", "completed") == 1
	})
	select {
	case <-in.finished:
		t.Fatal("run returned while a WebSocket connection was open")
	default:
	}
	if err := ws.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Errorf("closing: %v", err)
	}
	if err := in.wait(5 * time.Second); err != nil {
		t.Errorf("run returned %v", err)
	}
	if strings.Contains(in.stderr.String(), "WebSocket connections still open") {
		t.Errorf("a connection was closed by the shutdown:\n%s", in.stderr)
	}
}

// TestShutdownTimeoutClosesWebSockets: a Realtime connection still open
// at the shutdown timeout is closed, visibly to the client, the log says
// so, and run returns.
func TestShutdownTimeoutClosesWebSockets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, ws := realtimeResponding(ctx, t, "300ms", "kind=text deltas=1000 gap=10ms")
	stopped := time.Now()
	in.stop()
	for {
		typ, err := readEvent(ctx, ws)
		if err != nil {
			break
		}
		if typ == "response.done" {
			t.Fatal("the response ran to its end; the timeout should have cut it")
		}
	}
	if d := time.Since(stopped); d > 5*time.Second {
		t.Errorf("the connection was closed %v after the signal, timeout 300ms", d)
	}
	if err := in.wait(5 * time.Second); err != nil {
		t.Errorf("run returned %v", err)
	}
	if !strings.Contains(in.stderr.String(), `WebSocket connections still open at the shutdown timeout were closed`) {
		t.Errorf("the log does not say a connection was closed:\n%s", in.stderr)
	}
}
