package image_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// imageUID is the user the image runs as: distroless's "nonroot".
const imageUID = 65532

// repo is the repository's root, which holds the Dockerfile, .dockerignore
// and the main module's go.mod, from this module's directory (go test runs
// a test in its package's directory).
const repo = "../.."

// readDockerfile parses the Dockerfile and its instructions as BuildKit
// does, fails on any warning of BuildKit's checks (`docker build --check`),
// and returns the stages and the defaults of the ARGs before the first
// FROM (which only FROM lines see).
func readDockerfile(t *testing.T) (stages []instructions.Stage, global map[string]string) {
	t.Helper()
	f, err := os.Open(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	result, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	for _, w := range result.Warnings {
		t.Errorf("Dockerfile: %s (%s)", w.Short, w.URL)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, description, url, msg string, _ []parser.Range) {
		t.Errorf("Dockerfile: %s: %s (%s)", rule, msg, url)
	}})
	stages, metaArgs, err := instructions.Parse(result.AST, lint)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a final one", len(stages))
	}
	global = map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			global[kv.Key] = kv.ValueString()
		}
	}
	return stages, global
}

// commands returns the commands of type C of a stage, in order.
func commands[C instructions.Command](s instructions.Stage) []C {
	var out []C
	for _, c := range s.Commands {
		if c, ok := c.(C); ok {
			out = append(out, c)
		}
	}
	return out
}

// goBuild is the build stage's `go build` command: its environment
// assignments, its arguments after `go`, and where it writes the binary.
type goBuild struct {
	stage  instructions.Stage
	final  bool // it is the last stage
	env    []string
	args   []string
	output string // the -o value, where the final stage copies from
}

// findGoBuild finds the one RUN that runs `go build` and splits it into
// words as the build stage's shell would, with the ARG and ENV values the
// stage has there and the build arguments given.
func findGoBuild(t *testing.T, stages []instructions.Stage, global, buildArgs map[string]string) goBuild {
	t.Helper()
	var found []goBuild
	for i, s := range stages {
		for j, c := range s.Commands {
			run, ok := c.(*instructions.RunCommand)
			if !ok || !strings.Contains(run.String(), "go build") {
				continue
			}
			if !run.PrependShell {
				t.Fatalf("%s: want the shell form, which expands the build arguments", run)
			}
			env, err := runEnv(s.Commands[:j], global, buildArgs)
			if err != nil {
				t.Fatalf("%s: %v", run, err)
			}
			assigns, words, err := runWords(strings.Join(run.CmdLine, " "), env)
			if err != nil {
				t.Fatalf("%s: %v", run, err)
			}
			if len(words) < 2 || words[0] != "go" || words[1] != "build" {
				t.Fatalf("%s: want `[NAME=value ...] go build ...`", run)
			}
			b := goBuild{stage: s, final: i == len(stages)-1, env: assigns, args: words[1:]}
			k := slices.Index(b.args, "-o")
			if k < 0 || k+1 >= len(b.args) {
				t.Fatalf("%s: want -o <path>", run)
			}
			b.output = b.args[k+1]
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the Dockerfile has %d RUNs with `go build`, want 1", len(found))
	}
	return found[0]
}

// runEnv returns the environment that a RUN after cmds, the commands
// before it in its stage, runs in: the stage's ENV values, and the ARGs it
// declared, with the build argument given, else the ARG's default, else
// the default of the global ARG of that name. Values are expanded as
// BuildKit does.
func runEnv(cmds []instructions.Command, global, buildArgs map[string]string) (expand.Environ, error) {
	vars := map[string]string{}
	lex := shell.NewLex('\\')
	set := func(name, value string) error {
		env := make([]string, 0, len(vars))
		for k, v := range vars {
			env = append(env, k+"="+v)
		}
		v, _, err := lex.ProcessWord(value, shell.EnvsFromSlice(env))
		vars[name] = v
		return err
	}
	for _, c := range cmds {
		var err error
		switch c := c.(type) {
		case *instructions.ArgCommand:
			for _, a := range c.Args {
				v, given := buildArgs[a.Key]
				switch def, inherited := global[a.Key]; {
				case given:
					vars[a.Key] = v
				case a.Value != nil:
					err = errors.Join(err, set(a.Key, *a.Value))
				case inherited:
					vars[a.Key] = def
				}
			}
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				err = errors.Join(err, set(kv.Key, kv.Value))
			}
		}
		if err != nil {
			return nil, err
		}
	}
	var pairs []string
	for k, v := range vars {
		pairs = append(pairs, k+"="+v)
	}
	return expand.ListEnviron(pairs...), nil
}

