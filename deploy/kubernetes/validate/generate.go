package validate

//go:generate go run ./cmd/generate -root ../../..

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Paths relative to the repository root, slash-separated.
const (
	RulesPath           = "deploy/prometheus/rules.yaml"
	DashboardsGlob      = "dashboards/*.json"
	PrometheusRulePath  = "deploy/kubernetes/monitoring/prometheusrule.yaml"
	DashboardsPath      = "deploy/kubernetes/monitoring/dashboards.yaml"
	dashboardsConfigMap = "itlproxy-dashboards"
)

// File is one generated file: where it goes, relative to the repository
// root, and its content.
type File struct {
	Path    string
	Content []byte
}

// Generate returns the generated files, made from the sources in the
// repository at root: the monitoring manifests and the Helm chart's copies
// of the rules and dashboards.
func Generate(root string) ([]File, error) {
	rule, err := prometheusRule(root)
	if err != nil {
		return nil, err
	}
	dashboards, err := dashboardsConfigMapYAML(root)
	if err != nil {
		return nil, err
	}
	chart, err := chartFiles(root)
	if err != nil {
		return nil, err
	}
	return append([]File{
		{Path: PrometheusRulePath, Content: rule},
		{Path: DashboardsPath, Content: dashboards},
	}, chart...), nil
}

const ruleHeader = `# Code generated from ` + RulesPath + ` by go generate in
# deploy/kubernetes/validate; DO NOT EDIT. The groups below are that file,
# comments and all, indented under spec.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: itlproxy
spec:
`

// prometheusRule wraps rules.yaml in a PrometheusRule by indenting it under
// spec: the file's top level is exactly the rule file's (groups), so the
// copy keeps its comments and its bytes, line for line.
func prometheusRule(root string) ([]byte, error) {
	rules, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(RulesPath)))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(ruleHeader)
	for line := range strings.Lines(string(rules)) {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// dashboardsConfigMapYAML puts every dashboards/*.json in one ConfigMap
// labelled for Grafana's dashboard sidecar, one entry a file under its own
// name. With no dashboards the ConfigMap has no data, so that the
// kustomization stays the same whatever the number of dashboards.
func dashboardsConfigMapYAML(root string) ([]byte, error) {
	files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(DashboardsGlob)))
	if err != nil {
		return nil, err
	}
	data := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range files { // Glob sorts
		content, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		data.Content = append(data.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: filepath.Base(f)},
			// Literal style keeps the JSON readable; the encoder falls back
			// to a quoted string where a literal block could not hold the
			// bytes exactly.
			&yaml.Node{Kind: yaml.ScalarNode, Style: yaml.LiteralStyle, Value: string(content)})
	}
	doc := mapping(
		"apiVersion", scalar("v1"),
		"kind", scalar("ConfigMap"),
		"metadata", mapping(
			"name", scalar(dashboardsConfigMap),
			"labels", mapping("grafana_dashboard", &yaml.Node{Kind: yaml.ScalarNode, Style: yaml.DoubleQuotedStyle, Value: "1"}),
		),
	)
	if len(data.Content) > 0 {
		doc.Content = append(doc.Content, scalar("data"), data)
	}
	var b bytes.Buffer
	b.WriteString("# Code generated from " + DashboardsGlob + " by go generate in\n# deploy/kubernetes/validate; DO NOT EDIT.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

// mapping makes a mapping node of alternating keys and values.
func mapping(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i < len(kv); i += 2 {
		n.Content = append(n.Content, scalar(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return n
}
