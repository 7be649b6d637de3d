// Package dashboards_test checks the Grafana dashboards of this folder:
// their structure without a Grafana, and every query against a real
// Prometheus scraping the proxy.
package dashboards_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.yaml.in/yaml/v3"

	"github.com/itlproxy/itlproxy/metrics"
)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	file       string
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
			AllValue   string          `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *datasourceRef `json:"datasource"`
	GridPos     struct{ H, W, X, Y int }
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Exemplar   bool           `json:"exemplar"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

// allPanels returns the dashboard's panels, rows' nested panels included.
func (d dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// query is one PromQL query of a dashboard.
type query struct {
	where, expr string
	variable    bool // a template variable's label_values query
}

func (d dashboard) queries() []query {
	var out []query
	for _, p := range d.allPanels() {
		for _, t := range p.Targets {
			out = append(out, query{where: d.file + ": " + p.Title + " " + t.RefID, expr: t.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			_ = json.Unmarshal(v.Query, &q.Query)
		}
		out = append(out, query{where: d.file + ": variable " + v.Name, expr: q.Query, variable: true})
	}
	return out
}

func loadDashboards(t *testing.T) []dashboard {
	t.Helper()
	files, err := filepath.Glob("*.json")
	if err != nil || len(files) < 3 {
		t.Fatalf("dashboards: %v, %v", files, err)
	}
	var out []dashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		d.file = filepath.Base(f)
		out = append(out, d)
	}
	return out
}

// rulesFile is the rule file whose recording rules the dashboards use.
var rulesFile = filepath.Join("..", "deploy", "prometheus", "rules.yaml")

// exportedNames returns every metric name the proxy exports (its own
// collectors and the Go and process collectors run() registers, histogram
// series included) and every recording rule of the rule file.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	rec := &describingRegisterer{names: map[string]bool{}}
	if _, err := metrics.New(rec, metrics.Options{MaxModels: 1, SessionMax: 1}); err != nil {
		t.Fatal(err)
	}
	rec.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				rec.names[r.Record] = true
			}
		}
	}
	rec.names["ALERTS"] = true // Prometheus' own series of pending and firing alerts
	return rec.names
}

// describingRegisterer collects the metric names of what is registered.
type describingRegisterer struct {
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *describingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 256)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
				r.names[m[1]+suffix] = true
			}
		}
	}
	return nil
}

func (r *describingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *describingRegisterer) Unregister(prometheus.Collector) bool { return false }

// PromQL's functions, aggregations and keywords: identifiers in a query
// that are not metric names.
var promqlWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`sum avg min max count stddev stdvar topk bottomk quantile count_values group
		rate irate increase delta idelta deriv predict_linear resets changes histogram_quantile histogram_count
		histogram_sum histogram_fraction scalar vector abs ceil floor round clamp clamp_min clamp_max absent
		absent_over_time time timestamp sort sort_desc label_replace label_join exp ln log2 log10 sqrt
		avg_over_time max_over_time min_over_time sum_over_time count_over_time last_over_time
		quantile_over_time stddev_over_time and or unless bool offset by without on ignoring group_left
		group_right inf nan label_values`) {
		promqlWords[w] = true
	}
}

var (
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	grafanaVar     = regexp.MustCompile(`\$\{?\w+\}?`)
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	labelValues    = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
)

// metricNames returns the metric names a query selects.
func metricNames(q query) []string {
	if q.variable {
		if m := labelValues.FindStringSubmatch(q.expr); m != nil {
			return []string{m[1]}
		}
		return nil
	}
	e := promqlString.ReplaceAllString(q.expr, `""`)
	e = promqlMatchers.ReplaceAllString(e, "{}")
	e = promqlRange.ReplaceAllString(e, "[]")
	e = promqlGrouping.ReplaceAllString(e, "")
	e = grafanaVar.ReplaceAllString(e, "")
	var names []string
	for _, loc := range promqlIdent.FindAllStringIndex(e, -1) {
		if loc[0] > 0 && strings.ContainsRune("0123456789.", rune(e[loc[0]-1])) {
			continue // the exponent of a number, such as 1e-9
		}
		if w := e[loc[0]:loc[1]]; !promqlWords[w] {
			names = append(names, w)
		}
	}
	return names
}

var (
	rangeSelector = regexp.MustCompile(`\[([^\]]+)\]`)
	usedVariable  = regexp.MustCompile(`\$\{?(\w+)\}?`)
)

// TestDashboardsStructure checks every dashboard without a Grafana: stable
// uids, the data source variable and no hard-coded data source, model and
// endpoint variables, variables used that exist, $__rate_interval in
// rates, units and descriptions, no overlapping panels, and no metric name
// that neither the proxy nor the rule file exports.
func TestDashboardsStructure(t *testing.T) {
	exported := exportedNames(t)
	uids := map[string]bool{}
	for _, d := range loadDashboards(t) {
		if want := "itlproxy-" + strings.TrimSuffix(d.file, ".json"); d.UID != want || uids[d.UID] {
			t.Errorf("%s: uid %q, want the stable, unique %q", d.file, d.UID, want)
		}
		uids[d.UID] = true
		vars := checkVariables(t, d)
		checkPanels(t, d)
		for _, q := range d.queries() {
			checkQuery(t, q, vars, exported)
		}
	}
}

