package metrics

import (
	"slices"
	"time"
)

// SLO kinds: the values of the slo label.
const (
	SLOTTFT   = "ttft"
	SLOITL    = "itl"
	SLOTPOT   = "tpot"
	SLOMaxGap = "max_gap"
)

// ClassDefault is the service class of every request that names no class
// the SLO file defines.
const ClassDefault = "default"

// Objectives are latency objectives; zero means no objective of that kind.
// A TTFT breaches when it exceeds TTFT, a gap when it exceeds ITL, a
// stream's TPOT when it exceeds TPOT, a stream's longest gap when it
// exceeds MaxGap ("exceeds": strictly greater, so that the breach count is
// exactly _count minus the bucket le=objective).
type Objectives struct {
	TTFT, ITL, TPOT, MaxGap time.Duration
}

func (o Objectives) each(f func(slo string, d time.Duration)) {
	f(SLOTTFT, o.TTFT)
	f(SLOITL, o.ITL)
	f(SLOTPOT, o.TPOT)
	f(SLOMaxGap, o.MaxGap)
}

// judges reports whether a stream with these objectives is judged for
// goodput: it has a TTFT, TPOT or longest-gap objective.
func (o Objectives) judges() bool { return o.TTFT > 0 || o.TPOT > 0 || o.MaxGap > 0 }

// Override is objectives of which only some kinds are set: a service
// class's, which replace those kinds and leave the others as resolved
// without the class.
type Override struct {
	Objectives
	// Set has a bit per kind given: 1 TTFT, 2 ITL, 4 TPOT, 8 MaxGap.
	Set uint8
}

// over returns o with the kinds v sets replaced.
func (v Override) over(o Objectives) Objectives {
	if v.Set&1 != 0 {
		o.TTFT = v.TTFT
	}
	if v.Set&2 != 0 {
		o.ITL = v.ITL
	}
	if v.Set&4 != 0 {
		o.TPOT = v.TPOT
	}
	if v.Set&8 != 0 {
		o.MaxGap = v.MaxGap
	}
	return o
}

// Class is one service class's objectives: Default over every model, and
// per model over that.
type Class struct {
	Default Override
	Models  map[string]Override
}

// SLOs are the objectives of every model and service class: Default for
// any model that has no entry of its own (and for the _other and _unknown
// labels), Classes for requests that name a class.
type SLOs struct {
	Default Objectives
	Models  map[string]Objectives
	Classes map[string]Class
}

// For returns the objectives of the model label value in class: each kind
// from the most specific place that sets it — the class's entry for the
// model, the class, the model, the file's default, the environment.
func (s SLOs) For(model, class string) Objectives {
	o, ok := s.Models[model]
	if !ok {
		o = s.Default
	}
	c, ok := s.Classes[class]
	if !ok {
		return o
	}
	o = c.Default.over(o)
	if mo, ok := c.Models[model]; ok {
		o = mo.over(o)
	}
	return o
}

// ClassNames returns the class label values: ClassDefault and every class
// the file defines, sorted after it.
func (s SLOs) ClassNames() []string {
	names := make([]string, 0, len(s.Classes)+1)
	for c := range s.Classes {
		names = append(names, c)
	}
	slices.Sort(names)
	return append([]string{ClassDefault}, names...)
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
	for _, m := range s.modelNames() {
		for _, c := range s.ClassNames() {
			add(s.For(m, c))
		}
	}
	for _, c := range s.ClassNames() {
		add(s.For("", c))
	}
	return out
}

// modelNames returns the models with objectives of their own (in the
// file's models or in a class's), sorted.
func (s SLOs) modelNames() []string {
	names := make([]string, 0, len(s.Models))
	for m := range s.Models {
		names = append(names, m)
	}
	for _, c := range s.Classes {
		for m := range c.Models {
			if _, dup := s.Models[m]; !dup && !slices.Contains(names, m) {
				names = append(names, m)
			}
		}
	}
	slices.Sort(names)
	return names
}
