package scrape

import (
	"strings"
	"testing"
)

const exposition = `# TYPE requests_total counter
requests_total{model="a",endpoint="chat",code="200"} 3
requests_total{model="a",endpoint="chat",code="500"} 1
requests_total{model="b",endpoint="chat",code="200"} 5
requests_total{model="b",endpoint="other",code="200"} 7
requests_total{endpoint="other",code="200"} 11
# TYPE active gauge
active{model="a"} 2
# TYPE up untyped
up 1
`

func TestLookUpByLabels(t *testing.T) {
	fs, err := Parse(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		family string
		labels []string
		series int
		value  float64
	}{
		{"every series", "requests_total", nil, 5, 27},
		{"one label", "requests_total", []string{"model", "a"}, 2, 4},
		{"two labels", "requests_total", []string{"model", "b", "endpoint", "chat"}, 1, 5},
		{"three labels", "requests_total", []string{"model", "a", "endpoint", "chat", "code", "500"}, 1, 1},
		{"a value no series has", "requests_total", []string{"model", "c"}, 0, 0},
		{"a label no series has", "requests_total", []string{"tenant", "x"}, 0, 0},
		{"empty matches a missing label", "requests_total", []string{"model", ""}, 1, 11},
		{"a gauge", "active", []string{"model", "a"}, 1, 2},
		{"untyped", "up", nil, 1, 1},
		{"no such family", "absent_total", nil, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if n := len(fs.Series(c.family, c.labels...)); n != c.series {
				t.Errorf("Series(%s, %q): %d series, want %d", c.family, c.labels, n, c.series)
			}
			if v := fs.Value(c.family, c.labels...); v != c.value {
				t.Errorf("Value(%s, %q) = %v, want %v", c.family, c.labels, v, c.value)
			}
		})
	}
	m := fs.Series("requests_total", "code", "500")[0]
	if Label(m, "model") != "a" || Label(m, "endpoint") != "chat" || Label(m, "tenant") != "" {
		t.Errorf("labels of %v", m.GetLabel())
	}
}

func TestParseRefusesBrokenText(t *testing.T) {
	if _, err := Parse(strings.NewReader("requests_total{model=\"a\" 3\n")); err == nil {
		t.Error("an unclosed label set parsed")
	}
}
