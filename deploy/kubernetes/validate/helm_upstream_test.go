package validate

import (
	"maps"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// gatewayUpstream is where a gateway's replicas must forward, as its
// values say.
type gatewayUpstream struct {
	url string // ITLPROXY_UPSTREAM_URL
	// resolve: ITLPROXY_UPSTREAM_RESOLVE=dns, with the interval, the cap
	// on endpoints and the DNS server ("": the variable unset).
	resolve                          bool
	interval, maxEndpoints, resolver string
	// headless is the headless Service the chart must create, nil when
	// it creates none.
	headless *headlessService
}

// headlessService is what the chart's headless Service of the model
// server's pods must be.
type headlessService struct {
	name     string
	selector map[string]string
	port     int32
}

// clusterIPUpstream is gatewayValues' upstream: the model Service, as it
// is, not resolved.
var clusterIPUpstream = gatewayUpstream{url: "http://vllm.llm.svc:8000"}

// vllmPods are the model server's pod labels, which a headless Service of
// the chart's selects.
var vllmPods = map[string]string{"app.kubernetes.io/name": "vllm"}

// TestChartGatewayUpstreams renders the gateway in front of each kind of
// upstream: the headless Service the chart creates (default name and
// settings, and every setting changed), a headless Service of the user's,
// and a URL resolved on request; each checked as TestChartGateway checks
// the gateway, and for the environment that makes itlproxy resolve the
// name and balance over its pods, the Service (headless, selecting the
// model server's pods on their port) and the URL naming it.
func TestChartGatewayUpstreams(t *testing.T) {
	created := map[string]any{"create": true, "selector": map[string]any{"app.kubernetes.io/name": "vllm"}}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want gatewayUpstream
	}{
		{"headless Service created", headlessValues(created, nil), gatewayUpstream{
			url:     "http://llm-itlproxy-upstream.llm.svc.cluster.local:8000",
			resolve: true, interval: "5s", maxEndpoints: "64",
			headless: &headlessService{name: "llm-itlproxy-upstream", selector: vllmPods, port: 8000},
		}},
		{"headless Service created, every setting", headlessValues(
			merged(created, map[string]any{"name": "vllm-pods", "port": 8001, "clusterDomain": "example.internal"}),
			map[string]any{"resolve": "dns", "resolveInterval": "2s", "maxEndpoints": 16, "resolver": "10.96.0.10:53"}),
			gatewayUpstream{
				url:     "http://vllm-pods.llm.svc.example.internal:8001",
				resolve: true, interval: "2s", maxEndpoints: "16", resolver: "10.96.0.10:53",
				headless: &headlessService{name: "vllm-pods", selector: vllmPods, port: 8001},
			}},
		{"headless Service of the user's", headlessValues(map[string]any{"name": "vllm-headless"}, nil), gatewayUpstream{
			url:     "http://vllm-headless.llm.svc.cluster.local:8000",
			resolve: true, interval: "5s", maxEndpoints: "64",
		}},
		{"URL of a headless Service elsewhere, resolved", merged(map[string]any{"mode": "gateway", "gateway": map[string]any{
			"upstreamURL": "http://vllm-pods.models.svc.cluster.local:8000",
			"upstream":    map[string]any{"resolve": "dns"},
		}}), gatewayUpstream{
			url:     "http://vllm-pods.models.svc.cluster.local:8000",
			resolve: true, interval: "5s", maxEndpoints: "64",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, files := mustRenderChart(t, tc.vals, nil)
			if len(r.deployments) != 1 {
				t.Fatalf("%d Deployments, want 1", len(r.deployments))
			}
			checkGateway(t, r, r.deployments[0], tc.vals, tc.want)
			notes := files["NOTES.txt"]
			if !strings.Contains(notes, tc.want.url) || !strings.Contains(notes, "Upstream endpoints") {
				t.Errorf("the notes lack the upstream %s or the per-endpoint row:\n%s", tc.want.url, notes)
			}
			if h := tc.want.headless; h != nil && !strings.Contains(notes, "created the headless Service "+h.name) {
				t.Errorf("the notes do not name the headless Service %s:\n%s", h.name, notes)
			}
		})
	}
}

