package validate

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGenerateDashboards generates the dashboards ConfigMap from dashboard
// files of awkward shapes in a scratch repository, renders it with
// kustomize, and wants every file back byte for byte; with no dashboards,
// a ConfigMap without data.
func TestGenerateDashboards(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(RulesPath)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		dashboards map[string]string
	}{
		{"none", nil},
		{"several", map[string]string{
			"itlproxy-overview.json": "{\n  \"title\": \"itlproxy\",\n  \"templating\": {\"list\": [{\"query\": \"label_values(itlproxy_build_info, model)\"}]},\n  \"panels\": [{\"expr\": \"histogram_quantile(0.99, sum by (le) (rate(itlproxy_inter_token_latency_seconds_bucket{model=~\\\"$model\\\"}[$__rate_interval])))\"}]\n}\n",
			"no-final-newline.json":  "{\"title\": \"a\"}",
			"tabs-and-spaces.json":   "{\n\t\"title\": \"b\",   \n\t\"uid\": \"${DS_PROMETHEUS}\"\n}\n\n",
			"indented-first.json":    "   {\"title\": \"c — ITL p99 ≤ 40 ms\"}\n",
			"crlf.json":              "{\r\n  \"title\": \"d\"\r\n}\r\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, filepath.FromSlash(RulesPath)), string(rules))
			for name, content := range tc.dashboards {
				write(t, filepath.Join(root, "dashboards", name), content)
			}
			files, err := Generate(root)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				write(t, filepath.Join(root, filepath.FromSlash(f.Path)), string(f.Content))
			}
			monitoring := filepath.Join(root, filepath.FromSlash(filepath.Dir(DashboardsPath)))
			write(t, filepath.Join(monitoring, "kustomization.yaml"),
				"resources: ["+filepath.Base(PrometheusRulePath)+", "+filepath.Base(DashboardsPath)+"]\n")

			cm, ok := render(t, monitoring).configMaps[dashboardsConfigMap]
			if !ok {
				t.Fatalf("no ConfigMap %s", dashboardsConfigMap)
			}
			if len(cm.Data) != len(tc.dashboards) {
				t.Errorf("%d entries, want %d", len(cm.Data), len(tc.dashboards))
			}
			for name, want := range tc.dashboards {
				if got := cm.Data[name]; got != want {
					t.Errorf("entry %s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
