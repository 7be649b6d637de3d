package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/reload"
)

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pairFiles returns a certificate and key as the files of a Secret.
func pairFiles(t *testing.T, certFile, keyFile string) map[string][]byte {
	return map[string][]byte{"tls.crt": readFile(t, certFile), "tls.key": readFile(t, keyFile)}
}

// connectLoop handshakes with addr on new connections until stop is
// closed, counting failures and keeping the name of the last certificate
// seen.
type connectLoop struct {
	*repeater
	handshakes, failures atomic.Int64
	lastName             atomic.Value
	lastErr              atomic.Value
}

func startConnectLoop(addr string, roots *x509.CertPool) *connectLoop {
	l := &connectLoop{}
	l.repeater = repeatUntilClosed(2, func() {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots})
		l.handshakes.Add(1)
		if err != nil {
			l.failures.Add(1)
			l.lastErr.Store(err.Error())
			return
		}
		l.lastName.Store(c.ConnectionState().PeerCertificates[0].Subject.CommonName)
		c.Close()
	})
	return l
}

// repeater runs a function over and over on its goroutines until closed.
type repeater struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func repeatUntilClosed(goroutines int, f func()) *repeater {
	r := &repeater{stop: make(chan struct{})}
	for range goroutines {
		r.wg.Go(func() {
			for {
				select {
				case <-r.stop:
					return
				default:
					f()
				}
			}
		})
	}
	return r
}

func (r *repeater) close() {
	close(r.stop)
	r.wg.Wait()
}

func (l *connectLoop) seen() string { s, _ := l.lastName.Load().(string); return s }

