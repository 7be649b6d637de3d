package validate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// repoRoot and kubernetesDir are relative to this package's directory,
// where go test runs.
const (
	repoRoot      = "../../.."
	kubernetesDir = ".."
)

// scheme knows every built-in Kubernetes kind and the Prometheus
// Operator's monitoring/v1 kinds: an object of any other kind fails.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), monitoringv1.AddToScheme(s)); err != nil {
		panic(err)
	}
	return s
}()

// rendered is the output of one kustomization, each object decoded into
// its Go type.
type rendered struct {
	objects     []runtime.Object
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	podMonitors []*monitoringv1.PodMonitor
	rules       []*monitoringv1.PrometheusRule
	// Only the Helm chart renders these.
	serviceMonitors []*monitoringv1.ServiceMonitor
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
}

func newRendered() *rendered {
	return &rendered{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
}

// add files obj under its type.
func (r *rendered) add(obj runtime.Object) {
	r.objects = append(r.objects, obj)
	switch o := obj.(type) {
	case *appsv1.Deployment:
		r.deployments = append(r.deployments, o)
	case *corev1.Service:
		r.services = append(r.services, o)
	case *corev1.ConfigMap:
		r.configMaps[o.Name] = o
	case *corev1.Secret:
		r.secrets[o.Name] = o
	case *monitoringv1.PodMonitor:
		r.podMonitors = append(r.podMonitors, o)
	case *monitoringv1.PrometheusRule:
		r.rules = append(r.rules, o)
	case *monitoringv1.ServiceMonitor:
		r.serviceMonitors = append(r.serviceMonitors, o)
	case *policyv1.PodDisruptionBudget:
		r.pdbs = append(r.pdbs, o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		r.hpas = append(r.hpas, o)
	}
}

// kustomizations lists the directories under deploy/kubernetes that hold a
// kustomization, split into those kustomize can build and components
// (which are built as part of the kustomizations that use them).
func kustomizations(t *testing.T) (builds, components []string) {
	t.Helper()
	err := filepath.WalkDir(kubernetesDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !slices.Contains(konfig, d.Name()) {
			return err
		}
		k, err := readKustomization(path)
		if err != nil {
			return err
		}
		if k.Kind == types.ComponentKind {
			components = append(components, filepath.Dir(path))
		} else {
			builds = append(builds, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(builds) == 0 {
		t.Fatalf("no kustomization found under %s", kubernetesDir)
	}
	return builds, components
}

func readKustomization(path string) (types.Kustomization, error) {
	var k types.Kustomization
	data, err := os.ReadFile(path)
	if err == nil {
		err = yaml.UnmarshalStrict(data, &k)
	}
	if err != nil {
		return k, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// konfig are the file names kustomize reads a kustomization from.
var konfig = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// render builds the kustomization in dir as `kubectl apply -k` does (files
// outside the kustomization's root refused, no plugins) and decodes every
// object strictly.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out := newRendered()
	for _, r := range resources.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		obj, err := decodeStrict(data)
		if err != nil {
			t.Errorf("%s: %s %s: %v", dir, r.GetKind(), r.GetName(), err)
			continue
		}
		out.add(obj)
	}
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// decodeStrict decodes one object, given as JSON, into the Go type of its
// apiVersion and kind. Unknown kinds, unknown fields, duplicate fields and
// fields in the wrong case are errors (sigs.k8s.io/json is case-sensitive,
// unlike encoding/json).
func decodeStrict(data []byte) (runtime.Object, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &meta); err != nil {
		return nil, err
	}
	gv, err := schema.ParseGroupVersion(meta.APIVersion)
	if err != nil {
		return nil, err
	}
	obj, err := scheme.New(gv.WithKind(meta.Kind))
	if err != nil {
		return nil, err
	}
	strict, err := kjson.UnmarshalStrict(data, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	return obj, nil
}

// TestKustomizationsRenderStrictly builds every kustomization under
// deploy/kubernetes and decodes every object it yields strictly, and checks
// that every component is built as part of some kustomization.
func TestKustomizationsRenderStrictly(t *testing.T) {
	builds, components := kustomizations(t)
	used := map[string]bool{}
	for _, dir := range builds {
		for _, c := range componentsOf(t, dir) {
			used[c] = true
		}
		t.Run(dir, func(t *testing.T) {
			if r := render(t, dir); len(r.objects) == 0 {
				t.Errorf("%s renders no object", dir)
			}
		})
	}
	for _, c := range components {
		if !used[filepath.Clean(c)] {
			t.Errorf("component %s is used by no kustomization, so nothing renders it", c)
		}
	}
}

// componentsOf returns the local components the kustomization in dir
// names, as paths like the ones kustomizations returns.
func componentsOf(t *testing.T, dir string) []string {
	t.Helper()
	k, err := readKustomization(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range k.Components {
		out = append(out, filepath.Clean(filepath.Join(dir, c)))
	}
	return out
}

// TestStrictDecodingRejects shows that the decoding above would catch a
// mistake: a misspelt field, a field in the wrong case, an unknown kind.
func TestStrictDecodingRejects(t *testing.T) {
	for _, tc := range []struct {
		name, object, want string
	}{
		{"unknown field", `{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{"spec":{"initContainers":[{"name":"itlproxy","restartPolicy":"Always","readinessProb":{}}]}}}}`, `unknown field "spec.template.spec.initContainers[0].readinessProb"`},
		{"wrong case", `{"apiVersion":"v1","kind":"Service","spec":{"Ports":[]}}`, `unknown field "spec.Ports"`},
		{"unknown monitoring field", `{"apiVersion":"monitoring.coreos.com/v1","kind":"PodMonitor","spec":{"podMetricsEndpoints":[{"portName":"admin"}]}}`, `unknown field "spec.podMetricsEndpoints[0].portName"`},
		{"unknown kind", `{"apiVersion":"monitoring.coreos.com/v1","kind":"PodMonitors"}`, `no kind "PodMonitors"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeStrict([]byte(tc.object))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decodeStrict(%s) = %v, want an error containing %q", tc.object, err, tc.want)
			}
		})
	}
}
