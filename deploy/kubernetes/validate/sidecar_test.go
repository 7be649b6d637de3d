package validate

import (
	"bytes"
	"cmp"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// sidecarLabel marks the Deployments the sidecar component patches, and
// their pods, which the PodMonitor selects.
const sidecarLabel = "itlproxy/sidecar"

// imageUser is the user of the image's final stage (distroless "nonroot").
const imageUser = 65532

// TestSidecar checks the itlproxy sidecar in every Deployment that the
// kustomizations render (each of them runs a model server behind one) but
// the gateways, which TestGateway checks.
func TestSidecar(t *testing.T) {
	builds, _ := kustomizations(t)
	n := 0
	for _, dir := range builds {
		r := render(t, dir)
		for _, d := range r.deployments {
			if isGateway(d) {
				continue
			}
			n++
			t.Run(path.Join(dir, d.Name), func(t *testing.T) { checkSidecar(t, r, d) })
		}
	}
	if n == 0 {
		t.Error("no kustomization renders a Deployment")
	}
}

func checkSidecar(t *testing.T, r *rendered, d *appsv1.Deployment) {
	pod := d.Spec.Template.Spec
	if d.Labels[sidecarLabel] != "true" || d.Spec.Template.Labels[sidecarLabel] != "true" {
		t.Errorf("want the label %s: \"true\" on the Deployment and its pods", sidecarLabel)
	}
	if slices.ContainsFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == "itlproxy" }) {
		t.Error("itlproxy is a plain container; want a native sidecar (an init container with restartPolicy: Always)")
	}
	c := sidecarOf(t, pod)
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("itlproxy restartPolicy = %s, want Always (a native sidecar)", deref(c.RestartPolicy))
	}
	env, proxyPort, adminPort, web := checkContainer(t, r, pod, c)
	checkUpstream(t, pod, env["ITLPROXY_UPSTREAM_URL"])
	checkService(t, r, d, c, proxyPort, adminPort)
	checkPodMonitor(t, r, d, c, adminPort, web)
}

// checkContainer checks what the itlproxy container c of pod must be
// wherever it runs (the sidecar, the chart's gateway): a pinned image, a
// proxy and an admin port it listens on, probes on the admin port, the
// locked-down security context, resources, a shutdown that fits the grace
// period, an SLO file from a rendered ConfigMap, a session header, a web
// configuration file that itlproxy would take, when one is set, with
// probes of the scheme it makes the admin port speak, and OTEL_* variables
// it would take (checkOTLP). It returns the container's effective
// environment, its two ports and what the web configuration file says.
func checkContainer(t *testing.T, r *rendered, pod corev1.PodSpec, c corev1.Container) (env map[string]string, proxyPort, adminPort int32, web adminWeb) {
	t.Helper()
	checkImage(t, c.Image)

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	proxyPort, adminPort = ports["proxy"], ports["admin"]
	if proxyPort == 0 || adminPort == 0 {
		t.Fatalf("itlproxy ports %v: want one named proxy and one named admin", c.Ports)
	}
	env = effectiveEnv(t, r, c)
	checkListen(t, env, "ITLPROXY_LISTEN_ADDR", proxyPort)
	checkListen(t, env, "ITLPROXY_ADMIN_ADDR", adminPort)
	web = checkWebConfig(t, r, pod, c, env["ITLPROXY_WEB_CONFIG_FILE"])
	checkProbe(t, "readiness", c.ReadinessProbe, "/readyz", c, adminPort, web.probeScheme())
	checkProbe(t, "liveness", c.LivenessProbe, "/healthz", c, adminPort, web.probeScheme())
	checkSecurity(t, c.SecurityContext)
	checkResources(t, c.Resources)
	checkShutdown(t, env, pod.TerminationGracePeriodSeconds)
	checkSLOFile(t, r, pod, c, env["ITLPROXY_SLO_FILE"])
	if env["ITLPROXY_SESSION_HEADER"] == "" {
		t.Error("ITLPROXY_SESSION_HEADER is not set")
	}
	checkOTLP(t, env)
	return env, proxyPort, adminPort, web
}

