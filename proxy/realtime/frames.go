package realtime

import (
	"cmp"
	"errors"
	"io"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsflate"
)

// messages receives what a frameReader reads: each complete text message
// and what it could not read.
type messages interface {
	// message is a complete text message, unmasked and decompressed,
	// completed by the bytes that arrived at at; data is valid only during
	// the call.
	message(data []byte, at time.Time)
	// closeFrame: the direction sent a Close frame.
	closeFrame()
	unreadable(f Failure)
}

// retainBytes is the largest message buffer a frameReader keeps between
// messages: one larger message does not cost every connection its size
// for as long as it lasts.
const retainBytes = 64 << 10

// frameReader follows the frames of one direction of a WebSocket
// connection (RFC 6455 section 5) from copies of its bytes, however the
// reads cut them: frame headers, masking, messages fragmented into
// continuation frames with control frames between them, and
// permessage-deflate (RFC 7692). It hands each complete text message to
// its messages. It holds at most max bytes of one message: a larger one
// is counted, not read, and its bytes are not kept.
type frameReader struct {
	to  messages
	max int
	// deflate: permessage-deflate is in effect; takeover: its compression
	// context carries over from message to message. unknownExtension: an
	// extension the reader does not know is in effect, so no message is
	// read.
	deflate, takeover, unknownExtension bool
	// maxInflated bounds a compressed message's decompressed size (0:
	// maxInflatedBytes).
	maxInflated int64

	// The frame header being read: its bytes so far, and what
	// ws.ReadHeaderBuffer reads them from and with.
	head  [ws.MaxHeaderSize]byte
	headN int
	src   headerSource
	hbuf  [ws.MaxHeaderSize - 2]byte

	frame     ws.Header // the frame whose payload is being read
	inPayload bool
	left      int64 // payload bytes still to come
	maskPos   int64 // payload bytes of the frame seen so far

	// The data message being assembled.
	inMessage  bool
	text       bool // a text message: the only kind Realtime events use
	compressed bool
	over       bool // past max: not read
	msg        []byte

	inflate *inflater // started by the first compressed message
	// lost: the frames broke RFC 6455 where the reader cannot know where
	// the next frame starts; it reads nothing more.
	lost bool
}

// headerSource is the io.Reader ws.ReadHeaderBuffer reads a header from:
// the bytes gathered so far. off says how many it took.
type headerSource struct {
	b   []byte
	off int
}

func (s *headerSource) Read(p []byte) (int, error) {
	if s.off == len(s.b) {
		return 0, io.EOF
	}
	n := copy(p, s.b[s.off:])
	s.off += n
	return n, nil
}

// write follows the next bytes of the direction, which arrived at at.
func (r *frameReader) write(p []byte, at time.Time) {
	for len(p) > 0 && !r.lost {
		if !r.inPayload {
			p = r.readHeader(p, at)
			continue
		}
		n := int(min(int64(len(p)), r.left))
		r.payload(p[:n])
		p = p[n:]
		r.left -= int64(n)
		r.maskPos += int64(n)
		if r.left == 0 {
			r.endFrame(at)
		}
	}
}

// readHeader reads what it can of a frame header from p and returns the
// rest of p. A header cut across reads waits in head for the rest.
func (r *frameReader) readHeader(p []byte, at time.Time) []byte {
	n := copy(r.head[r.headN:], p)
	r.src = headerSource{b: r.head[:r.headN+n]}
	h, err := ws.ReadHeaderBuffer(&r.src, r.hbuf[:])
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// Short: a header is at most len(head) bytes, so all of p went in.
		r.headN += n
		return nil
	case err != nil:
		r.lose()
		return nil
	}
	used := r.src.off - r.headN
	r.headN = 0
	r.startFrame(h, at)
	return p[used:]
}

