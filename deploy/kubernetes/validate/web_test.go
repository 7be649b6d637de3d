package validate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"maps"
	"math/big"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
)

// adminWeb is what the admin port's web configuration file
// (ITLPROXY_WEB_CONFIG_FILE) says, as the tests found it mounted.
type adminWeb struct {
	file  string // "" when the variable is unset
	https bool   // it sets tls_server_config
	users int    // its basic_auth_users
}

// probeScheme is the scheme the kubelet's probes of the admin port need.
func (w adminWeb) probeScheme() corev1.URIScheme {
	if w.https {
		return corev1.URISchemeHTTPS
	}
	return corev1.URISchemeHTTP
}

// checkWebConfig follows ITLPROXY_WEB_CONFIG_FILE, when set, to the volume
// mounted at its directory, lays that volume out in a directory as the
// kubelet would, and checks the file there with exporter-toolkit's
// web.Validate, as itlproxy does at start: strictly, with the certificate
// files it names and its bcrypt hashes. A Secret the manifests do not
// render (the certificate's, from cert-manager or kubectl) is laid out as
// a kubernetes.io/tls Secret of cert-manager's: tls.crt, tls.key, ca.crt.
func checkWebConfig(t *testing.T, r *rendered, pod corev1.PodSpec, c corev1.Container, file string) adminWeb {
	t.Helper()
	if file == "" {
		return adminWeb{}
	}
	dir, name := path.Split(file)
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return path.Clean(m.MountPath) == path.Clean(dir) })
	if i < 0 {
		t.Errorf("ITLPROXY_WEB_CONFIG_FILE=%s: no volume mounted at %s", file, dir)
		return adminWeb{}
	}
	j := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[i].Name })
	if j < 0 {
		t.Errorf("ITLPROXY_WEB_CONFIG_FILE=%s: the pod has no volume %s", file, c.VolumeMounts[i].Name)
		return adminWeb{}
	}
	local := t.TempDir()
	for _, s := range secretSources(pod.Volumes[j]) {
		layOutSecret(t, r, s, local)
	}
	localFile := filepath.Join(local, name)
	data, err := os.ReadFile(localFile)
	if err != nil {
		t.Errorf("ITLPROXY_WEB_CONFIG_FILE=%s: no such file in volume %s (its Secrets hold no key %s)", file, pod.Volumes[j].Name, name)
		return adminWeb{}
	}
	if err := web.Validate(localFile); err != nil {
		t.Errorf("ITLPROXY_WEB_CONFIG_FILE=%s: itlproxy would refuse it: %v\n%s", file, err, data)
		return adminWeb{}
	}
	var cfg web.Config
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	return adminWeb{file: file, https: cfg.TLSConfig.IsEnabled(), users: len(cfg.Users)}
}

// secretSources returns the Secrets a volume shows: a secret volume's, or
// each secret source of a projected volume.
func secretSources(v corev1.Volume) []corev1.SecretProjection {
	switch {
	case v.Secret != nil:
		return []corev1.SecretProjection{{LocalObjectReference: corev1.LocalObjectReference{Name: v.Secret.SecretName}, Items: v.Secret.Items}}
	case v.Projected != nil:
		var out []corev1.SecretProjection
		for _, s := range v.Projected.Sources {
			if s.Secret != nil {
				out = append(out, *s.Secret)
			}
		}
		return out
	}
	return nil
}

