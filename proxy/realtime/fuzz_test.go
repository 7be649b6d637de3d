package realtime

import (
	"bytes"
	"slices"
	"testing"

	"github.com/gobwas/ws"
)

// fuzzMax is the message bound of the fuzz target's readers.
const fuzzMax = 4096

// framed is how a sender frames msg: in frags fragments with a ping after
// each but the last, compressed (with or without context takeover) and
// masked as opts says.
func framed(msg []byte, frags int, compress, takeover, masked bool) []byte {
	mask := [4]byte{}
	if masked {
		mask = clientMask
	}
	payload := msg
	if compress {
		payload = newDeflater(takeover).compress(msg)
	}
	var out []byte
	size := len(payload)/frags + 1
	for i := 0; i < frags; i++ {
		op := ws.OpContinuation
		if i == 0 {
			op = ws.OpText
		}
		part := payload[min(i*size, len(payload)):min((i+1)*size, len(payload))]
		last := i == frags-1
		if last {
			part = payload[min(i*size, len(payload)):]
		}
		out = append(out, frame(op, last, compress && i == 0, mask, part)...)
		if !last {
			out = append(out, frame(ws.OpPing, true, false, mask, []byte{byte(i)})...)
		}
	}
	return out
}

type readResult struct {
	msgs      []string
	closes    int
	fails     []Failure
	truncated bool
}

func readAll(parts [][]byte, deflate, takeover bool) (readResult, bool) {
	var rec recording
	r := &frameReader{to: &rec, max: fuzzMax, deflate: deflate, takeover: takeover}
	unchanged := true
	for _, p := range parts {
		before := bytes.Clone(p)
		r.write(p, t0)
		unchanged = unchanged && bytes.Equal(before, p)
	}
	truncated := r.end()
	for _, m := range rec.msgs {
		if len(m) > fuzzMax {
			unchanged = false
		}
	}
	return readResult{rec.msgs, rec.closes, rec.fails, truncated}, unchanged
}

func (a readResult) equal(b readResult) bool {
	return slices.Equal(a.msgs, b.msgs) && a.closes == b.closes && slices.Equal(a.fails, b.fails) && a.truncated == b.truncated
}

// FuzzFrameReader holds the frame reader to a sender: msg, framed by a
// sender as opts says (fragmented, masked, compressed), is read back
// exactly, or counted TooLarge past the bound; whatever raw bytes follow,
// the reader reads the same whether it gets them whole or cut every cut
// bytes, never changes a byte it is given, never hands on a message past
// its bound, and does not panic.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte(`{"type":"response.output_audio.delta","response_id":"r","delta":"AAAA"}`), []byte{}, uint8(1), uint8(0))
	f.Add([]byte(`{"type":"response.create"}`), text(clientMask, "next"), uint8(5), uint8(4|2<<3))
	f.Add(bytes.Repeat([]byte(`{"a":"b"}`), 50), frame(ws.OpText, true, true, [4]byte{}, []byte{0xff, 0xfe}), uint8(3), uint8(1|2|3<<3))
	f.Add([]byte("x"), frame(ws.OpText, true, true, [4]byte{}, newDeflater(false).compress([]byte("y"))), uint8(7), uint8(1|4|1<<3))
	f.Add([]byte(""), []byte{0x81, 0x7f, 0, 0, 0, 0, 0, 0, 0x10, 0}, uint8(2), uint8(0))
	f.Add(bytes.Repeat([]byte{'z'}, fuzzMax+1), append(frame(ws.OpClose, true, false, [4]byte{}, nil), 0x81), uint8(30), uint8(1))
	f.Fuzz(func(t *testing.T, msg, raw []byte, cut, opts uint8) {
		deflate, takeover, masked := opts&1 != 0, opts&2 != 0, opts&4 != 0
		in := append(framed(msg, int(opts>>3)%4+1, deflate, takeover, masked), raw...)
		whole, ok := readAll([][]byte{in}, deflate, takeover)
		if !ok {
			t.Fatal("the reader changed its input, or handed on a message past its bound")
		}
		var parts [][]byte
		for rest := in; len(rest) > 0; {
			n := min(len(rest), int(cut%32)+1)
			parts, rest = append(parts, rest[:n]), rest[n:]
		}
		if pieces, ok := readAll(parts, deflate, takeover); !ok || !pieces.equal(whole) {
			t.Fatalf("read whole: %+v\nread cut every %d bytes: %+v", whole, cut%32+1, pieces)
		}
		switch {
		case len(msg) > fuzzMax:
			if len(whole.fails) == 0 || whole.fails[0] != TooLarge {
				t.Fatalf("a message of %d bytes, over the bound: failures %v", len(msg), whole.fails)
			}
		case len(whole.msgs) == 0 || whole.msgs[0] != string(msg):
			t.Fatalf("framed %q, read %q (failures %v)", msg, whole.msgs, whole.fails)
		}
	})
}