// checkVariables checks the datasource, model and endpoint variables of d,
// and returns the names of all its variables.
func checkVariables(t *testing.T, d dashboard) map[string]bool {
	t.Helper()
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Name {
		case "datasource":
			var q string
			_ = json.Unmarshal(v.Query, &q)
			if v.Type != "datasource" || q != "prometheus" {
				t.Errorf("%s: datasource variable is %s %q", d.file, v.Type, q)
			}
		case "model", "endpoint", "class", "tenant":
			if !v.Multi || !v.IncludeAll || v.AllValue != ".*" || v.Datasource == nil || v.Datasource.UID != "${datasource}" {
				t.Errorf("%s: variable %s must be multi, include All (.*) and use ${datasource}", d.file, v.Name)
			}
		}
	}
	for _, name := range []string{"datasource", "model", "endpoint"} {
		if !vars[name] {
			t.Errorf("%s: no %s variable", d.file, name)
		}
	}
	return vars
}

// checkPanels checks each panel of d but rows: a unique title, a
// description, the ${datasource} data source for it and its queries, a
// unit for a time series, at least one query, and a place on the grid that
// no other panel takes.
func checkPanels(t *testing.T, d dashboard) {
	t.Helper()
	titles := map[string]bool{}
	var placed []panel
	for _, p := range d.allPanels() {
		if p.Type == "row" {
			continue
		}
		where := d.file + ": " + p.Title
		if titles[p.Title] {
			t.Errorf("%s: title used twice", where)
		}
		titles[p.Title] = true
		if p.Description == "" {
			t.Errorf("%s: no description", where)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("%s: data source %v, want ${datasource}", where, p.Datasource)
		}
		if p.Type == "timeseries" && p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("%s: no unit", where)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no query", where)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("%s %s: query data source %v", where, tg.RefID, tg.Datasource)
			}
		}
		g := p.GridPos
		if g.W < 1 || g.X+g.W > 24 || g.H < 1 {
			t.Errorf("%s: grid position %+v", where, g)
		}
		for _, o := range placed {
			if g.X < o.GridPos.X+o.GridPos.W && o.GridPos.X < g.X+g.W && g.Y < o.GridPos.Y+o.GridPos.H && o.GridPos.Y < g.Y+g.H {
				t.Errorf("%s overlaps %s", where, o.Title)
			}
		}
		placed = append(placed, p)
	}
}

// checkQuery checks that q is not empty, selects only exported metrics,
// uses only variables that exist, and ranges over $__rate_interval or a
// budget window.
func checkQuery(t *testing.T, q query, vars, exported map[string]bool) {
	t.Helper()
	if strings.TrimSpace(q.expr) == "" {
		t.Errorf("%s: empty query", q.where)
		return
	}
	names := metricNames(q)
	if len(names) == 0 {
		t.Errorf("%s: no metric in %s", q.where, q.expr)
	}
	for _, n := range names {
		if !exported[n] {
			t.Errorf("%s: %s is neither exported by the proxy nor recorded by the rules (in %s)", q.where, n, q.expr)
		}
	}
	for _, m := range usedVariable.FindAllStringSubmatch(q.expr, -1) {
		if !vars[m[1]] && !strings.HasPrefix(m[1], "__") {
			t.Errorf("%s: uses undefined variable $%s", q.where, m[1])
		}
	}
	for _, m := range rangeSelector.FindAllStringSubmatch(q.expr, -1) {
		if r := m[1]; r != "$__rate_interval" && !slices.Contains([]string{"1d", "3d", "7d", "30d"}, r) {
			t.Errorf("%s: range [%s]: use $__rate_interval (or a budget window of days)", q.where, r)
		}
	}
}

// TestMetricNames checks the extraction the structure test relies on.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (model, le) (rate(itlproxy_x_bucket{model=~"$model",slo="a:b"}[$__rate_interval]))`: {"itlproxy_x_bucket"},
		`model_slo:r:ratio_rate1h{slo="itl"} / on (slo) group_left () slo:budget:ratio > 1e-9`:      {"model_slo:r:ratio_rate1h", "slo:budget:ratio"},
		`rate(process_cpu_seconds_total[5m]) and on (job, instance) itlproxy_build_info`:            {"process_cpu_seconds_total", "itlproxy_build_info"},
		`1 - (a / b) / scalar(c{slo="ttft"})`:                                                       {"a", "b", "c"},
	} {
		if got := metricNames(query{expr: expr}); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", expr, got, want)
		}
	}
	if got := metricNames(query{expr: `label_values(itlproxy_requests_total{model=~"$model"}, endpoint)`, variable: true}); !slices.Equal(got, []string{"itlproxy_requests_total"}) {
		t.Errorf("label_values: %v", got)
	}
}
