//go:build unix

package realtime

import (
	"bytes"
	stdflate "compress/flate"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/klauspost/compress/flate"

	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// discard is an Observer that keeps nothing: the benchmarks measure the
// reading of frames and events alone (the proxy's benchmarks add the
// metrics).
type discard struct{}

func (discard) Start(Start) ResponseObserver        { return discard{} }
func (discard) Unreadable(Failure)                  {}
func (discard) Wrote(time.Duration)                 {}
func (discard) FirstDelta(time.Duration, time.Time) {}
func (discard) Gap(time.Duration, time.Time)        {}
func (discard) OwnDelay(time.Duration)              {}
func (discard) End(End)                             {}
func (discard) ClientWrite(time.Time, time.Time)    {}

// audioDelta is a GA audio delta as the server sends it: 100 ms of 24 kHz
// 16-bit audio (noise, which compresses as little as speech), base64 (6.4
// KB); seed picks the noise.
func audioDelta(id string, seed uint64) string {
	audio := make([]byte, 4800)
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range audio {
		audio[i] = byte(rng.Uint32())
	}
	return fmt.Sprintf(`{"type":"response.output_audio.delta","event_id":"event_CXjs7IRkRdTsIs1BEPtXs","response_id":%q,"item_id":"item_CXjs6kT5oSJrcq5EdgGS3","output_index":0,"content_index":0,"delta":%q}`,
		id, base64.StdEncoding.EncodeToString(audio))
}

func transcriptDelta(id string) string {
	return fmt.Sprintf(`{"type":"response.output_audio_transcript.delta","event_id":"event_CXjs7IRkRdTsIs1BEPtXt","response_id":%q,"item_id":"item_CXjs6kT5oSJrcq5EdgGS3","output_index":0,"content_index":0,"delta":" word"}`, id)
}

// BenchmarkMeasureDelta is the per-delta cost of following a Realtime
// connection's server side: the frame header, the message, the event's
// JSON, the response's tally and clock, one delta per read as a proxy
// reads them, reported per delta (ns/event, B/event, allocs/event). The
// deltas: a transcript delta, an audio delta, and audio deltas compressed
// with context takeover (permessage-deflate, as the npm ws package and
// most servers negotiate).
func BenchmarkMeasureDelta(b *testing.B) {
	const id = "resp_CXjs6zXmZ5iEcXKE2eTDn"
	d := newDeflater(true)
	compressed := make([][]byte, 64)
	for i := range compressed {
		compressed[i] = frame(0x1, true, true, [4]byte{}, d.compress([]byte(audioDelta(id, uint64(i)))))
	}
	for _, tc := range []struct {
		name, extensions string
		frames           [][]byte
	}{
		{"transcript", "", [][]byte{text([4]byte{}, transcriptDelta(id))}},
		{"audio", "", [][]byte{text([4]byte{}, audioDelta(id, 0))}},
		// With context takeover each frame refers back to the ones before
		// it; the first refers to none, so that after the last they read
		// again in the same order, each with the window it was compressed
		// against.
		{"audio-deflate", "permessage-deflate", compressed},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := New(Config{MaxMessageBytes: 1 << 20, Extensions: tc.extensions}, discard{})
			defer c.Close(time.Now())
			c.Observe(Server, text([4]byte{}, created(id)), time.Now())
			now := time.Now()
			i := 0
			streamtest.PerEvent(b, 1, func() {
				c.Observe(Server, tc.frames[i%len(tc.frames)], now)
				i++
			})
			if n := c.res.active[0].tally.Events; n != int64(b.N) {
				b.Fatalf("counted %d deltas, want %d", n, b.N)
			}
		})
	}
}

// BenchmarkInflate decompresses the same compressed audio deltas (one
// continuous stream, as with context takeover) with the standard
// library's flate and with klauspost/compress's, which the inflater uses:
// per delta, the time and the allocations of each.
func BenchmarkInflate(b *testing.B) {
	d := newDeflater(true)
	var stream []byte
	for i := range 64 {
		stream = append(append(stream, d.compress([]byte(audioDelta("resp_1", uint64(i))))...), tail[:]...)
	}
	for _, tc := range []struct {
		name string
		new  func(io.Reader) io.ReadCloser
	}{
		{"compress-flate", stdflate.NewReader},
		{"klauspost-flate", flate.NewReader},
	} {
		b.Run(tc.name, func(b *testing.B) {
			out := make([]byte, 4<<10)
			src := bytes.NewReader(stream)
			r := tc.new(src)
			streamtest.PerEvent(b, 64, func() {
				src.Reset(stream)
				_ = r.(flate.Resetter).Reset(src, nil)
				for {
					if _, err := r.Read(out); err != nil {
						break
					}
				}
			})
		})
	}
}