// deref shows what p points to, or "unset".
func deref[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// checkImage wants a pinned image: the sidecar's placeholder replaced by
// the kustomization's images: entry, with a tag other than latest.
func checkImage(t *testing.T, image string) {
	t.Helper()
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if slash < 0 || colon < slash || image[colon+1:] == "latest" {
		t.Errorf("itlproxy image %q: want registry/name:tag with a tag other than latest (set it with images: in the kustomization)", image)
	}
}

// effectiveEnv is the container's environment as the kubelet builds it:
// the ConfigMaps of envFrom in order, then env over them. Every ConfigMap
// named must be one the kustomization renders (kustomize renames generated
// ConfigMaps with a hash suffix and must have renamed the references).
func effectiveEnv(t *testing.T, r *rendered, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			t.Errorf("envFrom %+v: want a ConfigMap", from)
			continue
		}
		cm, ok := r.configMaps[from.ConfigMapRef.Name]
		if !ok {
			t.Errorf("envFrom names ConfigMap %s, which the kustomization does not render", from.ConfigMapRef.Name)
			continue
		}
		for k, v := range cm.Data {
			env[from.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Errorf("env %s: want a value, not valueFrom", e.Name)
		}
		env[e.Name] = e.Value
	}
	return env
}

func checkListen(t *testing.T, env map[string]string, key string, port int32) {
	t.Helper()
	host, p, err := net.SplitHostPort(env[key])
	if err != nil || host != "" || p != strconv.Itoa(int(port)) {
		t.Errorf("%s=%q: want \":%d\", all interfaces on the container port", key, env[key], port)
	}
}

// checkProbe wants probe p to get wantPath on the admin port with scheme
// (HTTP unset, as the kubelet defaults it).
func checkProbe(t *testing.T, kind string, p *corev1.Probe, wantPath string, c corev1.Container, adminPort int32, scheme corev1.URIScheme) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s probe %+v: want an HTTP GET of %s on the admin port", kind, p, wantPath)
		return
	}
	if p.HTTPGet.Path != wantPath || portNumber(c, p.HTTPGet.Port) != adminPort {
		t.Errorf("%s probe gets %s on port %s: want %s on the admin port (%d)", kind, p.HTTPGet.Path, p.HTTPGet.Port.String(), wantPath, adminPort)
	}
	if got := cmp.Or(p.HTTPGet.Scheme, corev1.URISchemeHTTP); got != scheme {
		t.Errorf("%s probe's scheme is %s: the admin port speaks %s", kind, got, scheme)
	}
}

// portNumber resolves a port given by number or by the name of one of c's
// ports; 0 if there is no such port.
func portNumber(c corev1.Container, port intstr.IntOrString) int32 {
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort
		}
	}
	return 0
}

func checkSecurity(t *testing.T, sc *corev1.SecurityContext) {
	t.Helper()
	if sc == nil {
		t.Error("itlproxy has no securityContext")
		return
	}
	is := func(b *bool, want bool) bool { return b != nil && *b == want }
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{"runAsNonRoot: true", is(sc.RunAsNonRoot, true)},
		{"runAsUser: 65532 (the image's user)", sc.RunAsUser != nil && *sc.RunAsUser == imageUser},
		{"readOnlyRootFilesystem: true", is(sc.ReadOnlyRootFilesystem, true)},
		{"allowPrivilegeEscalation: false", is(sc.AllowPrivilegeEscalation, false)},
		{"privileged unset or false", sc.Privileged == nil || !*sc.Privileged},
		{"capabilities: {drop: [ALL]} and nothing added", sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0},
		{"seccompProfile: {type: RuntimeDefault}", sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
	} {
		if !c.ok {
			t.Errorf("securityContext: want %s", c.what)
		}
	}
}

func checkResources(t *testing.T, res corev1.ResourceRequirements) {
	t.Helper()
	cpu, mem := res.Requests[corev1.ResourceCPU], res.Requests[corev1.ResourceMemory]
	limit, hasLimit := res.Limits[corev1.ResourceMemory]
	if cpu.Sign() <= 0 || mem.Sign() <= 0 {
		t.Errorf("requests %v: want cpu and memory", res.Requests)
	}
	if !hasLimit || limit.Cmp(mem) < 0 {
		t.Errorf("memory limit %v: want one, at least the request (%v)", res.Limits, mem.String())
	}
	if _, ok := res.Limits[corev1.ResourceCPU]; ok {
		t.Error("CPU limit set: throttling would add latency to the gaps itlproxy measures")
	}
}

// checkShutdown wants the grace period to outlast itlproxy's whole
// shutdown (delay, then streams in flight up to the timeout), and a delay
// for the endpoints to be removed.
func checkShutdown(t *testing.T, env map[string]string, grace *int64) {
	t.Helper()
	delay, err1 := time.ParseDuration(env["ITLPROXY_SHUTDOWN_DELAY"])
	timeout, err2 := time.ParseDuration(env["ITLPROXY_SHUTDOWN_TIMEOUT"])
	if err1 != nil || err2 != nil {
		t.Errorf("ITLPROXY_SHUTDOWN_DELAY=%q, ITLPROXY_SHUTDOWN_TIMEOUT=%q: want both set, next to the grace period", env["ITLPROXY_SHUTDOWN_DELAY"], env["ITLPROXY_SHUTDOWN_TIMEOUT"])
		return
	}
	if delay <= 0 {
		t.Errorf("ITLPROXY_SHUTDOWN_DELAY=%s: want time for the endpoints to be removed", delay)
	}
	if timeout < time.Minute {
		t.Errorf("ITLPROXY_SHUTDOWN_TIMEOUT=%s: LLM streams last minutes", timeout)
	}
	if grace == nil || time.Duration(*grace)*time.Second <= delay+timeout {
		t.Errorf("terminationGracePeriodSeconds %v: want more than ITLPROXY_SHUTDOWN_DELAY + ITLPROXY_SHUTDOWN_TIMEOUT = %s", deref(grace), delay+timeout)
	}
}

