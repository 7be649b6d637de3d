package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestFramingFollowsRequests(t *testing.T) {
	post := func(headers, body string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body
	}
	cases := []struct {
		name   string
		in     string
		want   []bool
		follow bool // still following at the end
	}{
		{"no body", "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", []bool{false}, true},
		{"Content-Length bodies", post("Content-Length: 5\r\n", "hello") + post("Content-Length: 2\r\n", "{}"), []bool{false, false}, true},
		{"a body that looks like headers", post("Content-Length: 66\r\n", "GET /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n") + post("Content-Length: 0\r\n", ""), []bool{false, false}, true},
		{"chunked with extension and trailer", post("Transfer-Encoding: chunked\r\n", "5;ext=1\r\nhello\r\na\r\n0123456789\r\n0\r\nX-Trailer: v\r\n\r\n") + "GET / HTTP/1.1\r\n\r\n", []bool{false, false}, true},
		{"Content-Length and Transfer-Encoding", post("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n") + "GET /smuggled HTTP/1.1\r\n\r\n", []bool{true, false}, true},
		{"either order, any case", post("transfer-encoding: chunked\r\ncontent-length: 0\r\n", "0\r\n\r\n"), []bool{true}, true},
		{"bare LF line ends", "POST / HTTP/1.1\nContent-Length: 3\nTransfer-Encoding: chunked\n\n0\n\n", []bool{true}, true},
		{"unsupported Transfer-Encoding stops", post("Transfer-Encoding: gzip\r\n", "x") + "GET / HTTP/1.1\r\n\r\n", []bool{false}, false},
		{"upgrade stops after the request", "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + "binary frames", []bool{false}, false},
		{"HTTP/2 preface stops", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", []bool{false}, false},
		{"bad chunk size stops", post("Transfer-Encoding: chunked\r\n", "zz\r\n"), []bool{false}, false},
	}
	for _, tc := range cases {
		for how, chunks := range chunkings([]byte(tc.in)) {
			var f framing
			var got []bool
			for _, c := range chunks {
				got = f.follow(c, got)
			}
			if !slices.Equal(got, tc.want) || (f.state != stopped) != tc.follow {
				t.Errorf("%s, %s: verdicts %v following %v, want %v %v", tc.name, how, got, f.state != stopped, tc.want, tc.follow)
			}
		}
	}
}

// FuzzFraming: whatever the bytes and however they are cut, following
// them never panics, and gives the same verdicts as in one read.
func FuzzFraming(f *testing.F) {
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n"), uint8(3))
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		var whole framing
		want := whole.follow(in, nil)
		var parts framing
		var got []bool
		step := int(cut%16) + 1
		for rest := in; len(rest) > 0; {
			n := min(step, len(rest))
			got = parts.follow(rest[:n], got)
			rest = rest[n:]
		}
		if !slices.Equal(got, want) || strings.Count(string(in), "\n") < len(want)-1 {
			t.Fatalf("cut every %d bytes: %v; whole: %v", step, got, want)
		}
	})
}

// TestAmbiguousFramingRefused: through a guarded listener, a request with
// both Content-Length and Transfer-Encoding is refused with 400 and never
// reaches the upstream; the keep-alive requests around it are served.
func TestAmbiguousFramingRefused(t *testing.T) {
	seen := make(chan string, 10)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.URL.Path
		_, _ = io.WriteString(w, "ok")
	}))
	c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	exchange := func(req string) int {
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := exchange("GET /first HTTP/1.1\r\nHost: x\r\n\r\n"); code != 200 {
		t.Errorf("first request: %d", code)
	}
	if code := exchange("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"); code != 400 {
		t.Errorf("ambiguous request: %d, want 400", code)
	}
	h.waitServed(2)
	if got := len(seen); got != 1 || <-seen != "/first" {
		t.Errorf("the upstream saw %d requests", got)
	}
	if n := h.counter("itlproxy_requests_total", "code", "400"); n != 1 {
		t.Errorf("requests_total{code=400} = %v", n)
	}
}