// layOutSecret writes the keys of Secret s into dir, under the paths its
// items give (each key under its own name without items).
func layOutSecret(t *testing.T, r *rendered, s corev1.SecretProjection, dir string) {
	t.Helper()
	data := map[string][]byte{}
	if secret, ok := r.secrets[s.Name]; ok {
		for k, v := range secret.Data {
			data[k] = v
		}
		for k, v := range secret.StringData {
			data[k] = []byte(v)
		}
	} else {
		data = certificateSecret(t)
	}
	paths := map[string]string{}
	for k := range data {
		paths[k] = k
	}
	if len(s.Items) > 0 {
		paths = map[string]string{}
		for _, it := range s.Items {
			paths[it.Key] = it.Path
		}
	}
	for k, p := range paths {
		if _, ok := data[k]; !ok {
			t.Errorf("Secret %s has no key %s", s.Name, k)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, p), data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// certificateSecret is what cert-manager writes into a Certificate's
// Secret: a certificate, its key and the CA's certificate (here
// self-signed, so the CA is the certificate).
func certificateSecret(t *testing.T) map[string][]byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "itlproxy-admin"},
		DNSNames:     []string{"itlproxy-admin"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return map[string][]byte{
		"tls.crt": cert,
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		"ca.crt":  cert,
	}
}

// checkScrapeAuth wants a monitor's endpoint of the admin port to
// authenticate as the web configuration file asks: over HTTPS, verifying
// the certificate against a CA for a name (Prometheus scrapes pod IPs,
// which the certificate does not name), when it sets a certificate; with
// basic auth from a Secret when it lists users; neither without a file.
func checkScrapeAuth(t *testing.T, monitor string, scheme *monitoringv1.Scheme, tlsConfig *monitoringv1.SafeTLSConfig, basicAuth *monitoringv1.BasicAuth, w adminWeb) {
	t.Helper()
	wantScheme := "http"
	if w.https {
		wantScheme = "https"
	}
	if got := scheme.String(); got != wantScheme && !(got == "" && wantScheme == "http") {
		t.Errorf("%s scrapes the admin port over %q: it speaks %s", monitor, got, wantScheme)
	}
	switch {
	case w.https && tlsConfig == nil:
		t.Errorf("%s: no tlsConfig: Prometheus cannot verify the admin port's certificate", monitor)
	case w.https:
		ca := tlsConfig.CA
		if ca.Secret == nil && ca.ConfigMap == nil || tlsConfig.ServerName == nil || *tlsConfig.ServerName == "" ||
			tlsConfig.InsecureSkipVerify != nil && *tlsConfig.InsecureSkipVerify {
			t.Errorf("%s: tlsConfig %+v: want a CA and a serverName, and the certificate verified", monitor, tlsConfig)
		}
	case tlsConfig != nil:
		t.Errorf("%s: a tlsConfig for an admin port without TLS", monitor)
	}
	switch {
	case w.users > 0 && basicAuth == nil:
		t.Errorf("%s: no basicAuth: the admin port asks for the credentials of its basic_auth_users (%d)", monitor, w.users)
	case w.users > 0 && (basicAuth.Username.Name == "" || basicAuth.Username.Key == "" || basicAuth.Password.Name == "" || basicAuth.Password.Key == ""):
		t.Errorf("%s: basicAuth %+v: want the user name and the password from Secrets", monitor, basicAuth)
	case w.users == 0 && basicAuth != nil:
		t.Errorf("%s: basicAuth for an admin port that asks for none", monitor)
	}
}

// TestWebConfigExample: the web-config example's sidecar takes the web
// configuration file generated from its web.yml (HTTPS and one user), from
// a Secret whose name does not change with its contents, so that the
// kubelet updates the mounted file in place. (TestSidecar checks the rest:
// probes, PodMonitor.)
func TestWebConfigExample(t *testing.T) {
	r := render(t, filepath.Join(kubernetesDir, "examples", "web-config"))
	if len(r.deployments) != 1 {
		t.Fatalf("%d Deployments, want 1", len(r.deployments))
	}
	pod := r.deployments[0].Spec.Template.Spec
	c := sidecarOf(t, pod)
	env := effectiveEnv(t, r, c)
	w := checkWebConfig(t, r, pod, c, env["ITLPROXY_WEB_CONFIG_FILE"])
	if !w.https || w.users != 1 {
		t.Errorf("the web configuration file: %+v, want HTTPS and one user", w)
	}
	if _, ok := r.secrets["itlproxy-web"]; !ok {
		t.Errorf("no Secret itlproxy-web (a hash suffix would roll the pods at every password change): %v", slices.Sorted(maps.Keys(r.secrets)))
	}
}
