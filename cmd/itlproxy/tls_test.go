package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPKI is a certificate authority made for one test, issuing
// certificates for 127.0.0.1 and localhost.
type testPKI struct {
	t      *testing.T
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
	pool   *x509.CertPool
	serial int64
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "itlproxy test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca, caKey: key, pool: x509.NewCertPool(), serial: 1}
	p.pool.AddCert(ca)
	p.caFile = p.write("ca.pem", "CERTIFICATE", der)
	return p
}

func (p *testPKI) write(name, typ string, der []byte) string {
	p.t.Helper()
	file := filepath.Join(p.dir, name)
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return file
}

// issue makes a certificate for usage (server or client authentication)
// and returns it, and its certificate and key files.
func (p *testPKI) issue(name string, usage x509.ExtKeyUsage) (tls.Certificate, string, string) {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		p.t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	certFile := p.write(name+".pem", "CERTIFICATE", der)
	keyFile := p.write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		p.t.Fatal(err)
	}
	return cert, certFile, keyFile
}

// gatedUpstream sends one event, waits until the test says the client has
// it, then sends the rest: a proxy that buffered would never deliver the
// first.
func gatedUpstream(clientGotFirst <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		send := eventWriter(w)
		send(`{"choices":[{"delta":{"content":"a"}}]}`)
		select {
		case <-clientGotFirst:
		case <-time.After(5 * time.Second):
			return
		}
		send(`{"choices":[{"delta":{"content":"b"}}]}`)
		send("[DONE]")
	}
}

// readGated reads the first event, lets the upstream go on, and reads the
// rest.
func readGated(t *testing.T, client *http.Client, url string, clientGotFirst chan<- struct{}) *http.Response {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, `"a"`) {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(clientGotFirst)
	if rest, err := io.ReadAll(br); err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest: %q, %v", rest, err)
	}
	return resp
}

// TestTLSListenerHTTP2: with a certificate, the proxy listener speaks
// HTTPS, and HTTP/2 to clients that offer it, flushing event by event.
func TestTLSListenerHTTP2(t *testing.T) {
	pki := newPKI(t)
	_, certFile, keyFile := pki.issue("proxy", x509.ExtKeyUsageServerAuth)
	gate := make(chan struct{})
	up := httptest.NewServer(gatedUpstream(gate))
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_TLS_CERT_FILE": certFile, "ITLPROXY_TLS_KEY_FILE": keyFile})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp := readGated(t, client, "https://"+in.proxy+"/v1/chat/completions", gate)
	if resp.ProtoMajor != 2 || resp.TLS == nil {
		t.Errorf("spoke %s, TLS %v; want HTTP/2 over TLS", resp.Proto, resp.TLS != nil)
	}
	waitFor(t, "the stream to be recorded", 5*time.Second, func() bool {
		n, _ := in.scrape().Histogram("itlproxy_inter_token_latency_seconds")
		return n == 1
	})
}

// TestH2C: with ITLPROXY_H2C, cleartext HTTP/2 clients (prior knowledge)
// are served, event by event; HTTP/1.1 clients still are.
func TestH2C(t *testing.T) {
	gate := make(chan struct{})
	up := httptest.NewServer(gatedUpstream(gate))
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_H2C": "true"})
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()
	resp := readGated(t, client, "http://"+in.proxy+"/v1/chat/completions", gate)
	if resp.ProtoMajor != 2 {
		t.Errorf("spoke %s, want HTTP/2", resp.Proto)
	}
	r1, err := http.Get("http://" + in.proxy + "/v1/models")
	if err != nil || r1.ProtoMajor != 1 {
		t.Errorf("HTTP/1.1 beside h2c: %v", err)
	} else {
		r1.Body.Close()
	}
}

// TestHTTP2StreamReset: when the upstream cuts a stream, an HTTP/2 client
// sees its stream reset, not a clean end.
func TestHTTP2StreamReset(t *testing.T) {
	pki := newPKI(t)
	_, certFile, keyFile := pki.issue("proxy", x509.ExtKeyUsageServerAuth)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		eventWriter(w)(`{"choices":[{"delta":{"content":"a"}}]}`)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_TLS_CERT_FILE": certFile, "ITLPROXY_TLS_KEY_FILE": keyFile})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Post("https://"+in.proxy+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || err == nil || !strings.Contains(err.Error(), "stream error") {
		t.Errorf("%s: read %q, %v; want an HTTP/2 stream reset", resp.Proto, got, err)
	}
}

// TestUpstreamMTLS: an upstream that requires a client certificate is
// reached with ITLPROXY_UPSTREAM_CLIENT_CERT_FILE/KEY_FILE and refuses the
// proxy without them (502).
func TestUpstreamMTLS(t *testing.T) {
	pki := newPKI(t)
	serverCert, _, _ := pki.issue("upstream", x509.ExtKeyUsageServerAuth)
	_, clientCertFile, clientKeyFile := pki.issue("proxy-client", x509.ExtKeyUsageClientAuth)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.pool}
	up.StartTLS()
	defer up.Close()
	for _, c := range []struct {
		name string
		env  map[string]string
		want int
	}{
		{"with a client certificate", map[string]string{"ITLPROXY_UPSTREAM_CLIENT_CERT_FILE": clientCertFile, "ITLPROXY_UPSTREAM_CLIENT_KEY_FILE": clientKeyFile}, http.StatusOK},
		{"without", nil, http.StatusBadGateway},
	} {
		_, code := postStatus(t, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_UPSTREAM_CA_FILE": pki.caFile}, c.env)
		if code != c.want {
			t.Errorf("%s: %d, want %d", c.name, code, c.want)
		}
	}
	_, err := loadConfig(map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_UPSTREAM_CLIENT_CERT_FILE": clientCertFile}, false)
	if err == nil || !strings.Contains(err.Error(), "ITLPROXY_UPSTREAM_CLIENT_CERT_FILE: set without ITLPROXY_UPSTREAM_CLIENT_KEY_FILE") {
		t.Errorf("cert without key: %v", err)
	}
	_, err = loadConfig(map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_TLS_CERT_FILE": clientKeyFile, "ITLPROXY_TLS_KEY_FILE": clientCertFile}, false)
	if err == nil || !strings.Contains(err.Error(), "ITLPROXY_TLS_CERT_FILE=") {
		t.Errorf("swapped certificate and key: %v", err)
	}
}
