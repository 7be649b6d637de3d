package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// ambiguities lists the verdicts' ambiguous flags, oldest first.
func ambiguities(f *framing) []bool {
	var out []bool
	for _, v := range f.queue {
		out = append(out, v.ambiguous)
	}
	return out
}

func TestFramingFollowsRequests(t *testing.T) {
	post := func(headers, body string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body
	}
	const get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	cases := []struct {
		name string
		in   string
		want []bool
		end  framingState
	}{
		{"no body", "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", []bool{false}, inHeader},
		{"Content-Length bodies", post("Content-Length: 5\r\n", "hello") + post("Content-Length: 2\r\n", "{}"), []bool{false, false}, inHeader},
		{"a body that looks like headers", post("Content-Length: 66\r\n", "GET /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n") + post("Content-Length: 0\r\n", ""), []bool{false, false}, inHeader},
		{"chunked with extension and trailer", post("Transfer-Encoding: chunked\r\n", "5;ext=1\r\nhello\r\na\r\n0123456789\r\n0\r\nX-Trailer: v\r\n\r\n") + "GET / HTTP/1.1\r\n\r\n", []bool{false, false}, inHeader},
		{"Content-Length and Transfer-Encoding", post("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n") + "GET /smuggled HTTP/1.1\r\n\r\n", []bool{true, false}, inHeader},
		{"either order, any case", post("transfer-encoding: chunked\r\ncontent-length: 0\r\n", "0\r\n\r\n"), []bool{true}, inHeader},
		{"bare LF ends header lines", "POST / HTTP/1.1\nContent-Length: 3\nTransfer-Encoding: chunked\n\n0\r\n\r\n" + get, []bool{true, false}, inHeader},
		{"a bare LF after a chunk size stops, as Go refuses it", "POST / HTTP/1.1\nContent-Length: 3\nTransfer-Encoding: chunked\n\n0\n\n", []bool{true}, stopped},
		{"a folded Transfer-Encoding", post("Transfer-Encoding:\r\n chunked\r\n", "3\r\nabc\r\n0\r\n\r\n") + get, []bool{false, false}, inHeader},
		{"HTTP/1.0 ignores Transfer-Encoding", "GET /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + get, []bool{false, false}, inHeader},
		{"CR LF after a POST is skipped", post("Content-Length: 2\r\n", "{}") + "\r\n\r\n" + get, []bool{false, false}, inHeader},
		{"OPTIONS * is answered by Go, without a verdict", "OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi" + get, []bool{false}, inHeader},
		{"unsupported Transfer-Encoding stops", post("Transfer-Encoding: gzip\r\n", "x") + get, []bool{false}, stopped},
		{"two Transfer-Encodings stop", post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n") + get, []bool{false}, stopped},
		{"different Content-Lengths stop", post("Content-Length: 1\r\nContent-Length: 2\r\n", "ab") + get, []bool{false}, stopped},
		{"a signed Content-Length stops", post("Content-Length: +2\r\n", "ab") + get, []bool{false}, stopped},
		{"upgrade holds what follows", "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + "binary frames", []bool{false}, holding},
		{"CONNECT holds what follows", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n" + "tunnel", []bool{false}, holding},
		{"HTTP/2 preface stops", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", []bool{false}, stopped},
		{"bad chunk size stops", post("Transfer-Encoding: chunked\r\n", "zz\r\n"), []bool{false}, stopped},
		{"a chunk size with a leading space stops", post("Transfer-Encoding: chunked\r\n", " 5\r\nhello\r\n0\r\n\r\n"), []bool{false}, stopped},
		{"chunk data not ended by CRLF stops", post("Transfer-Encoding: chunked\r\n", "5\r\nhelloX\r\n0\r\n\r\n"), []bool{false}, stopped},
		{"a trailer ended by bare LFs, a CRLF CRLF within Go's buffer", post("Transfer-Encoding: chunked\r\n", "0\r\nT: v\n\n") + get, []bool{false, false}, inHeader},
		{"a trailer with no CRLF CRLF within Go's buffer stops", post("Transfer-Encoding: chunked\r\n", "0\r\nT: v\n\n") + strings.Repeat("x", goBufferSize), []bool{false}, stopped},
		{"a trailer line without a colon stops", post("Transfer-Encoding: chunked\r\n", "0\r\nGET /x HTTP/1.1\r\n\r\n") + get, []bool{false}, stopped},
		{"a header line without a colon stops", "GET / HTTP/1.1\r\nHost x\r\n\r\n" + get, []bool{false}, stopped},
		{"a malformed request line stops", "GET /\r\n\r\n" + get, nil, stopped},
	}
	for _, tc := range cases {
		for how, chunks := range chunkings([]byte(tc.in)) {
			f := newFraming(nil)
			for _, c := range chunks {
				f.follow(c)
			}
			if got := ambiguities(&f); !slices.Equal(got, tc.want) || f.state != tc.end {
				t.Errorf("%s, %s: verdicts %v state %v, want %v %v", tc.name, how, got, f.state, tc.want, tc.end)
			}
		}
	}
}

// TestFramingResumesAfterNoSwitch: after a request that may switch
// protocols, the bytes that follow are held, and followed once another
// verdict is asked for (Go read another request: no switch happened).
func TestFramingResumesAfterNoSwitch(t *testing.T) {
	f := newFraming(nil)
	f.follow([]byte("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\nPOST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
	if v, ok := f.next(); !ok || v.target != "/ws" || f.state != holding {
		t.Fatalf("first verdict %+v %v, state %v", v, ok, f.state)
	}
	if v, ok := f.next(); !ok || v.target != "/a" || !v.ambiguous || f.state != inHeader {
		t.Fatalf("after the upgrade request: %+v %v, state %v", v, ok, f.state)
	}
	if _, ok := f.next(); ok {
		t.Error("a verdict for a request never sent")
	}
}

// TestFramingBounds: the follower holds no more than Go's server reads
// before it asks for another verdict: a header block past the server's
// MaxHeaderBytes (plus Go's slack), or that much held after a possible
// switch, stops it and lets its buffers go.
func TestFramingBounds(t *testing.T) {
	srv := &http.Server{MaxHeaderBytes: 1 << 10}
	big := "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", srv.MaxHeaderBytes) + "\r\n\r\n"
	f := newFraming(srv)
	f.follow([]byte(big))
	if len(f.queue) != 1 || f.state != inHeader {
		t.Errorf("a header block Go accepts: %d verdicts, state %v", len(f.queue), f.state)
	}
	f.follow([]byte(strings.Repeat("b", f.limit+1)))
	if f.state != stopped || f.header != nil {
		t.Errorf("past the bound: state %v, %d bytes kept", f.state, len(f.header))
	}
	f = newFraming(srv)
	f.follow([]byte("CONNECT h:1 HTTP/1.1\r\n\r\n" + strings.Repeat("t", f.limit)))
	if f.state != holding {
		t.Fatalf("state %v, want holding", f.state)
	}
	f.follow([]byte("t"))
	if f.state != stopped || f.held != nil {
		t.Errorf("past the bound: state %v, %d bytes held", f.state, len(f.held))
	}
}

// FuzzFraming: whatever the bytes and however they are cut, following
// them never panics, and gives the same verdicts as in one read; and the
// verdicts name, in order, the requests Go's own parser reads from the
// same bytes, up to where that parser fails, where the follower has
// stopped too.
func FuzzFraming(f *testing.F) {
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n"), uint8(3))
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nA: b\r\n\r\n\r\nOPTIONS * HTTP/1.1\r\n\r\n"), uint8(1))
	f.Add([]byte("GET /ws HTTP/1.1\r\nUpgrade: x\r\n\r\nGET / HTTP/1.0\r\nTransfer-Encoding:\r\n chunked\r\nContent-Length: 1\r\n\r\nxPRI * HTTP/2.0\r\n\r\n"), uint8(5))
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		// Every request reaches the handler, so that each has a verdict.
		srv := &http.Server{DisableGeneralOptionsHandler: true}
		whole := newFraming(srv)
		whole.follow(in)
		parts := newFraming(srv)
		step := int(cut%16) + 1
		for rest := in; len(rest) > 0; {
			n := min(step, len(rest))
			parts.follow(rest[:n])
			rest = rest[n:]
		}
		if !slices.Equal(parts.queue, whole.queue) || parts.state != whole.state {
			t.Fatalf("cut every %d bytes: %v %v; whole: %v %v", step, parts.queue, parts.state, whole.queue, whole.state)
		}
		// Bytes after the input, more than Go's read buffer holds, so
		// that its parser's failures are not all for want of bytes.
		withFiller := append(slices.Clip(in), strings.Repeat("x", goBufferSize+4)...)
		goes := newFraming(srv)
		goes.follow(withFiller)
		agreeWithGo(t, withFiller, &goes)
	})
}

// agreeWithGo reads in with net/http's request reader, as Go's server
// does, and checks each request against the next verdict of f, which
// followed in.
func agreeWithGo(t *testing.T, in []byte, f *framing) {
	src := &endOfInput{r: bytes.NewReader(in)}
	br := bufio.NewReader(src)
	for post := false; ; {
		if post { // as the server does after a POST
			peek, _ := br.Peek(4)
			_, _ = br.Discard(len(peek) - len(bytes.TrimLeft(peek, "\r\n")))
		}
		r, err := http.ReadRequest(br)
		if err != nil || r.ProtoMajor != 1 && r.Method+" "+r.RequestURI+" "+r.Proto != "PRI * HTTP/2.0" {
			return // Go's server answers, if it can, and closes
		}
		if v, ok := f.next(); !ok || !v.names(r) {
			t.Fatalf("Go read %s %s %s (length %d, %v); the follower has %+v %v", r.Method, r.RequestURI, r.Proto, r.ContentLength, r.TransferEncoding, v, ok)
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			if !src.ended && (f.state != stopped || len(f.queue) > 0) {
				t.Fatalf("Go failed to read the body of %s %s (%v); the follower goes on: state %v, %d verdicts", r.Method, r.RequestURI, err, f.state, len(f.queue))
			}
			return
		}
		if r.ProtoMajor != 1 {
			return // the server closes, or speaks HTTP/2
		}
		post = r.Method == "POST"
	}
}

// endOfInput notes when its reader has run out: a parser failing then
// failed for want of bytes a connection could still send.
type endOfInput struct {
	r     io.Reader
	ended bool
}

func (e *endOfInput) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if errors.Is(err, io.EOF) {
		e.ended = true
	}
	return n, err
}