// headlessValues runs the chart as a gateway in front of a headless
// Service, with upstream settings when given.
func headlessValues(headless, upstream map[string]any) map[string]any {
	g := map[string]any{"headlessService": headless}
	if upstream != nil {
		g["upstream"] = upstream
	}
	return merged(map[string]any{"mode": "gateway", "gateway": g})
}

// checkGatewayUpstream checks the gateway's upstream variables against
// want and, for a headless Service of the chart's, the Service.
func checkGatewayUpstream(t *testing.T, r *rendered, d *appsv1.Deployment, env map[string]string, want gatewayUpstream) {
	t.Helper()
	if env["ITLPROXY_UPSTREAM_URL"] != want.url {
		t.Errorf("ITLPROXY_UPSTREAM_URL=%q, want %q", env["ITLPROXY_UPSTREAM_URL"], want.url)
	}
	wantEnv := map[string]string{"ITLPROXY_UPSTREAM_RESOLVE": "", "ITLPROXY_UPSTREAM_RESOLVE_INTERVAL": "",
		"ITLPROXY_UPSTREAM_MAX_ENDPOINTS": "", "ITLPROXY_UPSTREAM_RESOLVER": ""}
	if want.resolve {
		wantEnv = map[string]string{"ITLPROXY_UPSTREAM_RESOLVE": "dns", "ITLPROXY_UPSTREAM_RESOLVE_INTERVAL": want.interval,
			"ITLPROXY_UPSTREAM_MAX_ENDPOINTS": want.maxEndpoints, "ITLPROXY_UPSTREAM_RESOLVER": want.resolver}
		// As itlproxy checks it at start: one URL, whose host is a name.
		u, err := url.Parse(env["ITLPROXY_UPSTREAM_URL"])
		if err != nil || strings.Contains(env["ITLPROXY_UPSTREAM_URL"], ",") || net.ParseIP(u.Hostname()) != nil {
			t.Errorf("ITLPROXY_UPSTREAM_URL=%q with ITLPROXY_UPSTREAM_RESOLVE=dns: want one URL naming a host", env["ITLPROXY_UPSTREAM_URL"])
		}
	}
	for k, v := range wantEnv {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	for _, s := range r.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone && s.Labels["itlproxy/metrics"] == "" && (want.headless == nil || s.Name != want.headless.name) {
			t.Errorf("headless Service %s rendered: want none but the ServiceMonitor's and %v", s.Name, want.headless)
		}
	}
	if want.headless != nil {
		svc := checkHeadlessService(t, r, d, *want.headless)
		checkChartHeadlessURL(t, env["ITLPROXY_UPSTREAM_URL"], svc, want.headless.port)
	}
}

// checkHeadlessService wants the Service want names to be headless, to
// select the model server's pods (want's selector) and not the gateway's,
// on the port the pods listen on (a headless name resolves to the pods'
// addresses: the connection goes to targetPort, which must be the
// Service's port). It returns the Service.
func checkHeadlessService(t *testing.T, r *rendered, d *appsv1.Deployment, want headlessService) *corev1.Service {
	t.Helper()
	var svc *corev1.Service
	for _, s := range r.services {
		if s.Name == want.name {
			svc = s
		}
	}
	if svc == nil {
		t.Fatalf("no Service %s rendered", want.name)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s clusterIP %q, want None: a virtual IP would be one endpoint for every pod", svc.Name, svc.Spec.ClusterIP)
	}
	if len(svc.Spec.Selector) == 0 || !maps.Equal(svc.Spec.Selector, want.selector) {
		t.Errorf("Service %s selects %v, want the model server's pods %v", svc.Name, svc.Spec.Selector, want.selector)
	}
	if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("Service %s selects the gateway's own pods", svc.Name)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != want.port || svc.Spec.Ports[0].TargetPort.IntValue() != int(want.port) {
		t.Errorf("Service %s ports %+v, want one, port and targetPort %d", svc.Name, svc.Spec.Ports, want.port)
	}
	return svc
}