// runWords parses the shell form of a RUN with mvdan.cc/sh's POSIX shell
// parser, wants one simple command (no list, pipe, redirection, subshell
// or background), and returns its NAME=value prefixes and its words,
// expanded with env as `sh -u` would: an unset variable is an error, and
// so is a command substitution.
func runWords(command string, env expand.Environ) (assigns, words []string, err error) {
	file, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(command), "")
	if err != nil {
		return nil, nil, err
	}
	if len(file.Stmts) != 1 {
		return nil, nil, fmt.Errorf("%d commands, want one simple command", len(file.Stmts))
	}
	st := file.Stmts[0]
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || st.Negated || st.Background || len(st.Redirs) > 0 {
		return nil, nil, errors.New("not one simple command")
	}
	cfg := &expand.Config{Env: env, NoUnset: true}
	for _, a := range call.Assigns {
		v, err := expand.Literal(cfg, a.Value)
		if err != nil {
			return nil, nil, err
		}
		assigns = append(assigns, a.Name.Value+"="+v)
	}
	words, err = expand.Fields(cfg, call.Args...)
	return assigns, words, err
}

func TestRunWords(t *testing.T) {
	env := expand.ListEnviron("VERSION=v1.2.3", "EMPTY=")
	for _, tc := range []struct {
		name, in string
		want     []string // the assignments, then the words
		err      string
	}{
		{"plain", "go build ./cmd/x", []string{"go", "build", "./cmd/x"}, ""},
		{"assignments and spaces", "  CGO_ENABLED=0\tGOOS=$EMPTY  go build ", []string{"CGO_ENABLED=0", "GOOS=", "go", "build"}, ""},
		{"double quotes expand", `go -ldflags="-s -X main.version=${VERSION}"`, []string{"go", "-ldflags=-s -X main.version=v1.2.3"}, ""},
		{"single quotes do not", `go '$VERSION' "a\"b" c\ d`, []string{"go", "$VERSION", `a"b`, "c d"}, ""},
		{"empty quoted word", `go "" x`, []string{"go", "", "x"}, ""},
		{"default value", "go ${VERSION:-dev} ${UNSET:-dev}", []string{"go", "v1.2.3", "dev"}, ""},
		{"undeclared", "go build -o $OUT", nil, "OUT: unbound variable"},
		{"two commands", "go mod download && go build", nil, "not one simple command"},
		{"a list", "go mod download; go build", nil, "2 commands"},
		{"a redirection", "go build > log", nil, "not one simple command"},
		{"command substitution", "go build -ldflags=$(git describe)", nil, "command substitution"},
		{"unterminated", `go "build`, nil, "without closing quote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assigns, words, err := runWords(tc.in, env)
			got := append(assigns, words...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("runWords(%q) = %q, %v; want an error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("runWords(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestDockerfileSettings checks the Dockerfile's settings: the build
// stage's Go against go.mod's, and the final stage's minimal base, the
// binary the build stage makes, the non-root user, and an entrypoint that
// needs no arguments. (TestDockerfileBuild checks the ports EXPOSE
// declares against the binary's.)
func TestDockerfileSettings(t *testing.T) {
	stages, global := readDockerfile(t)
	build := findGoBuild(t, stages, global, map[string]string{"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH})
	// The golang images build with GOTOOLCHAIN=local: an older Go than
	// go.mod's would refuse to build.
	goMod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goLine string
	for line := range strings.Lines(string(goMod)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			goLine = v
		}
	}
	if !strings.Contains(build.stage.BaseName, "golang:${GO_VERSION}") || global["GO_VERSION"] != goLine {
		t.Errorf("build stage FROM %s with GO_VERSION=%s: want golang:${GO_VERSION} and go.mod's Go, %s", build.stage.BaseName, global["GO_VERSION"], goLine)
	}
	final := stages[len(stages)-1]
	if final.BaseName != "scratch" && !strings.HasPrefix(final.BaseName, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s: want gcr.io/distroless/static (or scratch with CA certificates)", final.BaseName)
	}
	if build.final {
		t.Error("the final stage builds the binary: want a separate build stage")
	}
	installed := installedBinary(final, build)
	if installed == "" {
		t.Errorf("the final stage does not COPY --from=%s %s", build.stage.Name, build.output)
	}
	var user string
	for _, u := range commands[*instructions.UserCommand](final) {
		user = u.User
	}
	if user != fmt.Sprint(imageUID) && user != fmt.Sprintf("%d:%d", imageUID, imageUID) {
		t.Errorf("USER %q: want %d (numeric, so that Kubernetes' runAsNonRoot can verify it)", user, imageUID)
	}
	if installed == "" {
		return
	}
	entrypoints := commands[*instructions.EntrypointCommand](final)
	if len(entrypoints) != 1 || entrypoints[0].PrependShell || !slices.Equal(entrypoints[0].CmdLine, []string{installed}) {
		t.Errorf("ENTRYPOINT %v: want the exec form [%q] (no shell in the image, no arguments needed)", entrypoints, installed)
	}
}

// installedBinary returns where the final stage copies the binary the
// build stage makes, or "".
func installedBinary(final instructions.Stage, build goBuild) string {
	for _, c := range commands[*instructions.CopyCommand](final) {
		if c.From == build.stage.Name && slices.Equal(c.SourcePaths, []string{build.output}) {
			return c.DestPath
		}
	}
	return ""
}
