package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/itlproxy/itlproxy/cmd/internal/cmdtest"
	"github.com/itlproxy/itlproxy/internal/testenv"
)

// webFiles returns the files of the admin listener's Secret: the
// certificate and key (tls.crt, tls.key), when given, and web.yml, the web
// configuration file, naming them by relative paths (which exporter-toolkit
// resolves against the file's directory) and listing users with their
// passwords hashed by bcrypt.
func webFiles(t *testing.T, certFile, keyFile string, users map[string]string) map[string][]byte {
	t.Helper()
	var b strings.Builder
	files := map[string][]byte{}
	if certFile != "" {
		files = pairFiles(t, certFile, keyFile)
		b.WriteString("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n")
	}
	if len(users) > 0 {
		b.WriteString("basic_auth_users:\n")
	}
	for _, user := range slices.Sorted(maps.Keys(users)) {
		// The cheapest cost keeps the tests fast; TestDocumentedHashCommand
		// checks a hash of the documented cost.
		hash, err := bcrypt.GenerateFromPassword([]byte(users[user]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  %s: %q\n", user, hash)
	}
	files["web.yml"] = []byte(b.String())
	return files
}

// tlsClient trusts pki's certificates and opens a new connection, with a
// new handshake, for every request.
func tlsClient(pki *testPKI) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}, DisableKeepAlives: true}}
}

// answer is what the admin listener answered one request.
type answer struct {
	code   int
	body   string
	header http.Header
	tls    *tls.ConnectionState
}

// ask sends method url with basic auth credentials when user is not
// empty.
func ask(t *testing.T, client *http.Client, method, url, user, password string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(body), resp.Header, resp.TLS}
}

// TestWebConfigGuardsAdmin: with a web configuration file setting a
// certificate and a user, the admin listener speaks HTTPS only; every path
// but the probes answers 401 without the user's credentials (or with
// wrong ones) and is served with them; the probes answer without
// credentials, over the same TLS; the proxy port takes no credentials.
func TestWebConfigGuardsAdmin(t *testing.T) {
	pki := newPKI(t)
	_, certFile, keyFile := pki.issue("admin", x509.ExtKeyUsageServerAuth)
	vol := newConfigMapDir(t, webFiles(t, certFile, keyFile, map[string]string{"prometheus": "first-password"}))
	up := httptest.NewServer(scheduledUpstream{schedule: fixedSchedule(5*ms, 5*ms, 5*ms)})
	defer up.Close()
	client := tlsClient(pki)
	in := startAdmin(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":    up.URL,
		"ITLPROXY_WEB_CONFIG_FILE": vol.path("web.yml"),
		"ITLPROXY_PPROF":           "true",
	}, "https", client)
	admin := "https://" + in.admin

	// The proxy port: no credentials asked, the stream whole.
	code, body, err := streamThrough(t, in.proxy, "m")
	if err != nil || code != http.StatusOK || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("a stream through the proxy port: %d %v %q", code, err, body)
	}
	stream(t, in.proxy, "m", "req-guarded")
	waitFor(t, "the stream to be recorded", 5*time.Second, func() bool {
		return ask(t, client, http.MethodGet, admin+"/debug/streams/req-guarded", "prometheus", "first-password").code == http.StatusOK
	})

	for _, c := range []struct {
		method, path string
		code         int    // with the credentials
		body         string // in the answer with the credentials
	}{
		{http.MethodGet, "/metrics", 200, "itlproxy_build_info"},
		{http.MethodGet, "/", 200, "<html"},
		{http.MethodGet, "/debug/streams", 200, `"req-guarded"`},
		{http.MethodGet, "/debug/streams/req-guarded", 200, `"request_id": "req-guarded"`},
		{http.MethodPost, "/-/reload", 403, "ITLPROXY_WEB_ENABLE_LIFECYCLE"},
		{http.MethodGet, "/debug/pprof/", 200, "goroutine"},
		{http.MethodGet, "/debug/pprof/heap?debug=1", 200, "heap profile"},
		{http.MethodGet, "/no-such-path", 404, ""},
		{http.MethodPost, "/healthz", 405, ""},
		{http.MethodGet, "/readyz/../metrics", 404, ""},
	} {
		url := admin + c.path
		for _, who := range []struct{ user, password string }{{"", ""}, {"prometheus", "wrong"}, {"nobody", "first-password"}} {
			a := ask(t, client, c.method, url, who.user, who.password)
			if a.code != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") != "Basic" || strings.Contains(a.body, c.body) && c.body != "" {
				t.Errorf("%s %s as %q/%q: %d %.80q (WWW-Authenticate %q), want 401 asking for basic auth",
					c.method, c.path, who.user, who.password, a.code, a.body, a.header.Get("WWW-Authenticate"))
			}
		}
		if a := ask(t, client, c.method, url, "prometheus", "first-password"); a.code != c.code || !strings.Contains(a.body, c.body) {
			t.Errorf("%s %s with the credentials: %d %.80q, want %d with %q", c.method, c.path, a.code, a.body, c.code, c.body)
		}
	}
	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
		a := ask(t, client, http.MethodGet, admin+path, "", "")
		if a.code != http.StatusOK || a.body != want || a.tls == nil || !a.tls.HandshakeComplete {
			t.Errorf("GET %s without credentials: %d %q, TLS %v; want 200 %q over TLS", path, a.code, a.body, a.tls != nil, want)
		}
	}
	// Cleartext to the TLS port: Go's server answers 400 and serves
	// nothing of the admin's.
	if a := ask(t, http.DefaultClient, http.MethodGet, "http://"+in.admin+"/metrics", "prometheus", "first-password"); a.code != http.StatusBadRequest || strings.Contains(a.body, "itlproxy_") {
		t.Errorf("plain HTTP to the admin listener: %d %.80q, want 400", a.code, a.body)
	}
	if strings.Contains(in.stderr.String(), "first-password") {
		t.Error("the password is in the log")
	}
}

