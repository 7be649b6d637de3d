package proxy

import (
	"io"
	"testing"
)

// TestHeldBodyRelease: the body replays whole to every reader until it is
// released; after that, it is gone (readers at its end), so that a stream
// does not keep its prompt alive.
func TestHeldBodyRelease(t *testing.T) {
	h := &heldBody{b: []byte(`{"model":"m","prompt":"long"}`)}
	first, _ := io.ReadAll(h.reader())
	second, _ := io.ReadAll(h.reader())
	if string(first) != string(second) || string(first) != `{"model":"m","prompt":"long"}` {
		t.Fatalf("replays: %q, %q", first, second)
	}
	partial := h.reader()
	buf := make([]byte, 4)
	if n, _ := partial.Read(buf); n != 4 {
		t.Fatal("short read")
	}
	h.release()
	if h.b != nil {
		t.Error("the body is still held")
	}
	if n, err := partial.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("after release: %d, %v", n, err)
	}
}
