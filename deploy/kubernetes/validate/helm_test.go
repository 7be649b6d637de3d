package validate

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart, relative to this package's directory.
var chartDir = filepath.Join(repoRoot, filepath.FromSlash(ChartPath))

// The release the tests render, as `helm template llm <chart> -n llm`.
const (
	release   = "llm"
	namespace = "llm"
	fullname  = "llm-itlproxy"
)

// oldestKube is the oldest Kubernetes the chart supports: native sidecars.
var oldestKube = chartutil.KubeVersion{Version: "v1.29.0", Major: "1", Minor: "29"}

// gatewayValues runs the chart as a gateway in front of a vLLM Service.
func gatewayValues() map[string]any {
	return map[string]any{"mode": "gateway", "gateway": map[string]any{"upstreamURL": "http://vllm.llm.svc:8000"}}
}

// renderChart renders the chart as `helm template` does, with vals over
// values.yaml (validated against values.schema.json) and, when given,
// templates added to the chart (name under templates/ to text), and
// decodes every object strictly. It returns the objects and every
// rendered file by its name under templates/ (NOTES.txt among them).
func renderChart(vals map[string]any, extra map[string]string) (*rendered, map[string]string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, nil, err
	}
	if !chartutil.IsCompatibleRange(chrt.Metadata.KubeVersion, oldestKube.Version) {
		return nil, nil, errors.New("the chart's kubeVersion excludes " + oldestKube.Version)
	}
	for name, text := range extra {
		chrt.Templates = append(chrt.Templates, &chart.File{Name: "templates/" + name, Data: []byte(text)})
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = oldestKube
	values, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, nil, err
	}
	// Strict: a template naming a value that does not exist fails.
	files, err := engine.Engine{Strict: true}.Render(chrt, values)
	if err != nil {
		return nil, nil, err
	}
	out, byName := newRendered(), map[string]string{}
	var errs []error
	for name, text := range files {
		name = strings.TrimPrefix(name, chrt.Name()+"/templates/")
		byName[name] = text
		if path.Ext(name) != ".yaml" {
			continue
		}
		objs, err := decodeDocuments(text)
		if err != nil {
			errs = append(errs, errors.New(name+": "+err.Error()))
		}
		for _, obj := range objs {
			out.add(obj)
		}
	}
	return out, byName, errors.Join(errs...)
}

// decodeDocuments decodes each YAML document of text strictly (duplicate
// keys too); empty documents (a template whose condition is false) are
// skipped.
func decodeDocuments(text string) ([]runtime.Object, error) {
	reader := k8syaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	var objs []runtime.Object
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return objs, err
		}
		data, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return objs, err
		}
		if string(data) == "null" {
			continue
		}
		obj, err := decodeStrict(data)
		if err != nil {
			return objs, err
		}
		objs = append(objs, obj)
	}
}

func mustRenderChart(t *testing.T, vals map[string]any, extra map[string]string) (*rendered, map[string]string) {
	t.Helper()
	r, files, err := renderChart(vals, extra)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return r, files
}

// modelServer is another chart's Deployment and Service of a model server
// that takes the sidecar snippet as the chart's notes say: the pod label,
// the init container, the volume and the grace period; the server listens
// on loopback and the Service targets the proxy port.
const modelServer = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm
  labels:
    {{- include "itlproxy.sidecar.podLabels" . | nindent 4 }}
spec:
  selector:
    matchLabels: {app: vllm}
  template:
    metadata:
      labels:
        app: vllm
        {{- include "itlproxy.sidecar.podLabels" . | nindent 8 }}
    spec:
      terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
      initContainers:
        {{- include "itlproxy.sidecar.initContainer" . | nindent 8 }}
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.11.0
          args: [--host, 127.0.0.1, --port, "8000"]
      volumes:
        {{- include "itlproxy.sidecar.volume" . | nindent 8 }}
---
apiVersion: v1
kind: Service
metadata:
  name: vllm
spec:
  selector: {app: vllm}
  ports:
    - name: http
      port: 8000
      targetPort: {{ .Values.ports.proxy }}
