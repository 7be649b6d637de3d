package main

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"
)

// What the image tests read of a Dockerfile and a .dockerignore: enough of
// their syntax for this repository's, and an error for anything else, so
// that a construct the tests do not understand cannot pass unnoticed.

// stage is one FROM of a Dockerfile, with what the tests look at.
type stage struct {
	from, name string
	args, env  map[string]string // ARG defaults and ENV values
	runs       []string          // RUN commands, continuation lines joined
	copies     [][]string        // COPY arguments, word by word
	user       string
	expose     []string
	entrypoint string // as written: the exec form is JSON
}

// lookup returns the value of a variable in the stage's RUN commands: ENV,
// then the build arguments given, then the ARG defaults. Only variables the
// stage declares exist, as in a Docker build.
func (s *stage) lookup(buildArgs map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if v, ok := s.env[name]; ok {
			return v, true
		}
		def, declared := s.args[name]
		if !declared {
			return "", false
		}
		if v, ok := buildArgs[name]; ok {
			return v, true
		}
		return def, true
	}
}

// parseDockerfile reads the instructions of a Dockerfile into stages, and
// the defaults of the ARGs before the first FROM (which only FROM lines
// see).
func parseDockerfile(text string) (stages []stage, global map[string]string, err error) {
	global = map[string]string{}
	for _, inst := range dockerInstructions(text) {
		keyword, rest, _ := strings.Cut(inst, " ")
		keyword, rest = strings.ToUpper(keyword), strings.TrimSpace(rest)
		if keyword == "FROM" {
			words := strings.Fields(rest)
			for len(words) > 0 && strings.HasPrefix(words[0], "--") {
				words = words[1:]
			}
			s := stage{args: map[string]string{}, env: map[string]string{}}
			switch {
			case len(words) == 1:
				s.from = words[0]
			case len(words) == 3 && strings.EqualFold(words[1], "AS"):
				s.from, s.name = words[0], words[2]
			default:
				return nil, nil, fmt.Errorf("FROM %s: want an image and an optional AS name", rest)
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 && keyword != "ARG" {
			return nil, nil, fmt.Errorf("%s before FROM", keyword)
		}
		switch keyword {
		case "ARG", "ENV":
			for _, w := range strings.Fields(rest) {
				name, value, hasValue := strings.Cut(w, "=")
				if keyword == "ENV" && !hasValue {
					return nil, nil, fmt.Errorf("ENV %s: want NAME=value", rest)
				}
				if strings.ContainsAny(value, `"'$\`) {
					return nil, nil, fmt.Errorf("%s %s: quoted or computed values are not supported here", keyword, rest)
				}
				switch {
				case len(stages) == 0:
					global[name] = value
				case keyword == "ARG":
					stages[len(stages)-1].args[name] = value
				default:
					stages[len(stages)-1].env[name] = value
				}
			}
			continue
		}
		s := &stages[len(stages)-1]
		switch keyword {
		case "RUN":
			s.runs = append(s.runs, rest)
		case "COPY":
			s.copies = append(s.copies, strings.Fields(rest))
		case "USER":
			s.user = rest
		case "EXPOSE":
			s.expose = append(s.expose, strings.Fields(rest)...)
		case "ENTRYPOINT":
			s.entrypoint = rest
		case "WORKDIR", "LABEL":
		default:
			return nil, nil, fmt.Errorf("instruction %s is not understood by the image tests", keyword)
		}
	}
	return stages, global, nil
}

// dockerInstructions splits a Dockerfile into instructions: comment lines
// dropped (also inside continuations), lines ending in a backslash joined
// to the next.
func dockerInstructions(text string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, " \t\r\n")
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, strings.TrimSpace(cur.String()))
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, strings.TrimSpace(cur.String()))
	}
	return out
}

// stripRunFlags removes RUN's own flags (--mount=..., --network=...).
func stripRunFlags(run string) string {
	for strings.HasPrefix(run, "--") {
		_, run, _ = strings.Cut(run, " ")
		run = strings.TrimSpace(run)
	}
	return run
}

// shellWords splits one simple shell command into words as sh would:
// quotes removed, backslashes applied, $NAME and ${NAME} replaced by
// lookup (an undeclared variable is an error). Anything that would make it
// more than one simple command (; & | < > ( ) ` $(...)) is an error.
func shellWords(s string, lookup func(string) (string, bool)) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	expand := func(i int) (int, error) { // s[i] == '$'
		var name string
		var n int
		switch {
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return 0, errors.New("unterminated ${")
			}
			name, n = s[i+2:i+end], end+1
		case strings.HasPrefix(s[i:], "$("):
			return 0, errors.New("command substitution is not one simple command")
		default:
			n = 1
			for i+n < len(s) && isNameByte(s[i+n], n == 1) {
				n++
			}
			name = s[i+1 : i+n]
		}
		if !isName(name) {
			return 0, fmt.Errorf("${%s}: only plain variables are supported", name)
		}
		v, ok := lookup(name)
		if !ok {
			return 0, fmt.Errorf("$%s is not declared in the stage", name)
		}
		cur.WriteString(v)
		return n, nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
			continue
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("unterminated '")
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
		case c == '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				switch {
				case s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0:
					i++
					cur.WriteByte(s[i])
				case s[i] == '$':
					n, err := expand(i)
					if err != nil {
						return nil, err
					}
					i += n - 1
				case s[i] == '`':
					return nil, errors.New("command substitution is not one simple command")
				default:
					cur.WriteByte(s[i])
				}
			}
			if i >= len(s) {
				return nil, errors.New(`unterminated "`)
			}
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '$':
			n, err := expand(i)
			if err != nil {
				return nil, err
			}
			i += n - 1
		case strings.IndexByte(";&|<>()`", c) >= 0:
			return nil, fmt.Errorf("%q: not one simple command", c)
		default:
			cur.WriteByte(c)
		}
		inWord = true
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func isNameByte(c byte, first bool) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
}

func isName(s string) bool {
	for i := range len(s) {
		if !isNameByte(s[i], i == 0) {
			return false
		}
	}
	return s != ""
}

// isAssignment reports whether a word is a NAME=value prefix of a command.
func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	return ok && isName(name)
}

// ignoreRules are the patterns of a .dockerignore, in order.
type ignoreRules []ignoreRule

type ignoreRule struct {
	segments []string // the pattern split at slashes; "**" spans any number
	include  bool     // a "!" exception
}

func parseDockerignore(text string) ignoreRules {
	var rules ignoreRules
	for line := range strings.Lines(text) {
		p := strings.TrimSpace(line)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		r := ignoreRule{}
		if rest, ok := strings.CutPrefix(p, "!"); ok {
			r.include, p = true, strings.TrimSpace(rest)
		}
		p = strings.TrimPrefix(path.Clean(p), "/")
		r.segments = strings.Split(p, "/")
		rules = append(rules, r)
	}
	return rules
}

// ignored reports whether the build context leaves out rel (a
// slash-separated path): the last rule matching it or one of its parent
// directories decides, as in Docker.
func (rules ignoreRules) ignored(rel string) bool {
	segs := strings.Split(rel, "/")
	ignored := false
	for _, r := range rules {
		for n := 1; n <= len(segs); n++ {
			if matchSegments(r.segments, segs[:n]) {
				ignored = !r.include
				break
			}
		}
	}
	return ignored
}

// mayInclude reports whether an exception could bring back something
// below the directory rel, so that an ignored directory must be walked.
func (rules ignoreRules) mayInclude(rel string) bool {
	segs := strings.Split(rel, "/")
	for _, r := range rules {
		if r.include && (r.segments[0] == "**" || len(r.segments) > len(segs) && matchSegments(r.segments[:len(segs)], segs)) {
			return true
		}
	}
	return false
}

func matchSegments(pattern, segs []string) bool {
	if len(pattern) == 0 {
		return len(segs) == 0
	}
	if pattern[0] == "**" {
		for i := 0; i <= len(segs); i++ {
			if matchSegments(pattern[1:], segs[i:]) {
				return true
			}
		}
		return false
	}
	if len(segs) == 0 {
		return false
	}
	ok, _ := path.Match(pattern[0], segs[0])
	return ok && matchSegments(pattern[1:], segs[1:])
}

func TestShellWords(t *testing.T) {
	vars := map[string]string{"VERSION": "v1.2.3", "EMPTY": ""}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	for _, tc := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{"plain", "go build ./cmd/x", []string{"go", "build", "./cmd/x"}, ""},
		{"assignments and spaces", "  CGO_ENABLED=0\tGOOS=$EMPTY  go build ", []string{"CGO_ENABLED=0", "GOOS=", "go", "build"}, ""},
		{"double quotes expand", `-ldflags="-s -X main.version=${VERSION}"`, []string{"-ldflags=-s -X main.version=v1.2.3"}, ""},
		{"single quotes do not", `'$VERSION' "a\"b" c\ d`, []string{"$VERSION", `a"b`, "c d"}, ""},
		{"empty quoted word", `go "" x`, []string{"go", "", "x"}, ""},
		{"undeclared", "go build -o $OUT", nil, "$OUT is not declared"},
		{"default value syntax", "${VERSION:-dev}", nil, "only plain variables"},
		{"two commands", "go mod download && go build", nil, `'&': not one simple command`},
		{"command substitution", "go build -ldflags=$(git describe)", nil, "command substitution"},
		{"unterminated", `go "build`, nil, `unterminated "`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := shellWords(tc.in, lookup)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("shellWords(%q) = %q, %v; want an error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || strings.Join(got, "\x00") != strings.Join(tc.want, "\x00") || len(got) != len(tc.want) {
				t.Errorf("shellWords(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestDockerignore(t *testing.T) {
	rules := parseDockerignore("# allow-list\n*\n!go.mod\n!cmd\n**/*_test.go\n/**/testdata\n!cmd/keep/testdata\n")
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
		if got := rules.ignored(tc.path); got != tc.ignored {
			t.Errorf("ignored(%q) = %v, want %v", tc.path, got, tc.ignored)
		}
	}
	for _, tc := range []struct {
		dir  string
		want bool
	}{{".git", false}, {"deploy", false}, {"cmd", true}} {
		if got := rules.mayInclude(tc.dir); got != tc.want {
			t.Errorf("mayInclude(%q) = %v, want %v", tc.dir, got, tc.want)
		}
	}
}
