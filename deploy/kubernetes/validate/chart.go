package validate

import (
	"os"
	"path"
	"path/filepath"
	"slices"
)

// Paths of the Helm chart, relative to the repository root,
// slash-separated. A chart reads no file outside its directory, so it
// carries copies of the rules and dashboards, which Generate writes.
const (
	ChartPath           = "deploy/helm/itlproxy"
	ChartRulesPath      = ChartPath + "/files/rules.yaml"
	ChartDashboardsPath = ChartPath + "/files/dashboards"
)

const chartRulesHeader = "# Code generated from " + RulesPath + " by go generate in\n" +
	"# deploy/kubernetes/validate; DO NOT EDIT. templates/prometheusrule.yaml\n" +
	"# indents this file under the PrometheusRule's spec.\n"

// chartFiles returns the chart's copies: rules.yaml behind a header, and
// each dashboard byte for byte (JSON has no comments to say where it came
// from; ChartDashboardsPath holds nothing else).
func chartFiles(root string) ([]File, error) {
	rules, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(RulesPath)))
	if err != nil {
		return nil, err
	}
	files := []File{{Path: ChartRulesPath, Content: append([]byte(chartRulesHeader), rules...)}}
	dashboards, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(DashboardsGlob)))
	if err != nil {
		return nil, err
	}
	for _, f := range dashboards {
		content, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: path.Join(ChartDashboardsPath, filepath.Base(f)), Content: content})
	}
	return files, nil
}

// Stale returns the files in the chart's copy of the dashboards that
// Generate does not make (a dashboard removed or renamed since), relative
// to root: go generate deletes them, and the drift test fails on them.
func Stale(root string, generated []File) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(ChartDashboardsPath)))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var stale []string
	for _, e := range entries {
		p := path.Join(ChartDashboardsPath, e.Name())
		if !slices.ContainsFunc(generated, func(f File) bool { return f.Path == p }) {
			stale = append(stale, p)
		}
	}
	return stale, nil
}
