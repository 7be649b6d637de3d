// Package envconfig reads a command's configuration struct from the
// environment with caarlos0/env, and says what is wrong with it the way
// an operator can act on: each problem names its variable and quotes what
// was set. Each field's env tag names its variable, envDefault its
// default, help what it does: Usage prints them, the one place a
// setting's help is written.
package envconfig

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Parse fills cfg, a pointer to a struct, from environ. It returns a
// problem for each variable that does not parse, with the set of those
// variables, so that a check of the parsed values can leave them out.
func Parse(environ map[string]string, cfg any) (problems []string, bad map[string]bool) {
	bad = map[string]bool{}
	err := env.ParseWithOptions(cfg, env.Options{Environment: environ})
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		if err != nil {
			problems = append(problems, err.Error())
		}
		return problems, bad
	}
	t := reflect.TypeOf(cfg).Elem()
	for _, e := range agg.Errors {
		var pe env.ParseError
		if !errors.As(e, &pe) {
			problems = append(problems, e.Error())
			continue
		}
		key := variable(t, pe.Name)
		bad[key] = true
		problems = append(problems, fmt.Sprintf("%s=%q: %s", key, environ[key], parseProblem(pe)))
	}
	return problems, bad
}

// variable returns the variable of t's field named field.
func variable(t reflect.Type, field string) string {
	f, _ := t.FieldByName(field)
	key, _, _ := strings.Cut(f.Tag.Get("env"), ",")
	return key
}

func parseProblem(pe env.ParseError) string {
	switch pe.Type {
	case reflect.TypeFor[time.Duration]():
		return "not a duration (e.g. 500ms, 30s, 10m)"
	case reflect.TypeFor[ByteSize]():
		return "not a size (e.g. 1048576, 512KiB, 32MiB)"
	case reflect.TypeFor[int]():
		return "not a whole number"
	case reflect.TypeFor[float64]():
		return "not a number"
	case reflect.TypeFor[bool]():
		return "not true or false"
	}
	return pe.Err.Error()
}

// Usage writes each variable of t, a struct type (embedded structs'
// too), in order: its name, its default and its help.
func Usage(w io.Writer, t reflect.Type) { UsageOf(w, t) }

// UsageOf is Usage for the variables keys names, or every one without
// keys.
func UsageOf(w io.Writer, t reflect.Type, keys ...string) {
	for _, f := range reflect.VisibleFields(t) {
		key, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if key == "" || len(keys) > 0 && !slices.Contains(keys, key) {
			continue
		}
		fmt.Fprintf(w, "  %s", key)
		if def, ok := f.Tag.Lookup("envDefault"); ok {
			fmt.Fprintf(w, " (default %s)", def)
		}
		fmt.Fprintf(w, "\n      %s\n", f.Tag.Get("help"))
	}
}

// ByteSize is a size in bytes, written as a whole number with an
// optional KiB, MiB or GiB suffix.
type ByteSize int64

// UnmarshalText reads a size.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return errNotSize
	}
	*b = ByteSize(n * mult)
	return nil
}

var errNotSize = errors.New("not a size")

// List trims each item of a comma-separated list and drops the empty
// ones.
func List(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ShowURL is a URL setting as a message or a log line shows it: without
// its user information (a password, or a user name that is a key) and
// without its query (where some services take their keys), nor a
// fragment; each URL of a comma-separated list so. A value with an @ but
// no host (user:secret@host:port, parsed as a scheme and an opaque part)
// is shown from its last @ on; one that does not parse, not at all.
func ShowURL(raw string) string {
	var out []string
	for one := range strings.SplitSeq(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil {
			out = append(out, "(unparsable URL)")
			continue
		}
		u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
		if at := strings.LastIndexByte(u.Opaque, '@'); at >= 0 {
			out = append(out, u.Opaque[at+1:])
			continue
		}
		out = append(out, u.String())
	}
	return strings.Join(out, ",")
}
