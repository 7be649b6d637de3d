package validate

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// exampleHash is a bcrypt hash in the format the chart's schema and
// itlproxy take (its password is not known: nothing logs in with it).
const exampleHash = "$2y$10$Gz5Hq3WWr6wp8g5TDTcTdO5ALLsHRTqJLJ9ZKHRNU1xWZrB8qIrgS"

// webValues guards the admin port with a certificate from the Secret
// itlproxy-admin-tls and the user prometheus, and tells the monitor how to
// authenticate.
func webValues() map[string]any {
	return map[string]any{
		"web": map[string]any{
			"enabled":   true,
			"tlsSecret": "itlproxy-admin-tls",
			"config":    map[string]any{"basic_auth_users": map[string]any{"prometheus": exampleHash}},
		},
		"monitoring": map[string]any{"monitor": map[string]any{
			"basicAuth": map[string]any{
				"username": map[string]any{"name": "itlproxy-scrape", "key": "username"},
				"password": map[string]any{"name": "itlproxy-scrape", "key": "password"},
			},
			"tlsConfig": map[string]any{
				"ca":         map[string]any{"secret": map[string]any{"name": "itlproxy-admin-tls", "key": "ca.crt"}},
				"serverName": "itlproxy-admin",
			},
		}},
	}
}

// merged returns the values of each layer merged in order, maps key by
// key (as Helm merges -f files), anything else replaced.
func merged(layers ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, l := range layers {
		for k, v := range l {
			if m, ok := v.(map[string]any); ok {
				if old, ok := out[k].(map[string]any); ok {
					out[k] = merged(old, m)
					continue
				}
				out[k] = merged(m)
				continue
			}
			out[k] = v
		}
	}
	return out
}

// TestChartWebConfig renders the chart with the admin port guarded, in
// both modes and with both kinds of monitor, and checks it as every
// itlproxy container is checked, which now takes in the web configuration
// file: itlproxy would take it (certificate files mounted beside it,
// bcrypt hashes), the probes speak its scheme, the monitor authenticates
// as it asks.
func TestChartWebConfig(t *testing.T) {
	noTLS := map[string]any{"web": map[string]any{"config": map[string]any{"tls_server_config": nil}},
		"monitoring": map[string]any{"monitor": map[string]any{"tlsConfig": nil}}}
	for _, tc := range []struct {
		name  string
		vals  map[string]any
		https bool
	}{
		{"sidecar", merged(webValues()), true},
		{"sidecar, basic auth without TLS", merged(webValues(), noTLS), false},
		{"gateway, PodMonitor", merged(gatewayValues(), webValues()), true},
		{"gateway, ServiceMonitor", merged(gatewayValues(), webValues(), map[string]any{"monitoring": map[string]any{"monitor": map[string]any{"kind": "ServiceMonitor"}}}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gateway := tc.vals["mode"] == "gateway"
			var extra map[string]string
			if !gateway {
				extra = map[string]string{"model-server.yaml": modelServer}
			}
			r, files := mustRenderChart(t, tc.vals, extra)
			if len(r.deployments) != 1 {
				t.Fatalf("%d Deployments, want 1", len(r.deployments))
			}
			d := r.deployments[0]
			pod := d.Spec.Template.Spec
			var c corev1.Container
			if gateway {
				checkGateway(t, r, d, tc.vals, clusterIPUpstream)
				c = pod.Containers[0]
			} else {
				checkSidecar(t, r, d)
				c = pod.InitContainers[slices.IndexFunc(pod.InitContainers, func(c corev1.Container) bool { return c.Name == "itlproxy" })]
			}
			w := checkWebConfig(t, r, pod, c, effectiveEnv(t, r, c)["ITLPROXY_WEB_CONFIG_FILE"])
			if w.file == "" || w.https != tc.https || w.users != 1 {
				t.Errorf("the web configuration file: %+v, want HTTPS %v and one user", w, tc.https)
			}
			if !strings.Contains(files["NOTES.txt"], "The admin port asks for the credentials") {
				t.Errorf("the notes do not say the admin port is guarded:\n%s", files["NOTES.txt"])
			}
		})
	}
}

// TestChartWebConfigRejects: a web configuration the admin port or
// Prometheus could not use fails the install, saying which value.
func TestChartWebConfigRejects(t *testing.T) {
	users := func(u map[string]any) map[string]any {
		return map[string]any{"web": map[string]any{"config": map[string]any{"basic_auth_users": u}}}
	}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"a password, not its hash", merged(webValues(), users(map[string]any{"prometheus": "s3cret"})),
			"at '/web/config/basic_auth_users/prometheus': 's3cret' does not match pattern"},
		{"misspelt key of the file", merged(webValues(), map[string]any{"web": map[string]any{"config": map[string]any{"basic_auth_user": map[string]any{}}}}),
			"at '/web/config': additional properties 'basic_auth_user' not allowed"},
		{"TLS without the certificate's Secret", merged(webValues(), map[string]any{"web": map[string]any{"tlsSecret": ""}}),
			"web.tlsSecret: the kubernetes.io/tls Secret"},
		{"users without the monitor's basicAuth", merged(webValues(), map[string]any{"monitoring": map[string]any{"monitor": map[string]any{"basicAuth": nil}}}),
			"monitoring.monitor.basicAuth: the admin port asks for the credentials"},
		{"TLS without the monitor's tlsConfig", merged(webValues(), map[string]any{"monitoring": map[string]any{"monitor": map[string]any{"tlsConfig": nil}}}),
			"monitoring.monitor.tlsConfig: the admin port speaks HTTPS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := renderChart(tc.vals, map[string]string{"model-server.yaml": modelServer})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
