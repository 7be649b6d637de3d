package main

import (
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/e2e"
)

// TestPrometheusScrapesGuardedAdmin: a real Prometheus scrapes the admin
// listener over TLS, verifying its certificate, with basic auth, as a
// scrape config, a ServiceMonitor or a PodMonitor sets it up: up is 1 with
// the right password, 0 with a wrong one, with none, and over cleartext.
func TestPrometheusScrapesGuardedAdmin(t *testing.T) {
	pki := newPKI(t)
	_, certFile, keyFile := pki.issue("admin", x509.ExtKeyUsageServerAuth)
	vol := newConfigMapDir(t, webFiles(t, certFile, keyFile, map[string]string{"prometheus": "scrape-password"}))
	in := startAdmin(t, nil, map[string]string{
		"ITLPROXY_UPSTREAM_URL":    "http://127.0.0.1:1",
		"ITLPROXY_WEB_CONFIG_FILE": vol.path("web.yml"),
	}, "https", tlsClient(pki))

	job := func(name, scheme, auth string) string {
		return fmt.Sprintf(`  - job_name: %s
    scheme: %s
    tls_config:
      ca_file: %q
%s    static_configs:
      - targets: [%q]
`, name, scheme, pki.caFile, auth, in.admin)
	}
	basicAuth := func(password string) string {
		return fmt.Sprintf("    basic_auth:\n      username: prometheus\n      password: %q\n", password)
	}
	prom := e2e.StartPrometheusScraping(t,
		job("right-password", "https", basicAuth("scrape-password"))+
			job("wrong-password", "https", basicAuth("not-the-password"))+
			job("no-credentials", "https", "")+
			job("cleartext", "http", basicAuth("scrape-password")))

	want := map[string]string{"right-password": "1", "wrong-password": "0", "no-credentials": "0", "cleartext": "0"}
	up := map[string]string{}
	waitFor(t, "every job to be scraped", 20*time.Second, func() bool {
		for _, s := range prom.Query("up") {
			up[s.Metric["job"]] = fmt.Sprint(s.Value[1])
		}
		return len(up) == len(want)
	})
	for job, v := range want {
		if up[job] != v {
			t.Errorf("up{job=%q} = %s, want %s", job, up[job], v)
		}
	}
	if n := len(prom.Query(`itlproxy_build_info{job="right-password"}`)); n != 1 {
		t.Errorf("%d itlproxy_build_info series scraped with the right password, want 1", n)
	}
	// The refusals are the admin listener's: 401 to the wrong and missing
	// credentials, 400 to cleartext; not a certificate Prometheus distrusts.
	for _, target := range prom.Targets() {
		job, err := target.Labels["job"], target.LastError
		switch {
		case job == "right-password" && err != "",
			(job == "wrong-password" || job == "no-credentials") && !strings.Contains(err, "401"),
			job == "cleartext" && !strings.Contains(err, "400"):
			t.Errorf("job %s: last error %q", job, err)
		}
	}
}
