package metrics

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxClassNameBytes bounds a class name, which becomes a label value.
const maxClassNameBytes = 64

// LoadSLOFile reads per-model and per-class objectives from a YAML file,
// layered over base (the defaults from the environment):
//
//	default: {ttft: 2s, itl: 100ms, tpot: 80ms, max_gap: 5s}
//	models:
//	  meta-llama/Llama-3.1-8B-Instruct: {ttft: 500ms, itl: 40ms}
//	classes:
//	  interactive:
//	    ttft: 1s
//	    models:
//	      meta-llama/Llama-3.1-8B-Instruct: {ttft: 300ms}
//	  batch: {ttft: 30s, tpot: 0}
//
// Each kind is resolved on its own, most specific first: the class's entry
// for the model, the class, the model, the file's default, base. "0" sets
// no objective of that kind. The file is decoded strictly: every problem
// (unknown key, bad or negative duration, repeated model or class, wrong
// shape) is reported with its file, line and column.
func LoadSLOFile(path string, base Objectives) (SLOs, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return SLOs{}, err
	}
	return parseSLOs(path, data, base)
}

func parseSLOs(path string, data []byte, base Objectives) (SLOs, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// "yaml: line 3: did not find ..." reads as "slo.yaml:3: did not find ...".
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if line, why, ok := strings.Cut(rest, ": "); ok {
				return SLOs{}, fmt.Errorf("%s:%s: %s", path, line, why)
			}
		}
		return SLOs{}, fmt.Errorf("%s: %s", path, msg)
	}
	p := &sloParser{path: path}
	out := SLOs{Default: base, Models: map[string]Objectives{}, Classes: map[string]Class{}}
	if len(doc.Content) == 0 {
		return out, nil // an empty file: no overrides
	}
	var models, classes *yaml.Node
	seen := map[string]bool{}
	p.mapping(doc.Content[0], "the file", func(key string, k, v *yaml.Node) {
		if seen[key] {
			p.errorf(k, "%s is given twice", key)
			return
		}
		seen[key] = true
		switch key {
		case "default":
			out.Default = p.objectives(v, "default", base)
		case "models":
			models = v
		case "classes":
			classes = v
		default:
			p.errorf(k, "unknown key %q (want default, models or classes)", key)
		}
	})
	if models != nil {
		p.mapping(models, "models", func(name string, k, v *yaml.Node) {
			if _, dup := out.Models[name]; dup {
				p.errorf(k, "model %q is listed twice", name)
				return
			}
			out.Models[name] = p.objectives(v, fmt.Sprintf("models[%q]", name), out.Default)
		})
	}
	if classes != nil {
		p.mapping(classes, "classes", func(name string, k, v *yaml.Node) {
			if _, dup := out.Classes[name]; dup {
				p.errorf(k, "class %q is listed twice", name)
				return
			}
			if why := badClassName(name); why != "" {
				p.errorf(k, "class %q: %s", name, why)
				return
			}
			out.Classes[name] = p.class(v, fmt.Sprintf("classes[%q]", name))
		})
	}
	if len(p.problems) > 0 {
		return SLOs{}, errors.Join(p.problems...)
	}
	return out, nil
}

// badClassName says why a class name cannot be a label value, or "".
func badClassName(name string) string {
	switch {
	case name == ClassDefault:
		return "is the class of requests that name none: set its objectives under the top-level default"
	case name == "" || len(name) > maxClassNameBytes:
		return fmt.Sprintf("must be 1 to %d bytes", maxClassNameBytes)
	}
	for _, r := range name {
		if !(r == '-' || r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return "may hold only letters, digits, '-', '_' and '.'"
		}
	}
	return ""
}

// sloParser walks the YAML tree, collecting every problem.
type sloParser struct {
	path     string
	problems []error
}

func (p *sloParser) errorf(n *yaml.Node, format string, args ...any) {
	p.problems = append(p.problems, fmt.Errorf("%s:%d:%d: %s", p.path, n.Line, n.Column, fmt.Sprintf(format, args...)))
}

// mapping calls each for every key of a mapping node; null counts as
// empty.
func (p *sloParser) mapping(n *yaml.Node, what string, each func(key string, k, v *yaml.Node)) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping", what)
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, "%s: keys must be plain names", what)
			continue
		}
		each(k.Value, k, v)
	}
}

// objectives reads {ttft, itl, tpot, max_gap}; kinds not given keep
// inherit's.
func (p *sloParser) objectives(n *yaml.Node, where string, inherit Objectives) Objectives {
	return p.override(n, where, inherit, nil).over(inherit)
}

// class reads a class: its objectives and its models' objectives.
func (p *sloParser) class(n *yaml.Node, where string) Class {
	c := Class{Models: map[string]Override{}}
	var models *yaml.Node
	c.Default = p.override(n, where, Objectives{}, func(key string, k, v *yaml.Node) bool {
		if key != "models" {
			return false
		}
		models = v
		return true
	})
	if models != nil {
		p.mapping(models, where+".models", func(name string, k, v *yaml.Node) {
			if _, dup := c.Models[name]; dup {
				p.errorf(k, "%s: model %q is listed twice", where, name)
				return
			}
			c.Models[name] = p.override(v, fmt.Sprintf("%s.models[%q]", where, name), Objectives{}, nil)
		})
	}
	return c
}

// override reads the objective kinds a mapping gives. other, when not nil,
// takes the keys that are not objectives (it reports whether it knew the
// key).
func (p *sloParser) override(n *yaml.Node, where string, inherit Objectives, other func(key string, k, v *yaml.Node) bool) Override {
	o := Override{Objectives: inherit}
	seen := map[string]bool{}
	p.mapping(n, where, func(key string, k, v *yaml.Node) {
		if seen[key] {
			p.errorf(k, "%s.%s is given twice", where, key)
			return
		}
		seen[key] = true
		var dst *time.Duration
		var bit uint8
		switch key {
		case SLOTTFT:
			dst, bit = &o.TTFT, 1
		case SLOITL:
			dst, bit = &o.ITL, 2
		case SLOTPOT:
			dst, bit = &o.TPOT, 4
		case SLOMaxGap:
			dst, bit = &o.MaxGap, 8
		default:
			if other == nil || !other(key, k, v) {
				want := "ttft, itl, tpot or max_gap"
				if other != nil {
					want = "ttft, itl, tpot, max_gap or models"
				}
				p.errorf(k, "%s: unknown key %q (want %s)", where, key, want)
			}
			return
		}
		d, err := time.ParseDuration(v.Value)
		switch {
		case v.Kind != yaml.ScalarNode || err != nil:
			p.errorf(v, "%s.%s: %q is not a duration (e.g. 40ms, 1.5s)", where, key, v.Value)
		case d < 0:
			p.errorf(v, "%s.%s: %s is negative", where, key, v.Value)
		default:
			*dst, o.Set = d, o.Set|bit
		}
	})
	return o
}
