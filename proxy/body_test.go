package proxy

import (
	"io"
	"testing"
)

// TestHeldBodyRelease: the body replays whole to every reader until it is
// released; after that, it is gone (readers at its end) as soon as the
// reader the transport is sending is done with it, so that a stream does
// not keep its prompt alive, and a prompt the upstream answered before
// reading it whole still reaches it whole.
func TestHeldBodyRelease(t *testing.T) {
	const body = `{"model":"m","prompt":"long"}`
	h := &heldBody{b: []byte(body)}
	first, _ := io.ReadAll(h.reader())
	second, _ := io.ReadAll(h.reader())
	if string(first) != string(second) || string(first) != body {
		t.Fatalf("replays: %q, %q", first, second)
	}
	abandoned, partial := h.reader(), h.reader()
	buf := make([]byte, 4)
	for _, r := range []io.Reader{abandoned, partial} {
		if n, _ := r.Read(buf); n != 4 {
			t.Fatal("short read")
		}
	}
	h.release()
	if h.b == nil {
		t.Fatal("released while the transport was still sending it")
	}
	if rest, err := io.ReadAll(partial); err != nil || string(rest) != body[4:] {
		t.Errorf("the reader being sent, after release: %q, %v", rest, err)
	}
	if h.b != nil {
		t.Error("the body is still held")
	}
	if n, err := abandoned.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("after release: %d, %v", n, err)
	}
}

// TestHeldBodyReleaseAtOnce: with no reader still sending it (none made,
// the last one read whole, or closed), release drops the body at once.
func TestHeldBodyReleaseAtOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		use  func(*heldBody)
	}{
		{"no reader", func(*heldBody) {}},
		{"read whole", func(h *heldBody) { _, _ = io.ReadAll(h.reader()) }},
		{"closed", func(h *heldBody) { h.reader().Close() }},
	} {
		h := &heldBody{b: []byte(`{"model":"m"}`)}
		c.use(h)
		h.release()
		if h.b != nil {
			t.Errorf("%s: the body is still held", c.name)
		}
	}
}
