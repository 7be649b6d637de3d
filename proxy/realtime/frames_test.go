package realtime

import (
	"bytes"
	"compress/flate"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// frame composes one frame as a peer sends it, masked when mask is not
// zero (a client's frames), with the library's header writer.
func frame(op ws.OpCode, fin, rsv1 bool, mask [4]byte, payload []byte) []byte {
	h := ws.Header{Fin: fin, OpCode: op, Length: int64(len(payload)), Rsv: ws.Rsv(rsv1, false, false)}
	var b bytes.Buffer
	if mask != ([4]byte{}) {
		h.Masked, h.Mask = true, mask
	}
	if err := ws.WriteHeader(&b, h); err != nil {
		panic(err)
	}
	p := bytes.Clone(payload)
	if h.Masked {
		ws.Cipher(p, mask, 0)
	}
	b.Write(p)
	return b.Bytes()
}

// text is one unfragmented text frame.
func text(mask [4]byte, s string) []byte { return frame(ws.OpText, true, false, mask, []byte(s)) }

// clientMask is the masking key of the tests' client frames.
var clientMask = [4]byte{0x37, 0xfa, 0x21, 0x3d}

// deflater compresses messages as a permessage-deflate sender does (RFC
// 7692 section 7.2.1): a sync flush, its last four bytes taken off; with
// context takeover, one compressor for every message.
type deflater struct {
	w        *flate.Writer
	buf      bytes.Buffer
	takeover bool
}

func newDeflater(takeover bool) *deflater {
	d := &deflater{takeover: takeover}
	d.w, _ = flate.NewWriter(&d.buf, flate.BestSpeed)
	return d
}

func (d *deflater) compress(msg []byte) []byte {
	d.buf.Reset()
	if !d.takeover {
		d.w.Reset(&d.buf)
	}
	_, _ = d.w.Write(msg)
	_ = d.w.Flush()
	out := bytes.Clone(d.buf.Bytes())
	if !bytes.HasSuffix(out, tail[:]) {
		panic("a sync flush ends with 00 00 ff ff")
	}
	return out[:len(out)-len(tail)]
}

// recording is a frameReader's messages, kept.
type recording struct {
	msgs   []string
	at     []time.Time
	closes int
	fails  []Failure
}

func (r *recording) message(data []byte, at time.Time) {
	r.msgs = append(r.msgs, string(data))
	r.at = append(r.at, at)
}
func (r *recording) closeFrame()          { r.closes++ }
func (r *recording) unreadable(f Failure) { r.fails = append(r.fails, f) }

// feed writes parts to a new reader, one write each, stamped in turn, and
// checks that the reader left every byte as it was.
func feed(t testing.TB, r *frameReader, parts [][]byte) {
	t.Helper()
	for i, p := range parts {
		before := bytes.Clone(p)
		r.write(p, time.Unix(int64(i), 0))
		if !bytes.Equal(p, before) {
			t.Fatalf("write changed the bytes it was given: %x became %x", before, p)
		}
	}
}

func TestFrameReader(t *testing.T) {
	long := strings.Repeat("x", 300)   // a 16-bit length
	huge := strings.Repeat("y", 70000) // a 64-bit length
	ping := frame(ws.OpPing, true, false, [4]byte{}, []byte("hb"))
	maskedPing := frame(ws.OpPing, true, false, clientMask, []byte("hb"))
	for _, tc := range []struct {
		name   string
		in     [][]byte
		max    int
		msgs   []string
		closes int
		fails  []Failure
	}{
		{name: "a server's text frame", in: [][]byte{text([4]byte{}, `{"a":1}`)}, msgs: []string{`{"a":1}`}},
		{name: "a client's masked frame", in: [][]byte{text(clientMask, `{"type":"response.create"}`)}, msgs: []string{`{"type":"response.create"}`}},
		{name: "16-bit and 64-bit lengths", in: [][]byte{text(clientMask, long), text([4]byte{}, huge)}, msgs: []string{long, huge}},
		{name: "an empty message", in: [][]byte{text([4]byte{}, "")}, msgs: []string{""}},
		{name: "fragmented, pings between", in: [][]byte{
			frame(ws.OpText, false, false, clientMask, []byte(`{"type":`)), maskedPing,
			frame(ws.OpContinuation, false, false, [4]byte{9, 8, 7, 6}, []byte(`"x",`)),
			frame(ws.OpContinuation, false, false, clientMask, nil), maskedPing,
			frame(ws.OpContinuation, true, false, clientMask, []byte(`"b":2}`)),
		}, msgs: []string{`{"type":"x","b":2}`}},
		{name: "binary messages are not read", in: [][]byte{frame(ws.OpBinary, true, false, [4]byte{}, []byte{1, 2}), text([4]byte{}, "t")}, msgs: []string{"t"}},
		{name: "pong and close", in: [][]byte{frame(ws.OpPong, true, false, [4]byte{}, nil), ping, frame(ws.OpClose, true, false, [4]byte{}, []byte{0x03, 0xe8})}, closes: 1},
		{name: "over the bound, then within", max: 10, in: [][]byte{text([4]byte{}, "0123456789a"), text(clientMask, "0123456789")},
			msgs: []string{"0123456789"}, fails: []Failure{TooLarge}},
		{name: "fragmented over the bound", max: 10, in: [][]byte{
			frame(ws.OpText, false, false, [4]byte{}, []byte("012345")), ping,
			frame(ws.OpContinuation, true, false, [4]byte{}, []byte("6789a")), text([4]byte{}, "ok"),
		}, msgs: []string{"ok"}, fails: []Failure{TooLarge}},
		{name: "a reserved opcode", in: [][]byte{frame(3, true, false, [4]byte{}, nil), text([4]byte{}, "lost")}, fails: []Failure{InvalidFrame}},
		{name: "RSV1 with no extension", in: [][]byte{frame(ws.OpText, true, true, [4]byte{}, []byte("x"))}, fails: []Failure{InvalidFrame}},
		{name: "a fragmented control frame", in: [][]byte{frame(ws.OpPing, false, false, [4]byte{}, nil)}, fails: []Failure{InvalidFrame}},
		{name: "a control frame over 125 bytes", in: [][]byte{frame(ws.OpPing, true, false, [4]byte{}, []byte(long))}, fails: []Failure{InvalidFrame}},
		{name: "a continuation with no message", in: [][]byte{frame(ws.OpContinuation, true, false, [4]byte{}, []byte("x"))}, fails: []Failure{InvalidFrame}},
		{name: "a message inside a message", in: [][]byte{frame(ws.OpText, false, false, [4]byte{}, []byte("a")), text([4]byte{}, "b")}, fails: []Failure{InvalidFrame}},
		{name: "a 64-bit length with its top bit set", in: [][]byte{{0x81, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}}, fails: []Failure{InvalidFrame}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := bytes.Join(tc.in, nil)
			cuts := streamtest.Cuts(in)
			if len(in) > 4096 {
				cuts = map[string][][]byte{"whole": {in}, "as sent": tc.in}
			}
			for how, parts := range cuts {
				var got recording
				r := &frameReader{to: &got, max: cmpOr(tc.max, 1<<20)}
				feed(t, r, parts)
				if !slices.Equal(got.msgs, tc.msgs) || got.closes != tc.closes || !slices.Equal(got.fails, tc.fails) {
					t.Fatalf("%s: messages %.40q, %d closes, failures %v; want %.40q, %d, %v",
						how, got.msgs, got.closes, got.fails, tc.msgs, tc.closes, tc.fails)
				}
				if r.end() {
					t.Errorf("%s: the reader says it stopped inside a frame", how)
				}
			}
		})
	}
}

