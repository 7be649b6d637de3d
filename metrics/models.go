package metrics

import (
	"sync"
	"unicode/utf8"
)

// Model label values that do not name a model.
const (
	// ModelOther is the label of every model outside the allow-list, or
	// past the distinct-model cap.
	ModelOther = "_other"
	// ModelUnknown is the label of requests that name no model (or whose
	// body could not be read as JSON).
	ModelUnknown = "_unknown"
)

// maxModelNameBytes bounds a label value's length: a client could send a
// megabyte-long "model" string, and it would be copied into every series.
const maxModelNameBytes = 256

// boundedLabels turns a name a request gives (its model, or its tenant:
// newTenantLabels) into a bounded label value. With an allow-list, only
// listed names keep their name. Without one, the first max distinct names
// seen keep theirs and later ones become ModelOther (TenantOther), so a
// client sending random names cannot grow the series count without bound
// (the same fold Caddy applies to unknown hosts).
type boundedLabels struct {
	allow map[string]bool // nil: no allow-list, cap by max
	max   int
	// empty is the label of an empty name: ModelUnknown for models.
	empty string
	// refuse, when not nil, reports names that must never be a label
	// value, whatever the allow-list (tenants that look like credentials).
	refuse func(name string) bool
	// admit is called once for each label value that appears after
	// construction (under the cap), so its series can be set up.
	admit func(label string)

	mu   sync.RWMutex
	seen map[string]bool
}

// newBoundedLabels returns the labeler of models. reserved models always
// keep their name (those with objectives of their own); they count towards
// max.
func newBoundedLabels(allow, reserved []string, max int) *boundedLabels {
	l := &boundedLabels{max: max, empty: ModelUnknown, seen: make(map[string]bool)}
	if len(allow) > 0 {
		l.allow = make(map[string]bool, len(allow)+len(reserved))
		for _, m := range allow {
			l.allow[m] = true
		}
	}
	for _, m := range reserved {
		if l.allow != nil {
			l.allow[m] = true
		} else {
			l.seen[m] = true
		}
	}
	return l
}

// static returns the label values known from the start: the allow-list
// (or the reserved models) and the two catch-alls.
func (l *boundedLabels) static() []string {
	out := []string{ModelOther, l.empty}
	for m := range l.allow {
		out = append(out, m)
	}
	for m := range l.seen {
		out = append(out, m)
	}
	return out
}

// label returns the label value for model.
func (l *boundedLabels) label(model string) string {
	switch {
	case model == "":
		return l.empty
	case len(model) > maxModelNameBytes || !utf8.ValidString(model):
		return ModelOther
	case l.refuse != nil && l.refuse(model):
		return ModelOther
	case l.allow != nil:
		if l.allow[model] {
			return model
		}
		// A model reserved by reloaded objectives is in seen.
		l.mu.RLock()
		reserved := l.seen[model]
		l.mu.RUnlock()
		if reserved {
			return model
		}
		return ModelOther
	}
	l.mu.RLock()
	known, full := l.seen[model], len(l.seen) >= l.max
	l.mu.RUnlock()
	if known {
		return model
	}
	if full {
		return ModelOther
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[model] {
		return model
	}
	if len(l.seen) >= l.max {
		return ModelOther
	}
	l.seen[model] = true
	if l.admit != nil {
		l.admit(model)
	}
	return model
}
