package main

import (
	"fmt"
	"time"
)

// maxFailedShare is the share of a level's requests that may fail for it
// to meet the objectives: the tail a p99 objective leaves.
const maxFailedShare = 0.01

// What a level can miss, in the JSON's missed and bound_by.
const (
	missedTTFT   = "ttft"
	missedITL    = "itl"
	missedErrors = "errors"
)

// any reports whether o has an objective.
func (o objectives) any() bool { return o != objectives{} }

// missed returns what r, a level's measured requests, missed: its p99
// TTFT or p99 ITL beyond the objective (or no sample to judge), or more
// than maxFailedShare of its requests failed. Nothing without objectives.
func (o objectives) missed(r result) []string {
	out := []string{}
	if !o.any() {
		return out
	}
	if o.ttft > 0 && (r.ttft.count == 0 || r.ttft.quantile(0.99) > o.ttft) {
		out = append(out, missedTTFT)
	}
	if o.itl > 0 && (r.itl.count == 0 || r.itl.quantile(0.99) > o.itl) {
		out = append(out, missedITL)
	}
	if judged := r.sent - r.canceled; judged == 0 || float64(r.failed()) > maxFailedShare*float64(judged) {
		out = append(out, missedErrors)
	}
	return out
}

// capacityJSON is the sweep's verdict, and itlproxy's beside it.
type capacityJSON struct {
	// Concurrency is the highest level that met every objective; 0 when
	// none did, or there is no objective.
	Concurrency int `json:"concurrency"`
	// BoundBy is what the level above it missed (ttft, itl, errors):
	// what bounds the capacity. MissedAt is that level; 0 when the
	// highest level met them (AtLeast), or there is no objective.
	BoundBy  []string `json:"bound_by"`
	MissedAt int      `json:"missed_at"`
	// AtLeast: the highest level swept met the objectives, so the server
	// holds at least that many streams; sweep higher to find its limit.
	AtLeast bool `json:"at_least"`
	// Proxy is itlproxy's capacity estimate for each model, with
	// -compare-metrics.
	Proxy []proxyCapacityJSON `json:"proxy,omitempty"`
}

// findCapacity judges the levels done: the highest that met the
// objectives, and what the level above it missed. A level that met them
// above one that missed still counts, as itlproxy's capacity rule counts
// a band: capacity is where the objectives were met.
func findCapacity(levels []levelJSON, o objectives) capacityJSON {
	c := capacityJSON{BoundBy: []string{}}
	if !o.any() || len(levels) == 0 {
		return c
	}
	above := 0 // the index of the level above the capacity
	for i, l := range levels {
		if l.Met {
			c.Concurrency, above = l.Concurrency, i+1
		}
	}
	if above == len(levels) {
		c.AtLeast = true
		return c
	}
	c.BoundBy, c.MissedAt = levels[above].Missed, levels[above].Concurrency
	return c
}

// why says what level l missed, in numbers: "p99 ITL 50.12ms > 45ms".
func (o objectives) why(l levelJSON) string {
	var parts []string
	a := l.all
	for _, m := range l.Missed {
		switch m {
		case missedTTFT:
			parts = append(parts, beyond("TTFT", a.ttft, o.ttft))
		case missedITL:
			parts = append(parts, beyond("ITL", a.itl, o.itl))
		case missedErrors:
			parts = append(parts, fmt.Sprintf("%d of %d requests failed", a.failed(), a.sent-a.canceled))
		}
	}
	return joinAnd(parts)
}

// beyond says how a distribution missed its objective.
func beyond(name string, d dist, objective time.Duration) string {
	if d.count == 0 {
		return "no " + name + " sample"
	}
	return fmt.Sprintf("p99 %s %s > %s", name, fmtDuration(d.quantile(0.99)), fmtDuration(objective))
}

// String says what o asks: "p99 TTFT ≤ 2s and p99 ITL ≤ 50ms".
func (o objectives) String() string {
	var parts []string
	if o.ttft > 0 {
		parts = append(parts, "p99 TTFT ≤ "+fmtDuration(o.ttft))
	}
	if o.itl > 0 {
		parts = append(parts, "p99 ITL ≤ "+fmtDuration(o.itl))
	}
	if len(parts) == 0 {
		return "none"
	}
	return joinAnd(parts)
}

// joinAnd joins "a", "a and b", "a, b and c".
func joinAnd(parts []string) string {
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	out := parts[0]
	for _, p := range parts[1 : len(parts)-1] {
		out += ", " + p
	}
	return out + " and " + parts[len(parts)-1]
}

// verdict is the capacity in a sentence, as the text and the page show
// it.
func (c capacityJSON) verdict(levels []levelJSON, o objectives) string {
	switch {
	case !o.any():
		return "no objective given (-slo-ttft, -slo-itl): no capacity to find"
	case len(levels) == 0:
		return "no level done"
	case c.AtLeast:
		return fmt.Sprintf("at least %s: the highest level swept met %s; sweep higher to find the limit", streams(c.Concurrency), o)
	}
	var missed levelJSON
	for _, l := range levels {
		if l.Concurrency == c.MissedAt {
			missed = l
		}
	}
	if c.Concurrency == 0 {
		return fmt.Sprintf("none: the lowest level, %s, missed %s (%s)", streams(c.MissedAt), o, o.why(missed))
	}
	var bound []string
	for _, b := range c.BoundBy {
		bound = append(bound, missedNames[b])
	}
	return fmt.Sprintf("%s, the highest level that met %s; bound by %s: at %s, %s",
		streams(c.Concurrency), o, joinAnd(bound), streams(c.MissedAt), o.why(missed))
}

// missedNames are what a level can miss, as the text says it.
var missedNames = map[string]string{missedTTFT: "TTFT", missedITL: "ITL", missedErrors: "errors"}

// streams is "1 stream", "4 streams".
func streams(n int) string {
	if n == 1 {
		return "1 stream"
	}
	return fmt.Sprintf("%d streams", n)
}