// TestWebConfigReread: a password changed in the web configuration file
// (a Secret update, and an edit in place that no watcher sees) and a
// rotated certificate take effect at the next request and handshake,
// without a restart.
func TestWebConfigReread(t *testing.T) {
	pki := newPKI(t)
	_, cert1, key1 := pki.issue("admin-1", x509.ExtKeyUsageServerAuth)
	_, cert2, key2 := pki.issue("admin-2", x509.ExtKeyUsageServerAuth)
	vol := newConfigMapDir(t, webFiles(t, cert1, key1, map[string]string{"prometheus": "first-password"}))
	client := tlsClient(pki)
	in := startAdmin(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":    "http://127.0.0.1:1",
		"ITLPROXY_WEB_CONFIG_FILE": vol.path("web.yml"),
	}, "https", client)
	metrics := "https://" + in.admin + "/metrics"
	served := func(user, password string) (int, string) {
		a := ask(t, client, http.MethodGet, metrics, user, password)
		return a.code, a.tls.PeerCertificates[0].Subject.CommonName
	}
	if code, cn := served("prometheus", "first-password"); code != 200 || cn != "admin-1" {
		t.Fatalf("before: %d from %s, want 200 from admin-1", code, cn)
	}

	vol.swap(webFiles(t, cert2, key2, map[string]string{"prometheus": "second-password"}))
	if code, _ := served("prometheus", "first-password"); code != http.StatusUnauthorized {
		t.Errorf("the old password after the Secret update: %d, want 401", code)
	}
	if code, cn := served("prometheus", "second-password"); code != 200 || cn != "admin-2" {
		t.Errorf("the new password after the Secret update: %d from %s, want 200 from the rotated admin-2", code, cn)
	}

	vol.editUnseen("web.yml", webFiles(t, cert2, key2, map[string]string{"prometheus": "second-password", "grafana": "third-password"})["web.yml"])
	if code, _ := served("grafana", "third-password"); code != 200 {
		t.Errorf("a user added in place: %d, want 200", code)
	}
	if code, _ := served("prometheus", "second-password"); code != 200 {
		t.Errorf("the user kept: %d, want 200", code)
	}

	// A broken file fails new handshakes, the probes' too, until it is
	// fixed.
	fixed := readFile(t, vol.path("web.yml"))
	vol.editUnseen("web.yml", []byte("tls_server_config: [\n"))
	if _, err := client.Get("https://" + in.admin + "/healthz"); err == nil {
		t.Error("a handshake succeeded with a broken web configuration file")
	}
	vol.editUnseen("web.yml", fixed)
	if code, _ := served("grafana", "third-password"); code != 200 {
		t.Errorf("the file fixed: %d, want 200", code)
	}
}

