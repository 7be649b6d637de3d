package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestGeneratedFilesUpToDate fails when a generated file differs from
// what its sources make now, or the chart holds a dashboard that has no
// source any more.
func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.Content) {
			t.Errorf("%s is out of date with its sources: run `go generate` in deploy/kubernetes/validate", f.Path)
		}
	}
	stale, err := Stale(repoRoot, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range stale {
		t.Errorf("%s is a copy of no source: run `go generate` in deploy/kubernetes/validate", p)
	}
}

// TestMonitoringMatchesSources checks what the monitoring kustomization
// renders, after kustomize: the PrometheusRule's groups are rules.yaml's
// groups, and the dashboards ConfigMap holds each dashboards/*.json byte
// for byte, and nothing else.
func TestMonitoringMatchesSources(t *testing.T) {
	r := render(t, filepath.Join(kubernetesDir, "monitoring"))

	if len(r.rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(r.rules))
	}
	checkRuleMatchesSource(t, r.rules[0])
	cm, ok := r.configMaps[dashboardsConfigMap]
	if !ok {
		t.Fatalf("no ConfigMap %s", dashboardsConfigMap)
	}
	checkDashboardsMatchSources(t, cm)
}

// checkRuleMatchesSource wants rule labelled for kube-prometheus-stack's
// rule selector and its groups to be rules.yaml's groups.
func checkRuleMatchesSource(t *testing.T, rule *monitoringv1.PrometheusRule) {
	t.Helper()
	if rule.Labels["release"] == "" {
		t.Error("the PrometheusRule has no release label for kube-prometheus-stack's rule selector")
	}
	var want struct {
		Groups any `json:"groups"`
	}
	rulesYAML, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(RulesPath)))
	if err == nil {
		err = yaml.UnmarshalStrict(rulesYAML, &want) // a key beside groups fails
	}
	if err != nil {
		t.Fatalf("%s: %v", RulesPath, err)
	}
	var got any
	groups, err := json.Marshal(rule.Spec.Groups)
	if err == nil {
		err = json.Unmarshal(groups, &got)
	}
	if err != nil {
		t.Fatal(err)
	}
	if want.Groups == nil {
		t.Fatalf("%s has no groups", RulesPath)
	}
	if where := firstDifference("groups", got, want.Groups); where != "" {
		t.Errorf("the PrometheusRule's groups differ from %s at %s", RulesPath, where)
	}
}

// checkDashboardsMatchSources wants cm labelled for Grafana's sidecar and
// holding each dashboards/*.json byte for byte, and nothing else.
func checkDashboardsMatchSources(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s labels %v: want grafana_dashboard: \"1\" for Grafana's sidecar", cm.Name, cm.Labels)
	}
	files, err := filepath.Glob(filepath.Join(repoRoot, filepath.FromSlash(DashboardsGlob)))
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, f := range files {
		content, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := cm.Data[filepath.Base(f)]
		switch {
		case !ok:
			t.Errorf("ConfigMap %s has no entry %s", cm.Name, filepath.Base(f))
		case got != string(content):
			t.Errorf("ConfigMap %s entry %s differs from %s", cm.Name, filepath.Base(f), f)
		case !json.Valid(content):
			t.Errorf("%s is not JSON: Grafana would not load it", f)
		}
		size += len(content)
	}
	if len(cm.Data) != len(files) || len(cm.BinaryData) != 0 {
		t.Errorf("ConfigMap %s has %d entries, want the %d dashboards", cm.Name, len(cm.Data)+len(cm.BinaryData), len(files))
	}
	// The API server refuses a ConfigMap over 1 MiB.
	if size > 1<<20-4096 {
		t.Errorf("the dashboards add up to %d bytes: too many for one ConfigMap (1 MiB); split it", size)
	}
}

// firstDifference returns the path of the first place where got and want,
// decoded JSON, differ, or "" when they are equal.
func firstDifference(at string, got, want any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return at
		}
		keys := slices.Sorted(maps.Keys(w))
		for k := range g {
			if _, ok := w[k]; !ok {
				return at + "." + k + " (not in the source)"
			}
		}
		for _, k := range keys {
			if d := firstDifference(at+"."+k, g[k], w[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s (%d entries, want %d)", at, len(g), len(w))
		}
		for i := range w {
			if d := firstDifference(fmt.Sprintf("%s[%d]", at, i), g[i], w[i]); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("%s: %v, want %v", at, got, want)
	}
	return ""
}
