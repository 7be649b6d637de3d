package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// This file is itlproxy's capacity estimate, computed from two scrapes of
// its /metrics as deploy/prometheus/rules.yaml's recording rule
// model:itlproxy_capacity_streams computes it over its window: per model,
// the upper bound of the highest load band whose p99 ITL (histogram_quantile
// over the band's buckets, summed over endpoints) is within (<=) the
// model's ITL objective of class "default", among the bands with at least
// 100 gaps in the window. Here the window is the sweep: the scrape before
// its first level to the scrape after its last.

// The families the capacity rule reads.
const (
	itlByLoadMetric = "itlproxy_inter_token_latency_by_load_seconds"
	objectiveMetric = "itlproxy_slo_objective_seconds"
	bandUpperMetric = "itlproxy_load_band_upper_streams"
	// minBandGaps is the rule's guard: a band with fewer gaps in the window
	// says nothing about its p99.
	minBandGaps = 100
)

// capacityScrape is what the capacity rule reads from one scrape.
type capacityScrape struct {
	itl       map[string]map[string]*scrape.Buckets // model, load band: summed over endpoints
	objective map[string]float64                    // model: max of its ITL objectives of class default
	upper     map[string]float64                    // load band: its upper bound in streams
}

// capacityScrapeOf reads the capacity rule's series from a scrape.
func capacityScrapeOf(families scrape.Families) capacityScrape {
	c := capacityScrape{itl: map[string]map[string]*scrape.Buckets{}, objective: map[string]float64{}, upper: map[string]float64{}}
	for _, m := range families.Series(itlByLoadMetric) {
		model, band := scrape.Label(m, "model"), scrape.Label(m, "load")
		if c.itl[model] == nil {
			c.itl[model] = map[string]*scrape.Buckets{}
		}
		if c.itl[model][band] == nil {
			c.itl[model][band] = &scrape.Buckets{}
		}
		c.itl[model][band].Add(m.GetHistogram())
	}
	for _, m := range families.Series(objectiveMetric, "slo", "itl", "class", "default") {
		model := scrape.Label(m, "model")
		if v, ok := c.objective[model]; !ok || m.GetGauge().GetValue() > v {
			c.objective[model] = m.GetGauge().GetValue()
		}
	}
	for _, m := range families.Series(bandUpperMetric) {
		c.upper[scrape.Label(m, "load")] = m.GetGauge().GetValue()
	}
	return c
}

// proxyCapacityJSON is itlproxy's capacity estimate for one model.
type proxyCapacityJSON struct {
	Model string `json:"model"`
	// Streams is the rule's figure: the upper bound of Band. Null when
	// the rule gives none (Note says why), or when the band is the last,
	// 513+, whose bound is +Inf.
	Streams *int   `json:"streams"`
	Band    string `json:"band,omitempty"`
	// ObjectiveSeconds is itlproxy's ITL objective for the model (class
	// default), which the rule compares with; null when it has none.
	ObjectiveSeconds *float64    `json:"objective_seconds"`
	Bands            []proxyBand `json:"bands"`
	Note             string      `json:"note,omitempty"`
}

// proxyBand is one load band of the model over the sweep, as the rule
// sees it.
type proxyBand struct {
	Load string `json:"load"`
	Gaps uint64 `json:"gaps"`
	// P99Seconds is histogram_quantile(0.99) over the band's buckets; null
	// without gaps.
	P99Seconds *float64 `json:"p99_seconds"`
	// Counted: the band has the rule's 100 gaps; Met: counted, and its p99
	// within the objective.
	Counted bool `json:"counted"`
	Met     bool `json:"met"`
}

// proxyCapacity computes model's capacity as the rule does, over what
// itlproxy observed between before and after.
func proxyCapacity(model string, before, after capacityScrape) proxyCapacityJSON {
	pc := proxyCapacityJSON{Model: model, Bands: []proxyBand{}}
	objective, hasObjective := after.objective[model]
	if hasObjective {
		pc.ObjectiveSeconds = ptr(objective)
	}
	best := math.Inf(-1)
	for band, h := range after.itl[model] {
		prev := scrape.Buckets{}
		if b := before.itl[model][band]; b != nil {
			prev = *b
		}
		d, err := minus(*h, prev)
		if err != nil {
			pc.Note = err.Error()
			return pc
		}
		pb := proxyBand{Load: band, Gaps: d.Count, Counted: d.Count >= minBandGaps}
		if p99 := scrape.HistogramQuantile(0.99, d); !math.IsNaN(p99) {
			pb.P99Seconds = ptr(p99)
			pb.Met = pb.Counted && hasObjective && p99 <= objective
		}
		upper, bounded := after.upper[band]
		if pb.Met && bounded && upper > best {
			best, pc.Band = upper, band
		}
		pc.Bands = append(pc.Bands, pb)
	}
	slices.SortFunc(pc.Bands, func(a, b proxyBand) int {
		return cmp.Compare(after.upper[a.Load], after.upper[b.Load])
	})
	switch {
	case !hasObjective:
		pc.Note = fmt.Sprintf("itlproxy has no ITL objective for model %q (ITLPROXY_SLO_ITL, or its SLO file): its capacity rule gives none", model)
	case len(pc.Bands) == 0:
		pc.Note = fmt.Sprintf("itlproxy measured no gap of model %q by load band over the sweep", model)
	case pc.Band == "":
		pc.Note = fmt.Sprintf("no load band with %d gaps or more had its p99 ITL within itlproxy's objective", minBandGaps)
	case math.IsInf(best, 1):
		pc.Note = "the highest band, " + pc.Band + ", has no upper bound: the rule gives +Inf"
	default:
		n := int(best)
		pc.Streams = &n
	}
	return pc
}

// proxyCapacities computes the estimate of each model of the sweep.
func proxyCapacities(models []weighted, before, after capacityScrape) []proxyCapacityJSON {
	var out []proxyCapacityJSON
	for _, m := range models {
		out = append(out, proxyCapacity(m.Name, before, after))
	}
	return out
}
