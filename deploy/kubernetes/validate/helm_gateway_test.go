package validate

import (
	"slices"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestChartGateway checks the gateway mode: a Deployment of plain
// itlproxy containers checked as the sidecar is (image, ports, probes,
// security, resources, shutdown, objectives), forwarding to the model
// Service; a Service of the proxy port; a PodDisruptionBudget; replicas
// spread over the topology keys; the HorizontalPodAutoscaler when
// enabled; the monitor of either kind scraping every replica.
func TestChartGateway(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
	}{
		{"defaults", gatewayValues()},
		{"autoscaling, ServiceMonitor, other ports", merged(gatewayValues(), map[string]any{
			"ports": map[string]any{"proxy": 8081, "admin": 9091},
			"gateway": map[string]any{
				"autoscaling":         map[string]any{"enabled": true, "minReplicas": 3, "maxReplicas": 12},
				"podDisruptionBudget": map[string]any{"maxUnavailable": "25%"},
				"topologySpread":      map[string]any{"topologyKeys": []any{"kubernetes.io/hostname"}},
				"service":             map[string]any{"sessionAffinity": "ClientIP"},
			},
			"monitoring": map[string]any{"monitor": map[string]any{"kind": "ServiceMonitor", "interval": "15s"}},
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := mustRenderChart(t, tc.vals, nil)
			if len(r.deployments) != 1 {
				t.Fatalf("%d Deployments, want 1", len(r.deployments))
			}
			checkGateway(t, r, r.deployments[0], tc.vals, clusterIPUpstream)
		})
	}
}

func checkGateway(t *testing.T, r *rendered, d *appsv1.Deployment, vals map[string]any, want gatewayUpstream) {
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 || pod.Containers[0].Name != "itlproxy" || len(pod.InitContainers) != 0 {
		t.Fatalf("containers %d, init containers %d: want itlproxy alone", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	if c.RestartPolicy != nil {
		t.Errorf("restartPolicy %s on a plain container", *c.RestartPolicy)
	}
	env, proxyPort, adminPort, web := checkContainer(t, r, pod, c)
	checkGatewayUpstream(t, r, d, env, want)
	if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	if d.Spec.Template.Labels[sidecarLabel] != "" {
		t.Errorf("gateway pods labelled %s: a sidecar PodMonitor would scrape them twice", sidecarLabel)
	}
	if d.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("no checksum/config annotation: a changed ConfigMap would not roll the replicas")
	}
	checkService(t, r, d, c, proxyPort, adminPort)
	wantAffinity := corev1.ServiceAffinityNone
	if svc, _ := vals["gateway"].(map[string]any)["service"].(map[string]any); svc != nil {
		wantAffinity = corev1.ServiceAffinity(svc["sessionAffinity"].(string))
	}
	for _, s := range r.services {
		if s.Name == d.Name && s.Spec.SessionAffinity != wantAffinity {
			t.Errorf("Service %s sessionAffinity %q, want %q", s.Name, s.Spec.SessionAffinity, wantAffinity)
		}
	}
	checkPDB(t, r, d)
	checkSpread(t, d)
	checkHPA(t, r, d, vals["gateway"].(map[string]any)["autoscaling"] != nil)
	if len(r.serviceMonitors) > 0 {
		checkServiceMonitor(t, r, d, c, adminPort, web)
	} else {
		checkPodMonitor(t, r, d, c, adminPort, web)
	}
}

func checkPDB(t *testing.T, r *rendered, d *appsv1.Deployment) {
	t.Helper()
	if len(r.pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(r.pdbs))
	}
	p := r.pdbs[0]
	if p.Spec.Selector == nil || !selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget %s does not select the gateway's pods", p.Name)
	}
	if p.Spec.MaxUnavailable == nil || p.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget %s: want maxUnavailable (minAvailable would block draining a node of a single replica)", p.Name)
	}
}

// checkSpread wants every topology spread constraint to select the
// gateway's own pods.
func checkSpread(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	spread := d.Spec.Template.Spec.TopologySpreadConstraints
	if len(spread) == 0 {
		t.Error("no topologySpreadConstraints: the replicas may share a node")
	}
	for _, s := range spread {
		if s.LabelSelector == nil || !selects(s.LabelSelector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("topology spread over %s does not select the gateway's pods", s.TopologyKey)
		}
		if s.WhenUnsatisfiable != corev1.ScheduleAnyway {
			t.Errorf("topology spread over %s: %s, want ScheduleAnyway (a zone down must not stop scheduling)", s.TopologyKey, s.WhenUnsatisfiable)
		}
	}
}

// checkHPA wants, when autoscaling is on, one HorizontalPodAutoscaler of
// the Deployment on CPU and no replicas in the Deployment (the autoscaler
// owns them; Helm would reset them at every upgrade); otherwise none.
func checkHPA(t *testing.T, r *rendered, d *appsv1.Deployment, enabled bool) {
	t.Helper()
	if !enabled {
		if len(r.hpas) != 0 || d.Spec.Replicas == nil {
			t.Errorf("autoscaling off: %d HorizontalPodAutoscalers, replicas %s: want none and replicas set", len(r.hpas), deref(d.Spec.Replicas))
		}
		return
	}
	if len(r.hpas) != 1 || d.Spec.Replicas != nil {
		t.Fatalf("autoscaling on: %d HorizontalPodAutoscalers, replicas %s: want one and replicas unset", len(r.hpas), deref(d.Spec.Replicas))
	}
	h := r.hpas[0]
	if ref := h.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
		t.Errorf("HorizontalPodAutoscaler scales %+v, want the Deployment %s", ref, d.Name)
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
		t.Errorf("replicas %s to %d: want 1 <= min <= max", deref(h.Spec.MinReplicas), h.Spec.MaxReplicas)
	}
	if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].Resource == nil || h.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU ||
		h.Spec.Metrics[0].Resource.Target.AverageUtilization == nil {
		t.Errorf("HorizontalPodAutoscaler metrics %+v: want CPU utilization", h.Spec.Metrics)
	}
}

// checkServiceMonitor wants a ServiceMonitor selecting a Service of the
// gateway's pods whose port, named by the monitor, targets itlproxy's
// admin port, scraping /metrics with honorLabels (see checkPodMonitor).
func checkServiceMonitor(t *testing.T, r *rendered, d *appsv1.Deployment, c corev1.Container, adminPort int32, web adminWeb) {
	t.Helper()
	for _, sm := range r.serviceMonitors {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("ServiceMonitor %s: selector %v: %v", sm.Name, sm.Spec.Selector, err)
			continue
		}
		for _, s := range r.services {
			if !sel.Matches(labels.Set(s.Labels)) || !selects(s.Spec.Selector, d.Spec.Template.Labels) {
				continue
			}
			for _, e := range sm.Spec.Endpoints {
				i := slices.IndexFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port })
				if i < 0 || portNumber(c, s.Spec.Ports[i].TargetPort) != adminPort || (e.Path != "" && e.Path != "/metrics") {
					continue
				}
				if !e.HonorLabels {
					t.Errorf("ServiceMonitor %s: honorLabels is false: itlproxy's endpoint label would become exported_endpoint", sm.Name)
				}
				var tlsConfig *monitoringv1.SafeTLSConfig
				if e.TLSConfig != nil {
					tlsConfig = &e.TLSConfig.SafeTLSConfig
				}
				checkScrapeAuth(t, "ServiceMonitor "+sm.Name, e.Scheme, tlsConfig, e.BasicAuth, web)
				return
			}
		}
	}
	t.Errorf("no ServiceMonitor scrapes /metrics on the admin port of the pods of %s", d.Name)
}
