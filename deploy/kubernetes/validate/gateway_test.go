package validate

import (
	"encoding/json"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// isGateway reports whether d runs itlproxy as a gateway of its own: a
// plain container of its pods, not a sidecar beside a model server.
func isGateway(d *appsv1.Deployment) bool {
	return slices.ContainsFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "itlproxy" })
}

// TestGateway checks the itlproxy gateway in every Deployment of the
// kustomizations that runs it (examples/gateway, and overlays of it) as
// the chart's gateway is checked: itlproxy alone in its pods, checked as
// the sidecar is, its container the component's setting for setting, a
// Service of its proxy port, a PodMonitor, a PodDisruptionBudget, replicas
// spread; and its upstream a headless Service of the kustomization,
// resolved, whose pods it balances over.
func TestGateway(t *testing.T) {
	builds, _ := kustomizations(t)
	n := 0
	for _, dir := range builds {
		r := render(t, dir)
		for _, d := range r.deployments {
			if !isGateway(d) {
				continue
			}
			n++
			t.Run(path.Join(dir, d.Name), func(t *testing.T) { checkKustomizeGateway(t, r, d) })
		}
	}
	if n == 0 {
		t.Error("no kustomization renders an itlproxy gateway")
	}
}

func checkKustomizeGateway(t *testing.T, r *rendered, d *appsv1.Deployment) {
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("containers %d, init containers %d: want itlproxy alone", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	if c.RestartPolicy != nil {
		t.Errorf("restartPolicy %s on a plain container", *c.RestartPolicy)
	}
	if d.Spec.Template.Labels[sidecarLabel] != "" {
		t.Errorf("gateway pods labelled %s: the sidecar's PodMonitor would scrape them twice", sidecarLabel)
	}
	env, proxyPort, adminPort, web := checkContainer(t, r, pod, c)
	checkResolvedUpstream(t, r, d, env)
	checkService(t, r, d, c, proxyPort, adminPort)
	checkPodMonitor(t, r, d, c, adminPort, web)
	checkPDB(t, r, d)
	checkSpread(t, d)
	checkSameAsComponent(t, c, pod)
}

// checkResolvedUpstream wants itlproxy to resolve its upstream's name and
// balance over its addresses (ITLPROXY_UPSTREAM_RESOLVE=dns), and the name
// to be a headless Service the kustomization renders, by its short name
// or in the cluster's DNS, on the port its pods listen on.
func checkResolvedUpstream(t *testing.T, r *rendered, d *appsv1.Deployment, env map[string]string) {
	t.Helper()
	raw := env["ITLPROXY_UPSTREAM_URL"]
	if env["ITLPROXY_UPSTREAM_RESOLVE"] != "dns" {
		t.Errorf("ITLPROXY_UPSTREAM_RESOLVE=%q: want dns, every pod of the headless Service", env["ITLPROXY_UPSTREAM_RESOLVE"])
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Port() == "" || strings.Contains(raw, ",") {
		t.Fatalf("ITLPROXY_UPSTREAM_URL=%q: want http://<headless Service>:<port>", raw)
	}
	name, _, _ := strings.Cut(u.Hostname(), ".")
	if !slices.ContainsFunc(r.services, func(s *corev1.Service) bool { return s.Name == name }) {
		t.Fatalf("ITLPROXY_UPSTREAM_URL=%s names no Service the kustomization renders", raw)
	}
	port, _ := strconv.Atoi(u.Port())
	var selector map[string]string
	for _, s := range r.services {
		if s.Name == name {
			selector = s.Spec.Selector
		}
	}
	checkHeadlessService(t, r, d, headlessService{name: name, selector: selector, port: int32(port)})
}

// checkSameAsComponent wants the gateway's container and grace period to
// be the sidecar component's, but for the sidecar's restartPolicy: the
// same measured resources, probes and locked-down security.
func checkSameAsComponent(t *testing.T, c corev1.Container, pod corev1.PodSpec) {
	t.Helper()
	kr := render(t, filepath.Join(kubernetesDir, "examples", "vllm"))
	kpod := kr.deployments[0].Spec.Template.Spec
	kc := sidecarOf(t, kpod)
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"securityContext", c.SecurityContext, kc.SecurityContext},
		{"readinessProbe", c.ReadinessProbe, kc.ReadinessProbe},
		{"livenessProbe", c.LivenessProbe, kc.LivenessProbe},
		{"resources", c.Resources, kc.Resources},
		{"ports", c.Ports, kc.Ports},
		{"env", c.Env, kc.Env},
		{"terminationGracePeriodSeconds", pod.TerminationGracePeriodSeconds, kpod.TerminationGracePeriodSeconds},
	} {
		if !apiequality.Semantic.DeepEqual(f.got, f.want) {
			got, _ := json.Marshal(f.got)
			want, _ := json.Marshal(f.want)
			t.Errorf("%s differs from the sidecar component's:\n gateway: %s\n    want: %s", f.name, got, want)
		}
	}
}