// TestWebConfigBrokenWhileServing: without TLS, a web configuration file
// broken while itlproxy serves makes the protected paths answer 500, and
// exporter-toolkit's log line saying why is in itlproxy's log; the probes
// still answer; the file fixed, the paths are served again.
func TestWebConfigBrokenWhileServing(t *testing.T) {
	vol := newConfigMapDir(t, webFiles(t, "", "", map[string]string{"prometheus": "a-password"}))
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": "http://127.0.0.1:1", "ITLPROXY_WEB_CONFIG_FILE": vol.path("web.yml")})
	metrics := "http://" + in.admin + "/metrics"
	fixed := readFile(t, vol.path("web.yml"))
	vol.swap(map[string][]byte{"web.yml": []byte("basic_auth_users: [\n")})
	if a := ask(t, http.DefaultClient, http.MethodGet, metrics, "prometheus", "a-password"); a.code != http.StatusInternalServerError {
		t.Errorf("/metrics with a broken file: %d, want 500", a.code)
	}
	if a := ask(t, http.DefaultClient, http.MethodGet, "http://"+in.admin+"/readyz", "", ""); a.code != http.StatusOK {
		t.Errorf("/readyz with a broken file: %d, want 200", a.code)
	}
	if !containsLine(in.stderr.String(), `"logger":"admin"`, "Unable to parse configuration", "yaml: line 1") {
		t.Errorf("the broken file is not in the log:\n%s", in.stderr)
	}
	vol.swap(map[string][]byte{"web.yml": fixed})
	if a := ask(t, http.DefaultClient, http.MethodGet, metrics, "prometheus", "a-password"); a.code != http.StatusOK {
		t.Errorf("/metrics with the file fixed: %d, want 200", a.code)
	}
}