func cmpOr(v, or int) int {
	if v == 0 {
		return or
	}
	return v
}

// TestFrameReaderStamps: a message is stamped with the read that
// completed it, and a connection cut inside a frame or a message is
// reported.
func TestFrameReaderStamps(t *testing.T) {
	var got recording
	r := &frameReader{to: &got, max: 1 << 20}
	a, b := text([4]byte{}, "first"), text(clientMask, "second")
	// Read 0 ends inside a's header, read 1 completes a and starts b, read
	// 2 completes b and starts a third frame.
	feed(t, r, [][]byte{a[:1], append(a[1:], b[:3]...), append(b[3:], 0x81)})
	if !slices.Equal(got.msgs, []string{"first", "second"}) || !got.at[0].Equal(time.Unix(1, 0)) || !got.at[1].Equal(time.Unix(2, 0)) {
		t.Errorf("messages %q stamped %v; want first at 1s, second at 2s", got.msgs, got.at)
	}
	if !r.end() {
		t.Error("a connection cut inside a frame header was not reported")
	}
}

// TestPermessageDeflate reads compressed messages (RFC 7692) with and
// without context takeover, masked, fragmented, interleaved with
// uncompressed ones, and past the bound.
func TestPermessageDeflate(t *testing.T) {
	event := func(i int) string {
		return fmt.Sprintf(`{"type":"response.output_audio.delta","response_id":"resp_1","delta":"%s"}`, strings.Repeat("QUJD", 20+i))
	}
	for _, takeover := range []bool{true, false} {
		for _, mask := range [][4]byte{{}, clientMask} {
			t.Run(fmt.Sprintf("takeover=%v masked=%v", takeover, mask != [4]byte{}), func(t *testing.T) {
				d := newDeflater(takeover)
				var in [][]byte
				var want []string
				for i := range 6 {
					msg := event(i)
					switch i {
					case 2: // uncompressed, between compressed ones
						in = append(in, text(mask, msg))
					case 3: // compressed, in three fragments
						c := d.compress([]byte(msg))
						in = append(in, frame(ws.OpText, false, true, mask, c[:2]),
							frame(ws.OpPing, true, false, mask, nil),
							frame(ws.OpContinuation, false, false, mask, c[2:5]),
							frame(ws.OpContinuation, true, false, mask, c[5:]))
					default:
						in = append(in, frame(ws.OpText, true, true, mask, d.compress([]byte(msg))))
					}
					want = append(want, msg)
				}
				for how, parts := range streamtest.Cuts(bytes.Join(in, nil)) {
					if strings.HasPrefix(how, "split at") && !strings.HasSuffix(how, "7") {
						continue // every tenth cut is plenty here
					}
					var got recording
					r := &frameReader{to: &got, max: 1 << 20, deflate: true, takeover: takeover}
					feed(t, r, parts)
					r.end()
					if !slices.Equal(got.msgs, want) || len(got.fails) > 0 {
						t.Fatalf("%s: messages %.60q, failures %v; want %.60q", how, got.msgs, got.fails, want)
					}
				}
			})
		}
	}
}