// checkSLOFile follows ITLPROXY_SLO_FILE to the ConfigMap mounted there
// and checks the file strictly.
func checkSLOFile(t *testing.T, r *rendered, pod corev1.PodSpec, c corev1.Container, file string) {
	t.Helper()
	if file == "" {
		t.Error("ITLPROXY_SLO_FILE is not set: want the objectives in a ConfigMap")
		return
	}
	dir, name := path.Split(file)
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return path.Clean(m.MountPath) == path.Clean(dir) })
	if i < 0 {
		t.Errorf("ITLPROXY_SLO_FILE=%s: no volume mounted at %s", file, dir)
		return
	}
	j := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[i].Name })
	if j < 0 || pod.Volumes[j].ConfigMap == nil {
		t.Errorf("ITLPROXY_SLO_FILE=%s: volume %s is not a ConfigMap", file, c.VolumeMounts[i].Name)
		return
	}
	cm, ok := r.configMaps[pod.Volumes[j].ConfigMap.Name]
	if !ok {
		t.Errorf("ITLPROXY_SLO_FILE=%s: ConfigMap %s is not rendered", file, pod.Volumes[j].ConfigMap.Name)
		return
	}
	data, ok := cm.Data[name]
	if !ok {
		t.Errorf("ITLPROXY_SLO_FILE=%s: ConfigMap %s has no key %s", file, cm.Name, name)
		return
	}
	if err := checkSLOs([]byte(data)); err != nil {
		t.Errorf("ITLPROXY_SLO_FILE=%s (ConfigMap %s): %v", file, cm.Name, err)
	}
}

// objectives and sloFile are the shape of the SLO file (docs/slos.md,
// "Objectives"), decoded with unknown keys refused as itlproxy does.
type objectives struct {
	TTFT   string `yaml:"ttft"`
	ITL    string `yaml:"itl"`
	TPOT   string `yaml:"tpot"`
	MaxGap string `yaml:"max_gap"`
}

type class struct {
	objectives `yaml:",inline"`
	Models     map[string]objectives `yaml:"models"`
}

type sloFile struct {
	Default objectives            `yaml:"default"`
	Models  map[string]objectives `yaml:"models"`
	Classes map[string]class      `yaml:"classes"`
}

func checkSLOs(data []byte) error {
	var f sloFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return err
	}
	all := []objectives{f.Default}
	for _, o := range f.Models {
		all = append(all, o)
	}
	for _, c := range f.Classes {
		all = append(all, c.objectives)
		for _, o := range c.Models {
			all = append(all, o)
		}
	}
	for _, o := range all {
		for _, v := range []string{o.TTFT, o.ITL, o.TPOT, o.MaxGap} {
			if d, err := time.ParseDuration(v); v != "" && v != "0" && (err != nil || d < 0) {
				return fmt.Errorf("%q is not a duration of zero or more (e.g. 500ms)", v)
			}
		}
	}
	return nil
}

// checkUpstream wants itlproxy to reach the model server on the pod's
// loopback, and the server (a container started with --host and --port)
// to listen there only.
func checkUpstream(t *testing.T, pod corev1.PodSpec, raw string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" {
		t.Errorf("ITLPROXY_UPSTREAM_URL=%q: want http://127.0.0.1:<the server's port>", raw)
		return
	}
	for _, c := range pod.Containers {
		words := append(slices.Clone(c.Command), c.Args...)
		if port, _ := flagValue(words, "--port"); port == u.Port() {
			if host, _ := flagValue(words, "--host"); host != "127.0.0.1" {
				t.Errorf("container %s serves port %s on host %q: want --host 127.0.0.1, so that every request goes through itlproxy", c.Name, port, host)
			}
			return
		}
	}
	t.Errorf("ITLPROXY_UPSTREAM_URL=%s: no container is started with --port %s", raw, u.Port())
}

// flagValue returns the value of a command-line flag given as --name=value
// or --name value.
func flagValue(words []string, name string) (string, bool) {
	for i, w := range words {
		if v, ok := strings.CutPrefix(w, name+"="); ok {
			return v, true
		}
		if w == name && i+1 < len(words) {
			return words[i+1], true
		}
	}
	return "", false
}

