package image_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// readDockerignore reads a .dockerignore with the parser and matcher
// Docker's build context uses.
func readDockerignore(t *testing.T, text string) *patternmatcher.PatternMatcher {
	t.Helper()
	patterns, err := ignorefile.ReadAll(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

// mayInclude reports whether an exception could bring back something below
// the ignored directory rel, so that it must be walked: an exception
// pattern starting with rel/, or one starting with a wildcard. This is
// where Docker's context walk (moby's archive.TarWithOptions) makes the
// same choice.
func mayInclude(pm *patternmatcher.PatternMatcher, rel string) bool {
	for _, p := range pm.Patterns() {
		pattern := filepath.ToSlash(p.String())
		if p.Exclusion() && (strings.HasPrefix(pattern+"/", rel+"/") || strings.ContainsAny(pattern[:1], "*?[")) {
			return true
		}
	}
	return false
}

// copyContext copies the files of the repository that .dockerignore lets
// into the build context.
func copyContext(t *testing.T, repo, dst string) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repo, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	pm := readDockerignore(t, string(text))
	n := 0
	err = filepath.WalkDir(repo, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repo, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		ignored, err := pm.MatchesOrParentMatches(rel)
		switch {
		case err != nil:
			return err
		case d.IsDir() && ignored && !mayInclude(pm, rel):
			return filepath.SkipDir
		case d.IsDir() || ignored:
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: not a regular file", rel)
		}
		data, err := os.ReadFile(path)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, rel), data, 0o644)
		}
		n++
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal(".dockerignore leaves an empty build context")
	}
}

// TestDockerignore checks the context walk: what an allow-list with
// exceptions keeps, and which ignored directories it must still walk.
func TestDockerignore(t *testing.T) {
	pm := readDockerignore(t, "# allow-list\n*\n!go.mod\n!cmd\n**/*_test.go\n/**/testdata\n!cmd/keep/testdata\n")
	for _, tc := range []struct {
		path    string
		ignored bool
	}{
		{"go.mod", false},
		{"go.sum", true},
		{".git", true},
		{"README.md", true},
		{"cmd", false},
		{"cmd/itlproxy/main.go", false},
		{"cmd/itlproxy/run_test.go", true},
		{"x_test.go", true},
		{"cmd/itlproxy/testdata/a.txt", true},
		{"cmd/keep/testdata/a.txt", false},
		{"deploy/kubernetes/validate/go.mod", true},
	} {
		if got, err := pm.MatchesOrParentMatches(tc.path); got != tc.ignored || err != nil {
			t.Errorf("ignored(%q) = %v, %v; want %v", tc.path, got, err, tc.ignored)
		}
	}
	for _, tc := range []struct {
		dir  string
		want bool
	}{{".git", false}, {"deploy", false}, {"cmd", true}} {
		if got := mayInclude(pm, tc.dir); got != tc.want {
			t.Errorf("mayInclude(%q) = %v, want %v", tc.dir, got, tc.want)
		}
	}
}

// TestDockerignoreContext checks what the repository's .dockerignore
// leaves in the build context: the module's files and its packages'
// sources, without tests, test data, or anything else.
func TestDockerignoreContext(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repo, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	pm := readDockerignore(t, string(text))
	for path, ignored := range map[string]bool{
		"go.mod":                            false,
		"go.sum":                            false,
		"cmd/itlproxy/main.go":              false,
		"cmd/internal/admin/livepage.html":  false, // embedded in the binary
		"proxy/proxy.go":                    false,
		"metrics/metrics.go":                false,
		"cmd/itlproxy/run_test.go":          true,
		"proxy/testdata/fuzz/x":             true,
		".git":                              true,
		"README.md":                         true,
		"Dockerfile":                        true,
		"internal/e2e/itlproxy.go":          true,
		"dashboards/overview.json":          true,
		"deploy/kubernetes/validate/go.mod": true,
		"deploy/image/go.mod":               true,
	} {
		if got, err := pm.MatchesOrParentMatches(path); got != ignored || err != nil {
			t.Errorf("%s: ignored %v, %v; want %v", path, got, err, ignored)
		}
	}
}