// TestListenerCertificateRotation rotates the listener's certificate as a
// Secret volume does while clients connect in a loop: no handshake fails,
// new connections see the new certificate, a broken new pair keeps the
// one in use, logged and counted, and a stream in flight over HTTP/2
// across the rotations completes untouched.
func TestListenerCertificateRotation(t *testing.T) {
	pki := newPKI(t)
	_, firstCert, firstKey := pki.issue("first", x509.ExtKeyUsageServerAuth)
	_, secondCert, secondKey := pki.issue("second", x509.ExtKeyUsageServerAuth)
	_, thirdCert, _ := pki.issue("third", x509.ExtKeyUsageServerAuth)
	held := heldUpstream{release: make(chan struct{})}
	up := httptest.NewServer(held)
	defer up.Close()
	release := sync.OnceFunc(func() { close(held.release) })
	defer release() // before Close, which waits for the held stream
	vol := newConfigMapDir(t, pairFiles(t, firstCert, firstKey))
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":         up.URL,
		"ITLPROXY_TLS_CERT_FILE":        vol.path("tls.crt"),
		"ITLPROXY_TLS_KEY_FILE":         vol.path("tls.key"),
		"ITLPROXY_WEB_ENABLE_LIFECYCLE": "true",
	})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	type result struct {
		proto, body string
		err         error
	}
	inFlight := make(chan result, 1)
	go func() {
		resp, err := client.Post("https://"+in.proxy+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"held","stream":true}`))
		if err != nil {
			inFlight <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		inFlight <- result{resp.Proto, string(body), err}
	}()
	waitFor(t, "the held stream to start", 5*time.Second, func() bool {
		return in.scrape().Value("itlproxy_active_streams") == 1
	})
	loop := startConnectLoop(in.proxy, pki.pool)
	defer loop.close()
	waitFor(t, "a connection to see the first certificate", 5*time.Second, func() bool { return loop.seen() == "first" })

	vol.swap(pairFiles(t, secondCert, secondKey))
	waitFor(t, "new connections to see the second certificate", 5*time.Second, func() bool { return loop.seen() == "second" })

	vol.swap(pairFiles(t, thirdCert, secondKey)) // a key that does not match
	waitFor(t, "the broken pair to be counted", 5*time.Second, func() bool {
		return in.scrape().Value("itlproxy_tls_reload_failures_total", "file", "listener_cert") == 1
	})
	if code, msg := postReload(t, in.admin); code != http.StatusInternalServerError || !strings.Contains(msg, "listener_cert (") {
		t.Errorf("POST /-/reload with a broken pair on disk: %d %q, want 500 naming listener_cert", code, msg)
	}
	if got := in.scrape().Value("itlproxy_tls_reload_failures_total", "file", "listener_cert"); got != 1 {
		t.Errorf("the same broken pair re-read: %v failures, want it counted once", got)
	}
	after := loop.handshakes.Load()
	waitFor(t, "more connections after the broken pair", 5*time.Second, func() bool { return loop.handshakes.Load() > after+10 })
	if got := loop.seen(); got != "second" {
		t.Errorf("after a broken pair, connections see %q, want second still", got)
	}
	if n := loop.failures.Load(); n != 0 {
		t.Errorf("%d of %d handshakes failed during the rotations; last: %v", n, loop.handshakes.Load(), loop.lastErr.Load())
	}
	if !containsLine(in.stderr.String(), "certificate files refused", "listener_cert") {
		t.Errorf("the broken pair was not logged:\n%s", in.stderr)
	}
	release()
	if r := <-inFlight; r.err != nil || r.proto != "HTTP/2.0" || r.body != heldBody() {
		t.Errorf("the stream in flight across the rotations: %s %v\n%q\nwant\n%q", r.proto, r.err, r.body, heldBody())
	}
}

// TestUpstreamCertificateRotation rotates the upstream CA bundle and the
// client certificate the proxy presents, as a Secret volume does, while
// requests go through in a loop on new upstream connections: none fails,
// the upstream sees the new client certificate, and an upstream
// certificate from the new CA is trusted.
func TestUpstreamCertificateRotation(t *testing.T) {
	ca1, ca2 := newPKI(t), newPKI(t)
	server1, _, _ := ca1.issue("upstream-1", x509.ExtKeyUsageServerAuth)
	server2, _, _ := ca2.issue("upstream-2", x509.ExtKeyUsageServerAuth)
	_, client1Cert, client1Key := ca1.issue("client-1", x509.ExtKeyUsageClientAuth)
	_, client2Cert, client2Key := ca2.issue("client-2", x509.ExtKeyUsageClientAuth)

	var serving atomic.Pointer[tls.Certificate]
	serving.Store(&server1)
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca1.ca)
	clientCAs.AddCert(ca2.ca)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	up.Config.SetKeepAlivesEnabled(false) // every request a new handshake
	// GetConfigForClient, not GetCertificate: StartTLS sets a
	// certificate of its own, which crypto/tls prefers without SNI.
	up.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{
			Certificates: []tls.Certificate{*serving.Load()},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    clientCAs,
		}, nil
	}}
	up.StartTLS()
	defer up.Close()

	files := func(ca []byte, cert, key string) map[string][]byte {
		f := pairFiles(t, cert, key)
		f["ca.crt"] = ca
		return f
	}
	vol := newConfigMapDir(t, files(readFile(t, ca1.caFile), client1Cert, client1Key))
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":              up.URL,
		"ITLPROXY_UPSTREAM_CA_FILE":          vol.path("ca.crt"),
		"ITLPROXY_UPSTREAM_CLIENT_CERT_FILE": vol.path("tls.crt"),
		"ITLPROXY_UPSTREAM_CLIENT_KEY_FILE":  vol.path("tls.key"),
	})
	loop := startRequestLoop("http://" + in.proxy + "/v1/models")
	defer loop.close()
	seen := func(name string) func() bool {
		return func() bool { s, _ := loop.lastBody.Load().(string); return s == name }
	}
	waitFor(t, "the upstream to see client-1", 5*time.Second, seen("client-1"))

	bundle := append(readFile(t, ca1.caFile), readFile(t, ca2.caFile)...)
	vol.swap(files(bundle, client2Cert, client2Key))
	waitFor(t, "the upstream to see client-2", 5*time.Second, seen("client-2"))
	serving.Store(&server2) // trusted only through the new bundle
	after := loop.requests.Load()
	waitFor(t, "requests to the upstream's new certificate", 5*time.Second, func() bool { return loop.requests.Load() > after+10 })
	if n := loop.failures.Load(); n != 0 {
		t.Errorf("%d of %d requests failed during the rotation; last: %v", n, loop.requests.Load(), loop.lastFailure.Load())
	}
}

// containsLine reports whether a line of log holds every part.
func containsLine(log string, parts ...string) bool {
	for line := range strings.Lines(log) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestVerifyUpstream: the verification that replaces crypto/tls's, so
// that the CA file can change, refuses what crypto/tls refuses: another
// CA's certificate, a name the certificate does not hold, a client-only
// certificate.
func TestVerifyUpstream(t *testing.T) {
	pki, other := newPKI(t), newPKI(t)
	server, _, _ := pki.issue("upstream", x509.ExtKeyUsageServerAuth)
	foreign, _, _ := other.issue("upstream", x509.ExtKeyUsageServerAuth)
	clientOnly, _, _ := pki.issue("client", x509.ExtKeyUsageClientAuth)
	ca := reload.NewCertFile(reload.UpstreamCA, pki.caFile, "")
	if _, err := ca.Load(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		cert    tls.Certificate
		sni     string
		dialled []string // the upstream's hosts
		ok      bool
	}{
		{"name sent as SNI", server, "localhost", []string{"localhost"}, true},
		{"address, not sent as SNI", server, "", []string{"127.0.0.1"}, true},
		{"one of a list of addresses", server, "", []string{"10.0.0.1", "127.0.0.1"}, true},
		{"another name", server, "api.example.com", []string{"api.example.com"}, false},
		{"another name, beside the list", server, "api.example.com", []string{"localhost"}, false},
		{"another address", server, "", []string{"10.0.0.1"}, false},
		{"none of a list of addresses", server, "", []string{"10.0.0.1", "10.0.0.2"}, false},
		{"another CA", foreign, "localhost", []string{"localhost"}, false},
		{"client certificate", clientOnly, "localhost", []string{"localhost"}, false},
	} {
		tc := &tls.Config{}
		ca.VerifyServers(tc, c.dialled...)
		leaf, err := x509.ParseCertificate(c.cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		err = tc.VerifyConnection(tls.ConnectionState{ServerName: c.sni, PeerCertificates: []*x509.Certificate{leaf}})
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// requestLoop sends GET requests one after another until closed, counting
// those that fail or answer other than 200, and keeping the last body.
type requestLoop struct {
	*repeater
	requests, failures    atomic.Int64
	lastBody, lastFailure atomic.Value
}

func startRequestLoop(url string) *requestLoop {
	l := &requestLoop{}
	l.repeater = repeatUntilClosed(1, func() {
		l.requests.Add(1)
		resp, err := http.Get(url)
		if err != nil {
			l.failures.Add(1)
			l.lastFailure.Store(err.Error())
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			l.failures.Add(1)
			l.lastFailure.Store(resp.Status)
			return
		}
		l.lastBody.Store(string(body))
	})
	return l
}

// TestTLSFileLoad: a file is reported changed (so refused, logged and
// counted) once per new content or new reason it cannot be read, and a
// refused file leaves the certificate in use.
func TestTLSFileLoad(t *testing.T) {
	pki := newPKI(t)
	_, certFile, keyFile := pki.issue("first", x509.ExtKeyUsageServerAuth)
	_, otherCert, _ := pki.issue("second", x509.ExtKeyUsageServerAuth)
	good, mismatched := readFile(t, certFile), readFile(t, otherCert)
	f := reload.NewCertFile(reload.ListenerCert, certFile, keyFile)
	write := func(b []byte) {
		if err := os.WriteFile(certFile, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		name        string
		do          func()
		changed, ok bool
	}{
		{"first load", func() {}, true, true},
		{"same bytes", func() {}, false, true},
		{"a key that does not match", func() { write(mismatched) }, true, false},
		{"the same refused bytes again", func() {}, false, false},
		{"removed", func() { os.Remove(certFile) }, true, false},
		{"still removed", func() {}, false, false},
		{"back to the bytes in use: nothing to do", func() { write(good) }, false, true},
	} {
		step.do()
		changed, err := f.Load()
		if changed != step.changed || (err == nil) != step.ok {
			t.Errorf("%s: changed %v, err %v; want changed %v, ok %v", step.name, changed, err, step.changed, step.ok)
		}
		pair, _ := f.ServerCertificate(nil)
		if leaf, _ := x509.ParseCertificate(pair.Certificate[0]); leaf == nil || leaf.Subject.CommonName != "first" {
			t.Errorf("%s: the certificate in use is not first any more", step.name)
		}
	}
}