// TestPermessageDeflateBound: a compressed message over the bound is
// counted and not kept, yet inflated, so that the messages after it that
// refer back to it (context takeover) are read.
func TestPermessageDeflateBound(t *testing.T) {
	d := newDeflater(true)
	big := strings.Repeat(`{"type":"input_audio_buffer.append","audio":"AAAA"}`, 2000)
	small := `{"type":"input_audio_buffer.append","audio":"AAAA"}`
	in := [][]byte{
		frame(ws.OpText, true, true, clientMask, d.compress([]byte(big))),
		frame(ws.OpText, true, true, clientMask, d.compress([]byte(small))),
	}
	if alone := len(newDeflater(false).compress([]byte(small))); len(in[1])-10 >= alone {
		t.Fatalf("the second message takes %d bytes, %d alone: it should refer back to the first", len(in[1])-10, alone)
	}
	var got recording
	r := &frameReader{to: &got, max: 4096, deflate: true, takeover: true}
	feed(t, r, in)
	r.end()
	if !slices.Equal(got.msgs, []string{small}) || !slices.Equal(got.fails, []Failure{TooLarge}) {
		t.Errorf("messages %.60q, failures %v; want the small one and TooLarge", got.msgs, got.fails)
	}
	if cap(r.msg) > 4096 {
		t.Errorf("the reader holds %d bytes, over its bound", cap(r.msg))
	}
}

