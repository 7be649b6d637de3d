package realtime

import (
	"bufio"
	"errors"
	"io"
	"iter"

	"github.com/klauspost/compress/flate"
)

// The permessage-deflate extension (RFC 7692) compresses each message's
// payload with DEFLATE (RFC 1951), ending it with a sync flush whose last
// four bytes, 00 00 ff ff, the sender takes off and the receiver puts back
// (section 7.2.2). With context takeover the sender keeps its window from
// message to message, so that a message can refer to the bytes of the
// messages before it.
//
// The measurement sees a message's payload in pieces, as reads cut it, and
// must not hold a message larger than its bound to decompress it whole;
// yet a decompressor that runs out of input mid-message cannot be resumed,
// and a message skipped breaks the window for every message after it. So
// each direction's decompressor runs as a coroutine (iter.Pull): fed a
// piece, it decompresses until it needs the next, and waits there, its
// state and window intact, until the next piece comes. Run that way, a
// direction's messages form one continuous DEFLATE stream: each message's
// output is complete once the decompressor has consumed its tail, which
// is where each message ends with a sync flush; and a stream without
// context takeover needs no reset, as its sender never refers back past
// the message's start. Only a final block, or data that does not inflate,
// ends the stream: the rest of that message is skipped and the
// decompressor starts again with the next one; with context takeover it
// cannot, for the window is lost, and the direction's compressed messages
// are not read after that.
//
// The decompressor is klauspost/compress's flate, the standard library's
// with the same API, because the standard library's allocates its Huffman
// link tables anew for every dynamic block with codes over 9 bits (every
// block of audio, in practice: three allocations per delta) and inflates
// such data at half the speed (BenchmarkInflate).

// tail is what each compressed message's payload lacks at its end.
var tail = [4]byte{0x00, 0x00, 0xff, 0xff}

// maxInflatedBytes bounds the decompressed size of one message: past it
// the inflater gives the message up, as it does one that does not
// inflate. A few kilobytes can inflate to a thousand times their size,
// and the CPU time is the measurement's; no Realtime event comes near it.
const maxInflatedBytes = 64 << 20

// errTooLarge ends the decompression of a message past its limit.
var errTooLarge = errors.New("realtime: message inflates past the limit")

// errStopped is what the decompressor's input says once the inflater is
// closed: the coroutine then returns.
var errStopped = errors.New("realtime: inflater closed")

// output receives decompressed bytes.
type output interface{ take(p []byte) }

// inflater decompresses one direction's compressed messages. Its methods
// are called by the frameReader; the coroutine runs only inside them.
type inflater struct {
	out      output
	takeover bool
	limit    int64 // decompressed bytes of one message, at most

	next  func() (struct{}, bool)
	stop  func()
	yield func(struct{}) bool // the coroutine's, to wait for input
	fr    io.ReadCloser       // the decompressor, reading from br
	br    *bufio.Reader       // reading from the inflater
	in    []byte              // input given and not yet consumed
	buf   [4 << 10]byte       // decompressed bytes on their way to out
	// input is where the frameReader unmasks the payload it gives.
	input [4 << 10]byte

	inflated int64 // decompressed bytes of the current message so far
	ended    bool  // the current message's input is all in, its tail included
	draining bool  // the coroutine skips the rest of the current message
	failed   bool  // the current message did not inflate
	broken   bool  // context takeover, and the window is lost
	stopped  bool
}

func newInflater(takeover bool, limit int64, out output) *inflater {
	f := &inflater{out: out, takeover: takeover, limit: limit}
	// The decompressor reads a bufio.Reader the fastest (its code for one
	// is specialized). The bufio.Reader reads ahead only what has been
	// given: it asks the inflater for more, and the coroutine waits, only
	// once the decompressor has consumed all it had.
	f.br = bufio.NewReaderSize(f, len(f.buf))
	f.fr = flate.NewReader(f.br)
	f.next, f.stop = iter.Pull(f.run)
	return f
}

// run is the coroutine: the decompressor reading the direction's messages
// one after another, waiting in Read for each piece of input.
func (f *inflater) run(yield func(struct{}) bool) {
	f.yield = yield
	for !f.stopped {
		n, err := f.fr.Read(f.buf[:])
		if n > 0 {
			f.out.take(f.buf[:n])
			f.inflated += int64(n)
		}
		if err == nil && f.inflated > f.limit {
			err = errTooLarge
		}
		if err == nil {
			continue
		}
		if f.stopped {
			return
		}
		// A final block (io.EOF), or data that does not inflate (or past
		// the limit): skip the rest of the message, and start again at the
		// next.
		if err != io.EOF {
			f.failed = true
			f.broken = f.takeover
		}
		f.draining = true
		for !f.ended {
			f.in = nil
			if !f.wait() {
				return
			}
		}
		f.in, f.draining = nil, false
		f.br.Reset(f)
		_ = f.fr.(flate.Resetter).Reset(f.br, nil)
	}
}

// wait hands control back until more input is given; false means stop.
func (f *inflater) wait() bool {
	if !f.yield(struct{}{}) {
		f.stopped = true
	}
	return !f.stopped
}

// Read gives the bufio.Reader the input given so far, waiting for some.
func (f *inflater) Read(p []byte) (int, error) {
	for len(f.in) == 0 {
		if f.stopped || !f.wait() {
			return 0, errStopped
		}
	}
	n := copy(p, f.in)
	f.in = f.in[n:]
	return n, nil
}

// begin starts a compressed message.
func (f *inflater) begin() {
	f.ended, f.failed, f.inflated = false, f.broken, 0
}

// write decompresses p, the next piece of the message's payload,
// unmasked: the output goes to out before write returns.
func (f *inflater) write(p []byte) {
	if f.broken || f.stopped {
		return
	}
	f.in = p
	f.next()
	f.in = nil
}

// end completes the message: it feeds the tail, and reports whether the
// message inflated.
func (f *inflater) end() bool {
	f.write(tail[:])
	f.ended = true
	if f.draining && !f.stopped {
		f.next() // let the coroutine start again, past the message
	}
	return !f.failed
}

// close stops the coroutine.
func (f *inflater) close() {
	f.stopped = true
	f.stop()
}