`

// snippets renders each named template of the sidecar snippet on its own,
// to find it in the notes.
var snippets = map[string]string{
	"snippet-labels.txt":        `{{ include "itlproxy.sidecar.podLabels" . }}`,
	"snippet-initcontainer.txt": `{{ include "itlproxy.sidecar.initContainer" . }}`,
	"snippet-volume.txt":        `{{ include "itlproxy.sidecar.volume" . }}`,
}

// TestChartSidecar merges the chart's sidecar snippet into a model
// server's Deployment and checks it as the kustomize component's sidecar
// is checked, with the chart's ConfigMaps and PodMonitor; the notes carry
// the same snippet; the container is the component's, setting for setting.
func TestChartSidecar(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
	}{
		{"defaults", nil},
		{"other ports and objectives", map[string]any{
			"ports": map[string]any{"proxy": 8081, "admin": 9091},
			"objectives": map[string]any{
				"default": map[string]any{"ttft": "1s", "itl": "50ms", "max_gap": "3s"},
				"models":  map[string]any{"Qwen/Qwen2.5-1.5B-Instruct": map[string]any{"itl": 0}},
				"classes": map[string]any{"batch": map[string]any{"ttft": "30s", "models": map[string]any{"Qwen/Qwen2.5-1.5B-Instruct": map[string]any{"tpot": "0"}}}},
			},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alone, _ := mustRenderChart(t, tc.vals, nil)
			if len(alone.deployments)+len(alone.services) != 0 {
				t.Errorf("sidecar mode renders %d Deployments and %d Services: want none of its own", len(alone.deployments), len(alone.services))
			}
			extra := map[string]string{"model-server.yaml": modelServer}
			for name, text := range snippets {
				extra[name] = text
			}
			r, files := mustRenderChart(t, tc.vals, extra)
			if len(r.deployments) != 1 {
				t.Fatalf("%d Deployments, want the model server's", len(r.deployments))
			}
			checkSidecar(t, r, r.deployments[0])
			for name := range snippets {
				if want := indent(files[name], "  "); !strings.Contains(files["NOTES.txt"], want) {
					t.Errorf("the notes lack %s, indented by two:\n%s\nnotes:\n%s", name, want, files["NOTES.txt"])
				}
			}
		})
	}
	t.Run("same container as the component", func(t *testing.T) {
		r, _ := mustRenderChart(t, nil, map[string]string{"model-server.yaml": modelServer})
		chartC := r.deployments[0].Spec.Template.Spec.InitContainers[0]
		kr := render(t, filepath.Join(kubernetesDir, "examples", "vllm"))
		kc := sidecarOf(t, kr.deployments[0].Spec.Template.Spec)
		for _, f := range []struct {
			name      string
			got, want any
		}{
			{"securityContext", chartC.SecurityContext, kc.SecurityContext},
			{"readinessProbe", chartC.ReadinessProbe, kc.ReadinessProbe},
			{"livenessProbe", chartC.LivenessProbe, kc.LivenessProbe},
			{"resources", chartC.Resources, kc.Resources},
			{"ports", chartC.Ports, kc.Ports},
			{"restartPolicy", chartC.RestartPolicy, kc.RestartPolicy},
			{"terminationGracePeriodSeconds", r.deployments[0].Spec.Template.Spec.TerminationGracePeriodSeconds, kr.deployments[0].Spec.Template.Spec.TerminationGracePeriodSeconds},
		} {
			if !apiequality.Semantic.DeepEqual(f.got, f.want) {
				got, _ := json.Marshal(f.got)
				want, _ := json.Marshal(f.want)
				t.Errorf("%s differs from the kustomize component's:\n chart: %s\n  want: %s", f.name, got, want)
			}
		}
	})
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString(prefix + line)
	}
	return b.String()
}

// TestChartMonitoringMatchesSources checks, in both modes, that the
// chart's PrometheusRule carries rules.yaml's groups and its dashboards
// ConfigMap each dashboards/*.json byte for byte: the same as the
// kustomizations.
func TestChartMonitoringMatchesSources(t *testing.T) {
	for _, vals := range []map[string]any{nil, gatewayValues()} {
		r, _ := mustRenderChart(t, vals, nil)
		if len(r.rules) != 1 {
			t.Fatalf("%d PrometheusRules, want 1", len(r.rules))
		}
		checkRuleMatchesSource(t, r.rules[0])
		cm, ok := r.configMaps[fullname+"-dashboards"]
		if !ok {
			t.Fatalf("no ConfigMap %s-dashboards", fullname)
		}
		checkDashboardsMatchSources(t, cm)
	}
	off := map[string]any{"monitoring": map[string]any{
		"monitor":        map[string]any{"enabled": false},
		"prometheusRule": map[string]any{"enabled": false},
		"dashboards":     map[string]any{"enabled": false},
	}}
	r, _ := mustRenderChart(t, off, nil)
	if n := len(r.rules) + len(r.podMonitors) + len(r.serviceMonitors); n != 0 || r.configMaps[fullname+"-dashboards"] != nil {
		t.Errorf("with monitoring disabled, %d monitors and rules, dashboards %v: want none", n, r.configMaps[fullname+"-dashboards"] != nil)
	}
}

// TestChartLint runs helm lint's rules (chart file, values against the
// schema, templates rendered and parsed) in both modes, the gateway in
// front of a Service and of a headless Service it creates; a warning
// fails.
func TestChartLint(t *testing.T) {
	headless := headlessValues(map[string]any{"create": true, "selector": map[string]any{"app.kubernetes.io/name": "vllm"}}, nil)
	for _, vals := range []map[string]any{nil, gatewayValues(), headless} {
		linter := lint.AllWithKubeVersion(chartDir, vals, namespace, &oldestKube)
		for _, m := range linter.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint (values %v): %s", vals, m.Error())
			} else {
				t.Logf("helm lint: %s", m.Error())
			}
		}
	}
}

// TestChartRejects shows that a misspelt or impossible value fails the
// install, naming the value, instead of being ignored.
func TestChartRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"misspelt top-level key", map[string]any{"objectivs": map[string]any{}}, "at '': additional properties 'objectivs' not allowed"},
		{"misspelt nested key", map[string]any{"gateway": map[string]any{"replica": 3}}, "at '/gateway': additional properties 'replica' not allowed"},
		{"misspelt objective", map[string]any{"objectives": map[string]any{"default": map[string]any{"ttf": "1s"}}}, "at '/objectives/default': additional properties 'ttf' not allowed"},
		{"bad duration", map[string]any{"objectives": map[string]any{"default": map[string]any{"itl": "40 ms"}}}, "at '/objectives/default/itl': '40 ms' does not match pattern"},
		{"unknown mode", map[string]any{"mode": "daemonset"}, "at '/mode': value must be one of 'sidecar', 'gateway'"},
		{"latest image", map[string]any{"image": map[string]any{"tag": "latest"}}, "at '/image/tag': 'not' failed"},
		{"gateway without upstream", map[string]any{"mode": "gateway"}, "gateway.upstreamURL or gateway.headlessService: the model Service"},
		{"ServiceMonitor of sidecars", map[string]any{"monitoring": map[string]any{"monitor": map[string]any{"kind": "ServiceMonitor"}}}, "ServiceMonitor needs mode: gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := renderChart(tc.vals, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("values %v: error %v, want one containing %q", tc.vals, err, tc.want)
			}
		})
	}
}

// selects reports whether the label selector given as a map selects the
// set.
func selects(selector, set map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(set))
}

// TestChartObjectives checks the SLO file the objectives values make: the
// chart's default merged with the release's values, null removing a kind.
func TestChartObjectives(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"defaults", nil, "default:\n  itl: 100ms\n  tpot: 80ms\n  ttft: 2s\n"},
		{"merged", map[string]any{"objectives": map[string]any{
			"default": map[string]any{"tpot": nil, "itl": "40ms"},
			"models":  map[string]any{"qwen2.5:7b": map[string]any{"itl": 0}},
		}}, "default:\n  itl: 40ms\n  ttft: 2s\nmodels:\n  qwen2.5:7b:\n    itl: 0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := mustRenderChart(t, tc.vals, nil)
			cm, ok := r.configMaps[fullname+"-slo"]
			if !ok {
				t.Fatalf("no ConfigMap %s-slo", fullname)
			}
			if got := cm.Data["slo.yaml"]; got != tc.want {
				t.Errorf("slo.yaml:\n%s\nwant:\n%s", got, tc.want)
			}
			if err := checkSLOs([]byte(cm.Data["slo.yaml"])); err != nil {
				t.Error(err)
			}
		})
	}
}