// startFrame checks a frame header as RFC 6455 section 5 and RFC 7692
// section 6 require, with the library's own checks: what breaks them
// leaves the reader unable to follow. Masking is the endpoints' to judge:
// the reader unmasks whatever says it is masked.
func (r *frameReader) startFrame(h ws.Header, at time.Time) {
	var state ws.State
	if r.inMessage {
		state = state.Set(ws.StateFragmented)
	}
	if r.unknownExtension {
		state = state.Set(ws.StateExtended) // its RSV bits mean what it says
	}
	compressed := false
	var err error
	if r.deflate {
		// RSV1 marks a compressed message, on its first frame only.
		h, compressed, err = wsflate.UnsetBit(h)
	}
	if err == nil {
		err = ws.CheckHeader(h, state)
	}
	if err != nil {
		r.lose()
		return
	}
	r.frame, r.left, r.maskPos, r.inPayload = h, h.Length, 0, true
	if h.OpCode == ws.OpText || h.OpCode == ws.OpBinary {
		r.startMessage(h.OpCode == ws.OpText, compressed)
	}
	if h.Length == 0 {
		r.endFrame(at)
	}
}

func (r *frameReader) startMessage(text, compressed bool) {
	r.inMessage, r.text, r.compressed, r.over = true, text, compressed, false
	r.msg = r.msg[:0]
	if compressed {
		if r.inflate == nil {
			r.inflate = newInflater(r.takeover, cmp.Or(r.maxInflated, maxInflatedBytes), r)
		}
		r.inflate.begin()
	}
}

// payload follows payload bytes of the current frame. Control frames'
// payloads are not needed (a Close frame's code is not); a data frame's
// are unmasked into the reader's own buffers, never in p.
func (r *frameReader) payload(p []byte) {
	switch {
	case r.frame.OpCode.IsControl():
	case r.compressed:
		// Unmask a piece at a time into the inflater's own buffer, and
		// inflate it: the decompressed bytes come back through take.
		for len(p) > 0 {
			n := copy(r.inflate.input[:], p)
			r.unmask(r.inflate.input[:n])
			r.inflate.write(r.inflate.input[:n])
			p = p[n:]
		}
	case r.keep(len(p)):
		start := len(r.msg)
		r.msg = append(r.msg, p...)
		r.unmask(r.msg[start:])
	}
}

// unmask unmasks b, the payload bytes that follow the frame's first
// maskPos (RFC 6455 section 5.3).
func (r *frameReader) unmask(b []byte) {
	if r.frame.Masked {
		ws.Cipher(b, r.frame.Mask, int((r.maskPos)%4))
	}
}

// keep reports whether n more bytes of the message are to be kept: it is
// a text message and still within max. A message that grows past max is
// dropped there.
func (r *frameReader) keep(n int) bool {
	if !r.text || r.over || r.unknownExtension {
		return false
	}
	if len(r.msg)+n > r.max {
		r.over = true
		r.release()
		return false
	}
	return true
}

// take keeps decompressed bytes of the current message.
func (r *frameReader) take(p []byte) {
	if r.keep(len(p)) {
		r.msg = append(r.msg, p...)
	}
}

// release lets a large message buffer go.
func (r *frameReader) release() {
	if cap(r.msg) > retainBytes {
		r.msg = nil
	} else {
		r.msg = r.msg[:0]
	}
}

func (r *frameReader) endFrame(at time.Time) {
	r.inPayload = false
	switch {
	case r.frame.OpCode == ws.OpClose:
		r.to.closeFrame()
	case !r.frame.OpCode.IsControl() && r.frame.Fin:
		r.endMessage(at)
	}
}

// endMessage hands a complete text message on, or says why it cannot.
func (r *frameReader) endMessage(at time.Time) {
	r.inMessage = false
	inflated := !r.compressed || r.inflate.end()
	switch {
	case !r.text:
	case r.unknownExtension:
		r.to.unreadable(UnknownExtension)
	case r.over:
		r.to.unreadable(TooLarge)
	case !inflated:
		r.to.unreadable(InvalidCompression)
	default:
		r.to.message(r.msg, at)
	}
	r.release()
}

// lose stops reading: the bytes that follow cannot be told apart as
// frames.
func (r *frameReader) lose() {
	r.lost = true
	r.msg = nil
	r.to.unreadable(InvalidFrame)
}

// end is called when the connection has ended: it reports whether the
// direction stopped inside a frame or a message, and lets the inflater go.
func (r *frameReader) end() (truncated bool) {
	if r.inflate != nil {
		r.inflate.close()
	}
	return !r.lost && (r.headN > 0 || r.inPayload || r.inMessage)
}