// checkService wants the Services in front of the pods to send traffic to
// itlproxy's proxy port. The one exception is a headless Service of the
// admin port alone, which a ServiceMonitor uses to find the pods to scrape
// (clients resolve no address through it).
func checkService(t *testing.T, r *rendered, d *appsv1.Deployment, c corev1.Container, proxyPort, adminPort int32) {
	t.Helper()
	n := 0
	for _, s := range r.services {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		if s.Spec.ClusterIP == corev1.ClusterIPNone && !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return portNumber(c, p.TargetPort) != adminPort }) {
			continue
		}
		n++
		for _, p := range s.Spec.Ports {
			if portNumber(c, p.TargetPort) != proxyPort {
				t.Errorf("Service %s port %s targets %s: want itlproxy's proxy port %d", s.Name, p.Name, p.TargetPort.String(), proxyPort)
			}
		}
	}
	if n == 0 {
		t.Errorf("no Service selects the pods of %s", d.Name)
	}
}

// checkPodMonitor wants a PodMonitor selecting the pods and scraping
// /metrics on itlproxy's admin port, honoring the scraped labels: the
// Operator sets an "endpoint" target label (the port's name), which would
// otherwise rename itlproxy's own endpoint label to exported_endpoint and
// break every query and dashboard that filters on it.
func checkPodMonitor(t *testing.T, r *rendered, d *appsv1.Deployment, c corev1.Container, adminPort int32, web adminWeb) {
	t.Helper()
	for _, pm := range r.podMonitors {
		sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
		if err != nil {
			t.Errorf("PodMonitor %s: %v", pm.Name, err)
			continue
		}
		if sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		for _, e := range pm.Spec.PodMetricsEndpoints {
			if e.Port != nil && portNumber(c, intstr.FromString(*e.Port)) == adminPort && (e.Path == "" || e.Path == "/metrics") {
				if !e.HonorLabels {
					t.Errorf("PodMonitor %s: honorLabels is false: itlproxy's endpoint label would become exported_endpoint", pm.Name)
				}
				checkScrapeAuth(t, "PodMonitor "+pm.Name, e.Scheme, e.TLSConfig, e.BasicAuth, web)
				return
			}
		}
	}
	t.Errorf("no PodMonitor scrapes /metrics on the admin port of the pods of %s", d.Name)
}

// TestOverlayOverrides checks that an overlay on the vLLM example changes
// what docs/deployment.md says it can: the namespace, the image, itlproxy's
// environment (merged) and the SLO file (replaced).
func TestOverlayOverrides(t *testing.T) {
	r := render(t, path.Join(kubernetesDir, "examples", "overlay"))
	if len(r.deployments) != 1 {
		t.Fatalf("%d Deployments, want 1", len(r.deployments))
	}
	d := r.deployments[0]
	if d.Namespace != "llm" {
		t.Errorf("namespace %q, want llm", d.Namespace)
	}
	c := sidecarOf(t, d.Spec.Template.Spec)
	if c.Image != "registry.example.com/platform/itlproxy:v0.2.0" {
		t.Errorf("image %s, want the overlay's", c.Image)
	}
	env := effectiveEnv(t, r, c)
	for k, want := range map[string]string{
		"ITLPROXY_SESSION_HEADER":  "X-Conversation-Id",      // changed
		"ITLPROXY_STALL_THRESHOLD": "1s",                     // added
		"ITLPROXY_UPSTREAM_URL":    "http://127.0.0.1:8000",  // kept
		"ITLPROXY_SLO_FILE":        "/etc/itlproxy/slo.yaml", // the component's
		"ITLPROXY_SHUTDOWN_DELAY":  "5s",                     // the component's
	} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}
	var slo *corev1.ConfigMap
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && r.configMaps[v.ConfigMap.Name] != nil && v.Name == "itlproxy-slo" {
			slo = r.configMaps[v.ConfigMap.Name]
		}
	}
	if slo == nil || !strings.Contains(slo.Data["slo.yaml"], "{ttft: 400ms, itl: 30ms}") {
		t.Errorf("the mounted SLO file is not the overlay's: %v", slo)
	}
}

// sidecarOf is the itlproxy init container of pod, the native sidecar; the
// test fails when there is none.
func sidecarOf(t *testing.T, pod corev1.PodSpec) corev1.Container {
	t.Helper()
	i := slices.IndexFunc(pod.InitContainers, func(c corev1.Container) bool { return c.Name == "itlproxy" })
	if i < 0 {
		t.Fatal("no itlproxy init container")
	}
	return pod.InitContainers[i]
}
