package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSmugglingOnTheListener: on the command's proxy listener, cleartext
// with and without h2c and over TLS, a request the proxy answers itself
// (OPTIONS *) or that may switch protocols and does not, then a clean
// request, then an ambiguous one (both Content-Length and
// Transfer-Encoding) with a request hidden in its body, on one
// connection: the first three are served, the connection closes after the
// ambiguous one, and the hidden request never reaches the upstream.
func TestSmugglingOnTheListener(t *testing.T) {
	seen := make(chan string, 64)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Method + " " + r.URL.Path
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	const hidden = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	const ambiguous = "POST /ambiguous HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + hidden
	firsts := map[string]string{
		"OPTIONS *":               "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"an Upgrade not switched": "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"CONNECT":                 "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
	}
	pki := newPKI(t)
	_, certFile, keyFile := pki.issue("proxy", x509.ExtKeyUsageServerAuth)
	for _, listener := range []struct {
		name string
		env  map[string]string
		tls  bool
	}{
		{"cleartext", map[string]string{"ITLPROXY_H2C": "false"}, false},
		{"cleartext with h2c", map[string]string{"ITLPROXY_H2C": "true"}, false},
		{"TLS", map[string]string{"ITLPROXY_TLS_CERT_FILE": certFile, "ITLPROXY_TLS_KEY_FILE": keyFile}, true},
	} {
		listener.env["ITLPROXY_UPSTREAM_URL"] = up.URL
		in := start(t, nil, listener.env)
		for name, first := range firsts {
			dial := func() (net.Conn, error) { return net.Dial("tcp", in.proxy) }
			if listener.tls {
				dial = func() (net.Conn, error) {
					return tls.Dial("tcp", in.proxy, &tls.Config{RootCAs: pki.pool, NextProtos: []string{"http/1.1"}})
				}
			}
			answers := exchangeOnOneConnection(t, dial, first, "GET /clean HTTP/1.1\r\nHost: x\r\n\r\n", ambiguous, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
			if len(answers) != 3 || !strings.HasPrefix(answers[1], "200 ") || !strings.HasPrefix(answers[2], "200 ") {
				t.Errorf("%s, %s: answers %q; want three served and the connection closed after the ambiguous request", listener.name, name, answers)
			}
		}
	}
	close(seen)
	var ambiguousSeen int
	for s := range seen {
		switch s {
		case "GET /smuggled", "GET /after":
			t.Errorf("the upstream saw %s", s)
		case "POST /ambiguous":
			ambiguousSeen++
		}
	}
	if ambiguousSeen != 3*len(firsts) {
		t.Errorf("the upstream saw the ambiguous request %d times, want %d", ambiguousSeen, 3*len(firsts))
	}
}

// exchangeOnOneConnection sends each request on one connection after the
// previous one's answer, and returns the answers as "status body".
func exchangeOnOneConnection(t *testing.T, dial func() (net.Conn, error), reqs ...string) []string {
	t.Helper()
	c, err := dial()
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
