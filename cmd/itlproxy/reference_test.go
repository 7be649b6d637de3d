package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/caarlos0/env/v11"
)

// The references in docs/ that are generated: each has hand-written prose
// around a section between markers that these tests write. Regenerate
// them all with one command, which runs these tests with -update:
//
//	go generate ./cmd/itlproxy
var update = flag.Bool("update", false, "rewrite the generated sections of docs/*.md instead of comparing them")

// regenerate is the command that rewrites every generated section.
const regenerate = "go generate ./cmd/itlproxy"

// checkGenerated compares the section named name of the Markdown file
// (relative to the repository's root) with want; with -update it writes
// want there instead.
func checkGenerated(t *testing.T, file, name, want string) {
	t.Helper()
	path := "../../" + file
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin := []byte("<!-- generated:" + name + ":begin -->\n")
	end := []byte("<!-- generated:" + name + ":end -->")
	i, j := bytes.Index(doc, begin), bytes.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q markers", file, bytes.TrimSpace(begin), end)
	}
	section := "<!-- Written by `" + regenerate + "`: do not edit by hand. -->\n\n" + want
	if !strings.HasSuffix(section, "\n") {
		section += "\n"
	}
	got := string(doc[i+len(begin) : j])
	if got == section {
		return
	}
	if *update {
		out := append(append(append([]byte{}, doc[:i+len(begin)]...), section...), doc[j:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s's %s section", file, name)
		return
	}
	t.Errorf("%s is out of date (its %s section differs from what the code says); regenerate it with\n\n\t%s\n\nfirst difference: %s",
		file, name, regenerate, firstDifference(got, section))
}

// firstDifference shows the first line where got and want part.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the section:\n\tdocument: %q\n\tgenerated: %q", i+1, gl, wl)
		}
	}
	return "none"
}

// helpVariable is one variable as `itlproxy -h` prints it.
type helpVariable struct {
	key, def, help string
	hasDefault     bool
}

// helpVariables runs `itlproxy -h` and reads back the variables it lists.
func helpVariables(t *testing.T) []helpVariable {
	t.Helper()
	var out strings.Builder
	if err := run(context.Background(), []string{"-h"}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(out.String(), "Configuration, from the environment:\n")
	if !ok {
		t.Fatalf("itlproxy -h lists no configuration:\n%s", out.String())
	}
	var vars []helpVariable
	for line := range strings.Lines(list) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "      ") && len(vars) > 0:
			vars[len(vars)-1].help = strings.TrimSpace(line)
		case strings.HasPrefix(line, "  "):
			v := helpVariable{key: strings.TrimSpace(line)}
			if k, def, ok := strings.Cut(v.key, " (default "); ok {
				v.key, v.def, v.hasDefault = k, strings.TrimSuffix(def, ")"), true
			}
			vars = append(vars, v)
		default:
			t.Fatalf("itlproxy -h: unexpected line %q", line)
		}
	}
	return vars
}

// TestConfigurationReference: `itlproxy -h` lists every variable the
// configuration reads, with its help, and docs/configuration.md's table is
// exactly that list.
func TestConfigurationReference(t *testing.T) {
	vars := helpVariables(t)
	params, err := env.GetFieldParams(&config{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, v := range vars {
		if v.help == "" {
			t.Errorf("itlproxy -h gives %s no help", v.key)
		}
		listed[v.key] = true
	}
	for _, p := range params {
		if !listed[p.Key] {
			t.Errorf("itlproxy -h does not list %s", p.Key)
		}
	}
	if len(vars) != len(params) {
		t.Errorf("itlproxy -h lists %d variables, the configuration reads %d", len(vars), len(params))
	}

	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, v := range vars {
		def := ""
		if v.hasDefault {
			def = "`" + v.def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.key, def, markdownText(v.help))
	}
	checkGenerated(t, "docs/configuration.md", "variables", b.String())
}

// markdownText makes plain help text read well in a Markdown table cell
// of a document in docs/: another document there becomes a link; names,
// paths, URLs and assignments become code; a | is escaped.
func markdownText(s string) string {
	words := strings.Split(s, " ")
	for i, w := range words {
		lead := len(w) - len(strings.TrimLeft(w, `("`))
		core := strings.TrimSuffix(strings.TrimRight(w[lead:], `.,;:)"`), "'s")
		switch {
		case strings.HasPrefix(core, "docs/") && strings.HasSuffix(core, ".md"):
			words[i] = w[:lead] + "[" + core + "](" + strings.TrimPrefix(core, "docs/") + ")" + w[lead+len(core):]
		case core != "" && (strings.ContainsAny(core, "_=") || strings.HasPrefix(core, "/") || strings.Contains(core, "://")):
			words[i] = w[:lead] + "`" + core + "`" + w[lead+len(core):]
		}
	}
	return strings.ReplaceAll(strings.Join(words, " "), "|", `\|`)
}
