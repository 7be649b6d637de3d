package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/reload"
)

// TestLifecycleOffByDefault: without ITLPROXY_WEB_ENABLE_LIFECYCLE, POST
// /-/reload answers 403 and reloads nothing, while SIGHUP still reloads.
func TestLifecycleOffByDefault(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	vol := newConfigMapDir(t, map[string][]byte{"slo.yaml": []byte("default: {itl: 20ms}\n")})
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL, "ITLPROXY_SLO_FILE": vol.path("slo.yaml")})
	waitITL(t, in, "the start", "_other", 0.02)

	vol.editUnseen("slo.yaml", []byte("default: {itl: 30ms}\n"))
	code, msg := postReload(t, in.admin)
	if code != http.StatusForbidden || !strings.Contains(msg, "ITLPROXY_WEB_ENABLE_LIFECYCLE=true") {
		t.Errorf("POST /-/reload without the lifecycle flag: %d %q, want 403 naming the flag", code, msg)
	}
	time.Sleep(3 * reload.SettleDelay)
	if got := itlObjective(in, "_other"); got != 0.02 {
		t.Errorf("itl objective %v after a refused POST /-/reload, want 0.02 still", got)
	}
	if strings.Contains(in.stderr.String(), `"trigger":"http"`) {
		t.Error("a reload by http is logged")
	}

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitITL(t, in, "SIGHUP without the lifecycle flag", "_other", 0.03)
}

// TestLifecycleOn: with ITLPROXY_WEB_ENABLE_LIFECYCLE=true, POST
// /-/reload reloads, behind the web configuration file's basic auth like
// every admin path (here without TLS, which the start-up log warns of).
func TestLifecycleOn(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	vol := newConfigMapDir(t, map[string][]byte{"slo.yaml": []byte("default: {itl: 20ms}\n")})
	web := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(web, webFiles(t, "", "", map[string]string{"operator": "reload-password"})["web.yml"], 0o600); err != nil {
		t.Fatal(err)
	}
	in := start(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":         up.URL,
		"ITLPROXY_SLO_FILE":             vol.path("slo.yaml"),
		"ITLPROXY_WEB_CONFIG_FILE":      web,
		"ITLPROXY_WEB_ENABLE_LIFECYCLE": "true",
	})
	if !containsLine(in.stderr.String(), `"level":"warn"`, "basic_auth_users but no tls_server_config") {
		t.Errorf("no warning of passwords in clear text:\n%s", in.stderr)
	}
	objective := func() string {
		a := ask(t, http.DefaultClient, http.MethodGet, "http://"+in.admin+"/metrics", "operator", "reload-password")
		return grep(a.body, `itlproxy_slo_objective_seconds{class="default",model="_other",slo="itl"}`)
	}
	if got := objective(); !strings.HasSuffix(got, " 0.02") {
		t.Fatalf("itl objective at start: %q", got)
	}
	vol.editUnseen("slo.yaml", []byte("default: {itl: 30ms}\n"))
	reload := "http://" + in.admin + "/-/reload"
	if a := ask(t, http.DefaultClient, http.MethodPost, reload, "", ""); a.code != http.StatusUnauthorized {
		t.Errorf("POST /-/reload without credentials: %d, want 401", a.code)
	}
	if got := objective(); !strings.HasSuffix(got, " 0.02") {
		t.Errorf("itl objective after a refused POST /-/reload: %q, want 0.02 still", got)
	}
	if a := ask(t, http.DefaultClient, http.MethodPost, reload, "operator", "reload-password"); a.code != http.StatusOK || a.body != "reloaded\n" {
		t.Errorf("POST /-/reload with the lifecycle flag and credentials: %d %q, want 200", a.code, a.body)
	}
	if got := objective(); !strings.HasSuffix(got, " 0.03") {
		t.Errorf("itl objective after POST /-/reload: %q, want 0.03", got)
	}
}
