package proxy

import (
	"slices"
	"strings"
	"testing"
)

// smugglingFuzzKinds are the requests FuzzSmuggling sends: clean ones,
// ambiguous ones with a request hidden in their body, and every path of
// framingPaths that the command's server settings allow and that answers
// at once.
func smugglingFuzzKinds() []framingPath {
	kinds := []framingPath{
		{name: "clean GET", req: cleanRequest, status: 200, upstream: "GET /clean "},
		{name: "clean measured POST", req: "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"model\":\"m\"}",
			status: 200, upstream: `POST /v1/chat/completions {"model":"m"}`},
		{name: "ambiguous", req: ambiguousRequest, status: 200, upstream: ambiguousUpstream, closes: true},
	}
	for _, p := range framingPaths() {
		// Server settings of their own, or a half-second wait before Go
		// closes the connection.
		if p.server == nil && p.status != 413 {
			kinds = append(kinds, p)
		}
	}
	return kinds
}

// FuzzSmuggling: a sequence of requests on one connection (clean,
// ambiguous with a hidden request, OPTIONS *, and requests Go answers
// itself or handles its own way), sent one at a time or pipelined; after a
// request that closes the connection the rest go on a new one. Each
// request gets its answer, and the upstream sees exactly what was
// forwarded, in order: never a hidden request.
func FuzzSmuggling(f *testing.F) {
	kinds := smugglingFuzzKinds()
	for _, name := range []string{"OPTIONS *", "an Upgrade not switched", "CONNECT", "HTTP/1.0 Transfer-Encoding, ignored", "OPTIONS *, ambiguous itself"} {
		i := slices.IndexFunc(kinds, func(p framingPath) bool { return p.name == name })
		f.Add(uint8(0), []byte{byte(i), 0, 2, 0})
		f.Add(uint8(1), []byte{byte(i), 1, byte(i), 2, 0})
	}
	upstream, seen := loggingUpstream()
	h := startHarness(f, upstream, http1Only(nil))
	addr := h.proxy.Listener.Addr().String()
	f.Fuzz(func(t *testing.T, pipelined uint8, program []byte) {
		defer func() {
			for len(h.served) > 0 {
				<-h.served
			}
		}()
		var sent []framingPath
		for _, b := range program[:min(len(program), 16)] {
			sent = append(sent, kinds[int(b)%len(kinds)])
		}
		var want []string
		for len(sent) > 0 {
			n := 1 + slices.IndexFunc(sent, func(p framingPath) bool { return p.closes })
			if n == 0 {
				n = len(sent)
			}
			want = append(want, exchangeAll(t, addr, sent[:n], pipelined%2 == 1)...)
			sent = sent[n:]
		}
		if got := seen(); !slices.Equal(got, want) {
			t.Fatalf("the upstream saw %q, want %q", got, want)
		}
	})
}

// exchangeAll sends reqs on a new connection, one at a time or all at
// once, checks each answer, and returns what the upstream should see.
func exchangeAll(t *testing.T, addr string, reqs []framingPath, pipelined bool) (upstream []string) {
	c := dialRaw(t, addr)
	defer c.c.Close()
	if pipelined {
		var all strings.Builder
		for _, p := range reqs {
			all.WriteString(p.req)
		}
		c.send(all.String())
	}
	for i, p := range reqs {
		if !pipelined {
			c.send(p.req)
		}
		if code, reason := c.answer(); code != p.status || reason != p.code {
			t.Fatalf("request %d (%s), pipelined %v: %d %s, want %d %s", i, p.name, pipelined, code, reason, p.status, p.code)
		}
		if p.upstream != "" {
			upstream = append(upstream, p.upstream)
		}
	}
	if last := reqs[len(reqs)-1]; last.closes {
		if code, reason := c.answer(); code != 0 {
			t.Fatalf("after %s, the connection is still open: %d %s", last.name, code, reason)
		}
	}
	return upstream
}
