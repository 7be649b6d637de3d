package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFramingGuardOnTheListener: on the command's cleartext listener, with
// and without h2c, a request Go answers itself (OPTIONS *) or that may
// switch protocols and does not, then a clean request and an ambiguous one
// on the same connection: the clean one is forwarded, the ambiguous one
// refused with 400 ambiguous_framing and never forwarded.
func TestFramingGuardOnTheListener(t *testing.T) {
	seen := make(chan string, 64)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Method + " " + r.URL.Path
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	const ambiguous = "POST /smuggled HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	firsts := map[string]string{
		"OPTIONS *":               "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"an Upgrade not switched": "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"CONNECT":                 "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
	}
	for _, h2c := range []string{"false", "true"} {
		in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_H2C": h2c})
		for name, first := range firsts {
			answers := exchangeOnOneConnection(t, in.proxy, first, "GET /clean HTTP/1.1\r\nHost: x\r\n\r\n", ambiguous)
			if len(answers) != 3 || !strings.HasPrefix(answers[1], "200 ") || !strings.HasPrefix(answers[2], "400 ") ||
				!strings.Contains(answers[2], `"code":"ambiguous_framing"`) {
				t.Errorf("h2c %s, %s: answers %q; want the clean request served, the ambiguous one refused", h2c, name, answers)
			}
		}
	}
	close(seen)
	for s := range seen {
		if strings.Contains(s, "smuggled") {
			t.Errorf("the upstream saw %s", s)
		}
	}
}

// exchangeOnOneConnection sends each request on one connection after the
// previous one's answer, and returns the answers as "status body".
func exchangeOnOneConnection(t *testing.T, addr string, reqs ...string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	var answers []string
	for _, req := range reqs {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			break
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, resp.Status[:3]+" "+string(body))
	}
	return answers
}