// TestWebConfigRefused: the real main exits 2 on a web configuration file
// that it cannot serve, naming ITLPROXY_WEB_CONFIG_FILE and the problem.
func TestWebConfigRefused(t *testing.T) {
	pki := newPKI(t)
	_, certFile, keyFile := pki.issue("admin", x509.ExtKeyUsageServerAuth)
	dir := t.TempDir()
	for _, c := range []struct {
		name, file, want string
	}{
		{"does not parse", "tls_server_config: [\n", "yaml: line 1: did not find expected node content"},
		{"missing certificate", "tls_server_config:\n  cert_file: missing.crt\n  key_file: " + keyFile + "\n",
			"failed to read cert_file (" + filepath.Join(dir, "missing.crt") + "): open " + filepath.Join(dir, "missing.crt") + ": no such file or directory"},
		{"key without certificate", "tls_server_config:\n  key_file: " + keyFile + "\n", "missing one of cert or cert_file"},
		{"certificate and key swapped", "tls_server_config:\n  cert_file: " + keyFile + "\n  key_file: " + certFile + "\n", "failed to load X509KeyPair: "},
		{"unknown key", "basic_auth_user:\n  prometheus: x\n", "yaml: unmarshal errors: line 1: field basic_auth_user not found in type web.Config"},
		{"unknown nested key", "tls_server_config:\n  cert_file: " + certFile + "\n  keyfile: " + keyFile + "\n",
			"yaml: unmarshal errors: line 3: field keyfile not found in type web.TLSConfig"},
		{"password not hashed", "basic_auth_users:\n  prometheus: secret\n",
			`basic_auth_users: a password is not a bcrypt hash (crypto/bcrypt: hashedSecret too short to be a bcrypted password); make one with htpasswd -nBC 10 "" | tr -d ':\n'`},
		{"no such file", "", "open " + filepath.Join(dir, "no such file.yml") + ": no such file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, "no such file.yml")
			if c.file != "" {
				file = filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yml")
				if err := os.WriteFile(file, []byte(c.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			out, status := cmdtest.RunMain(t, []string{"ITLPROXY_UPSTREAM_URL=http://127.0.0.1:1", "ITLPROXY_WEB_CONFIG_FILE=" + file})
			want := fmt.Sprintf("  ITLPROXY_WEB_CONFIG_FILE=%q: %s", file, c.want)
			if status != 2 || !strings.Contains(out, want) {
				t.Errorf("exit %d with:\n%s\nwant 2 with:\n%s", status, out, want)
			}
		})
	}
}

// hashCommand is the command docs/admin-access.md gives to make a
// password's bcrypt hash.
const hashCommand = `htpasswd -nBC 10 "" | tr -d ':\n'`

// TestDocumentedHashCommand runs the documented command as an operator
// would, typing the password twice, and expects the hash it prints to let
// the password in.
func TestDocumentedHashCommand(t *testing.T) {
	testenv.LookPath(t, "htpasswd", "Debian's apache2-utils: `apt-get install apache2-utils`, as .ci/run does")
	doc := readFile(t, "../../docs/admin-access.md")
	if !strings.Contains(string(doc), hashCommand) {
		t.Fatalf("docs/admin-access.md does not give %s", hashCommand)
	}
	cmd := exec.Command("bash", "-c", hashCommand)
	cmd.Stdin = strings.NewReader("typed-password\ntyped-password\n")
	hash, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if cost, err := bcrypt.Cost(hash); err != nil || cost != 10 {
		t.Fatalf("%s printed %q: cost %d, %v", hashCommand, hash, cost, err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(file, []byte("basic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": "http://127.0.0.1:1", "ITLPROXY_WEB_CONFIG_FILE": file})
	for password, want := range map[string]int{"typed-password": 200, "other-password": 401} {
		if a := ask(t, http.DefaultClient, http.MethodGet, "http://"+in.admin+"/metrics", "prometheus", password); a.code != want {
			t.Errorf("password %q: %d, want %d", password, a.code, want)
		}
	}
}

// TestWebConfigClientCertificates: with a client CA and
// RequireAndVerifyClientCert, a client presenting a certificate of that CA
// is served and one presenting none fails the handshake, the probes
// included, as the start-up warning says.
func TestWebConfigClientCertificates(t *testing.T) {
	pki := newPKI(t)
	_, certFile, keyFile := pki.issue("admin", x509.ExtKeyUsageServerAuth)
	clientCert, _, _ := pki.issue("prometheus", x509.ExtKeyUsageClientAuth)
	files := webFiles(t, certFile, keyFile, nil)
	files["ca.crt"] = readFile(t, pki.caFile)
	files["web.yml"] = append(files["web.yml"], "  client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n"...)
	vol := newConfigMapDir(t, files)
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{clientCert}}}}
	defer withCert.CloseIdleConnections()
	in := startAdmin(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":    "http://127.0.0.1:1",
		"ITLPROXY_WEB_CONFIG_FILE": vol.path("web.yml"),
	}, "https", withCert)
	if a := ask(t, withCert, http.MethodGet, "https://"+in.admin+"/metrics", "", ""); a.code != http.StatusOK {
		t.Errorf("/metrics with a client certificate: %d, want 200", a.code)
	}
	if _, err := tlsClient(pki).Get("https://" + in.admin + "/readyz"); err == nil {
		t.Error("a client without a certificate was served")
	}
	if !containsLine(in.stderr.String(), `"level":"warn"`, "requires a client certificate of every connection") {
		t.Errorf("no warning that the probes present no certificate:\n%s", in.stderr)
	}
}
