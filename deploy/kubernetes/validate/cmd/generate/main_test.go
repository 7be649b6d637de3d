package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/itlproxy/itlproxy/deploy/kubernetes/validate"
)

// TestGenerateRemovesStaleCopies runs the generator on a scratch
// repository whose chart still holds the copy of a dashboard since
// removed: the copy goes, the others are written.
func TestGenerateRemovesStaleCopies(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(validate.RulesPath, "groups: []\n")
	write("dashboards/kept.json", `{"title": "kept"}`)
	write(validate.ChartDashboardsPath+"/removed.json", `{"title": "removed"}`)
	if err := generate(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(validate.ChartDashboardsPath), "removed.json")); !os.IsNotExist(err) {
		t.Errorf("the stale copy removed.json: %v, want it deleted", err)
	}
	got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(validate.ChartDashboardsPath), "kept.json"))
	if err != nil || string(got) != `{"title": "kept"}` {
		t.Errorf("the copy of kept.json = %q, %v; want the dashboard byte for byte", got, err)
	}
	files, err := validate.Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if stale, err := validate.Stale(root, files); err != nil || len(stale) != 0 {
		t.Errorf("after generate, Stale = %v, %v; want none", stale, err)
	}
}