// TestPermessageDeflateCorrupt: a message that does not inflate is
// counted; without context takeover the next compressed message is read,
// with it the window is lost and every later compressed message counts.
// A message ended by a final block (BFINAL) is read, and so is the next.
func TestPermessageDeflateCorrupt(t *testing.T) {
	bad := []byte{0xff, 0xff, 0xff, 0xff}
	for _, tc := range []struct {
		takeover bool
		msgs     []string
		fails    []Failure
	}{
		{false, []string{"before", "plain", "after"}, []Failure{InvalidCompression}},
		{true, []string{"before", "plain"}, []Failure{InvalidCompression, InvalidCompression}},
	} {
		t.Run(fmt.Sprintf("takeover=%v", tc.takeover), func(t *testing.T) {
			d := newDeflater(tc.takeover)
			in := bytes.Join([][]byte{
				frame(ws.OpText, true, true, [4]byte{}, d.compress([]byte("before"))),
				frame(ws.OpText, true, true, [4]byte{}, bad),
				text([4]byte{}, "plain"),
				frame(ws.OpText, true, true, [4]byte{}, newDeflater(false).compress([]byte("after"))),
			}, nil)
			var got recording
			r := &frameReader{to: &got, max: 1 << 20, deflate: true, takeover: tc.takeover}
			feed(t, r, [][]byte{in})
			r.end()
			if !slices.Equal(got.msgs, tc.msgs) || !slices.Equal(got.fails, tc.fails) {
				t.Errorf("messages %q, failures %v; want %q, %v", got.msgs, got.fails, tc.msgs, tc.fails)
			}
		})
	}
	t.Run("final block", func(t *testing.T) {
		var final bytes.Buffer
		w, _ := flate.NewWriter(&final, flate.BestSpeed)
		_, _ = w.Write([]byte("closed"))
		_ = w.Close() // ends with an empty stored block, final (BFINAL)
		payload := bytes.TrimSuffix(final.Bytes(), tail[:])
		var got recording
		r := &frameReader{to: &got, max: 1 << 20, deflate: true}
		feed(t, r, [][]byte{
			frame(ws.OpText, true, true, [4]byte{}, payload),
			frame(ws.OpText, true, true, [4]byte{}, newDeflater(false).compress([]byte("next"))),
		})
		r.end()
		if !slices.Equal(got.msgs, []string{"closed", "next"}) || len(got.fails) > 0 {
			t.Errorf("messages %q, failures %v; want closed, next", got.msgs, got.fails)
		}
	})
}

// TestPermessageDeflateBomb: a message that inflates past the limit is
// given up there, counted TooLarge; with context takeover the window is
// then lost, and the compressed messages after it count.
func TestPermessageDeflateBomb(t *testing.T) {
	bomb := make([]byte, 2<<20)
	for _, tc := range []struct {
		takeover bool
		msgs     []string
		fails    []Failure
	}{
		{false, []string{"after"}, []Failure{TooLarge}},
		{true, nil, []Failure{TooLarge, InvalidCompression}},
	} {
		d := newDeflater(tc.takeover)
		in := [][]byte{
			frame(ws.OpText, true, true, [4]byte{}, d.compress(bomb)),
			frame(ws.OpText, true, true, [4]byte{}, d.compress([]byte("after"))),
		}
		var got recording
		r := &frameReader{to: &got, max: 4096, deflate: true, takeover: tc.takeover, maxInflated: 1 << 20}
		feed(t, r, in)
		r.end()
		if !slices.Equal(got.msgs, tc.msgs) || !slices.Equal(got.fails, tc.fails) {
			t.Errorf("takeover=%v: messages %q, failures %v; want %q, %v", tc.takeover, got.msgs, got.fails, tc.msgs, tc.fails)
		}
	}
}