// checkChartHeadlessURL wants rawURL to name svc in the release's
// namespace by its name in the cluster's DNS, on port.
func checkChartHeadlessURL(t *testing.T, rawURL string, svc *corev1.Service, port int32) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := strings.Cut(u.Hostname(), ".svc.")
	if u.Scheme != "http" || host != svc.Name+"."+namespace || u.Port() != strconv.Itoa(int(port)) {
		t.Errorf("ITLPROXY_UPSTREAM_URL=%s: want http://%s.%s.svc.<cluster domain>:%d, the Service's name", rawURL, svc.Name, namespace, port)
	}
}

// TestChartGatewayUpstreamRejects: a misspelt upstream value, or one that
// contradicts another (two upstreams, a headless Service not resolved, a
// selector with nothing to select for), fails the install and says where.
func TestChartGatewayUpstreamRejects(t *testing.T) {
	selector := map[string]any{"app.kubernetes.io/name": "vllm"}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"misspelt key", headlessValues(map[string]any{"create": true, "selecter": selector}, nil),
			"at '/gateway/headlessService': additional properties 'selecter' not allowed"},
		{"misspelt resolve", headlessValues(map[string]any{"name": "vllm-headless"}, map[string]any{"resolve": "DNS"}),
			"at '/gateway/upstream/resolve': value must be one of"},
		{"an upstream URL and a headless Service", merged(gatewayValues(), headlessValues(map[string]any{"create": true, "selector": selector}, nil)),
			"at '/gateway/headlessService/create': value must be false"},
		{"an upstream URL and a headless Service of the user's", merged(gatewayValues(), headlessValues(map[string]any{"name": "vllm-headless"}, nil)),
			"at '/gateway/headlessService/name': value must be ''"},
		{"a headless Service to create without a selector", headlessValues(map[string]any{"create": true}, nil),
			"at '/gateway/headlessService/selector': minProperties"},
		{"a selector for a Service the chart does not create", headlessValues(map[string]any{"name": "vllm-headless", "selector": selector}, nil),
			"at '/gateway/headlessService/selector': maxProperties"},
		{"a headless Service not resolved", headlessValues(map[string]any{"name": "vllm-headless"}, map[string]any{"resolve": "none"}),
			"at '/gateway/upstream/resolve': value must be one of '', 'dns'"},
		{"dns with a list of URLs", merged(gatewayValues(), map[string]any{"gateway": map[string]any{
			"upstreamURL": "http://10.0.0.1:8000,http://10.0.0.2:8000", "upstream": map[string]any{"resolve": "dns"}}}),
			"at '/gateway/upstream/resolve': value must be one of '', 'none'"},
		{"dns with an address", merged(gatewayValues(), map[string]any{"gateway": map[string]any{
			"upstreamURL": "http://10.0.0.1:8000", "upstream": map[string]any{"resolve": "dns"}}}),
			"at '/gateway/upstream/resolve': value must be one of '', 'none'"},
		{"no interval", headlessValues(map[string]any{"name": "vllm-headless"}, map[string]any{"resolveInterval": "0s"}),
			"at '/gateway/upstream/resolveInterval': 'not' failed"},
		{"a resolver without its port", headlessValues(map[string]any{"name": "vllm-headless"}, map[string]any{"resolver": "10.96.0.10"}),
			"at '/gateway/upstream/resolver': '10.96.0.10' does not match pattern"},
		{"a headless Service in sidecar mode", map[string]any{"gateway": map[string]any{"headlessService": map[string]any{"create": true, "selector": selector}}},
			"at '/gateway/headlessService/create': value must be false"},
		{"a selector of the gateway's own pods", headlessValues(map[string]any{"create": true, "selector": map[string]any{"app.kubernetes.io/instance": release}}, nil),
			"gateway.headlessService.selector map[app.kubernetes.io/instance:llm] selects the gateway's own pods"},
		{"the gateway's own Service's name", headlessValues(map[string]any{"create": true, "selector": selector, "name": fullname}, nil),
			"gateway.headlessService.name: llm-itlproxy is a Service of the gateway's own"},
		{"no upstream at all", map[string]any{"mode": "gateway"},
			"gateway.upstreamURL or gateway.headlessService: the model Service"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := renderChart(tc.vals, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("values %v: error %v, want one containing %q", tc.vals, err, tc.want)
			}
		})
	}
}
