package metrics

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// SLO kinds: the values of the slo label.
const (
	SLOTTFT = "ttft"
	SLOITL  = "itl"
	SLOTPOT = "tpot"
)

// Objectives are a model's latency objectives; zero means no objective of
// that kind. A TTFT breaches when it exceeds TTFT, a gap when it exceeds
// ITL, a stream's TPOT when it exceeds TPOT ("exceeds": strictly greater,
// so that the breach count is exactly _count minus the bucket le=objective).
type Objectives struct {
	TTFT, ITL, TPOT time.Duration
}

func (o Objectives) each(f func(slo string, d time.Duration)) {
	f(SLOTTFT, o.TTFT)
	f(SLOITL, o.ITL)
	f(SLOTPOT, o.TPOT)
}

// SLOs are the objectives of every model: Default for any model that has
// no entry of its own (and for the _other and _unknown labels).
type SLOs struct {
	Default Objectives
	Models  map[string]Objectives
}

// For returns the objectives of the model label value.
func (s SLOs) For(model string) Objectives {
	if o, ok := s.Models[model]; ok {
		return o
	}
	return s.Default
}

// bounds returns every objective of one kind, for bucket bounds.
func (s SLOs) bounds(slo string) []float64 {
	var out []float64
	add := func(o Objectives) {
		o.each(func(kind string, d time.Duration) {
			if kind == slo && d > 0 {
				out = append(out, d.Seconds())
			}
		})
	}
	add(s.Default)
	for _, o := range s.Models {
		add(o)
	}
	return out
}

// modelNames returns the models with objectives of their own, sorted.
func (s SLOs) modelNames() []string {
	names := make([]string, 0, len(s.Models))
	for m := range s.Models {
		names = append(names, m)
	}
	slices.Sort(names)
	return names
}

// LoadSLOFile reads per-model objectives from a YAML file, layered over
// base (the defaults from the environment):
//
//	default: {ttft: 2s, itl: 100ms, tpot: 80ms}
//	models:
//	  meta-llama/Llama-3.1-8B-Instruct: {ttft: 500ms, itl: 40ms}
//
// Each kind is resolved on its own: a model's value, else the file's
// default, else base. "0" sets no objective of that kind. The file is
// decoded strictly: every problem (unknown key, bad or negative duration,
// repeated model, wrong shape) is reported with its file, line and column.
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
	out := SLOs{Default: base, Models: map[string]Objectives{}}
	if len(doc.Content) == 0 {
		return out, nil // an empty file: no overrides
	}
	top := doc.Content[0]
	var models *yaml.Node
	seen := map[string]bool{}
	p.mapping(top, "the file", func(key string, k, v *yaml.Node) {
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
		default:
			p.errorf(k, "unknown key %q (want default or models)", key)
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
	if len(p.problems) > 0 {
		return SLOs{}, errors.Join(p.problems...)
	}
	return out, nil
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

// objectives reads {ttft, itl, tpot}; kinds not given keep inherit's.
func (p *sloParser) objectives(n *yaml.Node, where string, inherit Objectives) Objectives {
	o := inherit
	seen := map[string]bool{}
	p.mapping(n, where, func(key string, k, v *yaml.Node) {
		var dst *time.Duration
		switch key {
		case SLOTTFT:
			dst = &o.TTFT
		case SLOITL:
			dst = &o.ITL
		case SLOTPOT:
			dst = &o.TPOT
		default:
			p.errorf(k, "%s: unknown key %q (want ttft, itl or tpot)", where, key)
			return
		}
		if seen[key] {
			p.errorf(k, "%s.%s is given twice", where, key)
			return
		}
		seen[key] = true
		d, err := time.ParseDuration(v.Value)
		switch {
		case v.Kind != yaml.ScalarNode || err != nil:
			p.errorf(v, "%s.%s: %q is not a duration (e.g. 40ms, 1.5s)", where, key, v.Value)
		case d < 0:
			p.errorf(v, "%s.%s: %s is negative", where, key, v.Value)
		default:
			*dst = d
		}
	})
	return o
}
