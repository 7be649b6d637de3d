package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// This file draws the sweep page's charts as inline SVG, on the server:
// the page needs no script and no file beside it.

// Chart geometry, in the SVG's own units (it scales to the page).
const (
	chartW, chartH          = 560.0, 300.0
	plotLeft, plotRight     = 64.0, 540.0
	plotTop, plotBottom     = 34.0, 256.0
	maxXTicks, yTicksWanted = 12, 5
	// logXFrom: levels spanning this ratio or more get a log2 axis.
	logXFrom = 8.0
	// objectiveHeadroom keeps an objective's line below the top.
	objectiveHeadroom = 1.15
)

// chart is one SVG chart: a y quantity against concurrency.
type chart struct {
	ID, Title, Note string
	W, H            float64
	Left, Right     float64
	Top, Bottom     float64
	// Where the tick labels and the axis labels go.
	TickLeft, TickBottom      float64
	XLabelX, XLabelY, YLabelY float64
	XTicks, YTicks            []tick
	XLabel, YLabel            string
	Lines                     []chartLine
	Rules                     []chartRule // the objective (horizontal), the capacities (vertical)
	Legend                    []legendItem
}

// tick is an axis mark: its position on the axis, and its label.
type tick struct {
	At    float64
	Label string
}

// chartLine is a series: its polyline and a dot per level.
type chartLine struct {
	Class, Name string
	Points      string
	Dots        []dot
}

// dot is a level's point; Missed marks a level that missed the
// objectives, Title is its tooltip.
type dot struct {
	X, Y   float64
	Missed bool
	Title  string
}

// chartRule is a line across the plot, labelled: Vertical at X, else
// horizontal at Y.
type chartRule struct {
	Class, Label   string
	Vertical       bool
	X, Y           float64
	LabelX, LabelY float64
	Anchor         string
}

type legendItem struct {
	Class, Name string
	X           float64
}

// xAxis places concurrency levels: on a log2 scale when they span a
// ratio of logXFrom or more, else linearly.
type xAxis struct {
	log      bool
	min, max float64
}

func newXAxis(levels []int) xAxis {
	a := xAxis{min: float64(levels[0]), max: float64(levels[len(levels)-1])}
	a.log = a.max/a.min >= logXFrom
	return a
}

func (a xAxis) at(v float64) float64 {
	if a.max == a.min {
		return (plotLeft + plotRight) / 2
	}
	const pad = 16 // keep the first and last dots off the axes
	f := (v - a.min) / (a.max - a.min)
	if a.log {
		f = math.Log2(v/a.min) / math.Log2(a.max/a.min)
	}
	return plotLeft + pad + f*(plotRight-plotLeft-2*pad)
}

// ticks marks every level, thinned to at most maxXTicks.
func (a xAxis) ticks(levels []int) []tick {
	step := (len(levels) + maxXTicks - 1) / maxXTicks
	var out []tick
	for i := 0; i < len(levels); i += step {
		out = append(out, tick{At: a.at(float64(levels[i])), Label: strconv.Itoa(levels[i])})
	}
	return out
}

// yAxis is linear from 0 to a round top.
type yAxis struct{ top, step float64 }

// newYAxis fits the largest value v in about yTicksWanted round steps.
func newYAxis(v float64) yAxis {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		v = 1
	}
	raw := v / yTicksWanted
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag * 10
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return yAxis{top: step * math.Ceil(v/step), step: step}
}

func (a yAxis) at(v float64) float64 {
	return plotBottom - v/a.top*(plotBottom-plotTop)
}

func (a yAxis) ticks(format func(float64) string) []tick {
	var out []tick
	for v := 0.0; v <= a.top*(1+1e-9); v += a.step {
		out = append(out, tick{At: a.at(v), Label: format(v)})
	}
	return out
}

// series is one line's values, one per level (NaN: none at that level).
// Missed marks the levels whose value missed its objective (nil: the
// series is not judged).
type series struct {
	Class, Name string
	Values      []float64
	Missed      []bool
}

// chartSpec is what a chart shows.
type chartSpec struct {
	ID, Title, Note, YLabel string
	Series                  []series
	Format                  func(float64) string // a y value as its ticks and tooltips show it
	Objective               float64              // drawn when > 0
	ObjectiveLabel          string
}

// drawChart lays out spec over the levels; capacities are the vertical
// marks (the sweep's, itlproxy's).
func drawChart(spec chartSpec, levels []int, capacities []chartMark) chart {
	x := newXAxis(levels)
	top := spec.Objective * objectiveHeadroom
	for _, s := range spec.Series {
		for _, v := range s.Values {
			if !math.IsNaN(v) {
				top = max(top, v)
			}
		}
	}
	y := newYAxis(top)
	c := chart{ID: spec.ID, Title: spec.Title, Note: spec.Note, W: chartW, H: chartH,
		Left: plotLeft, Right: plotRight, Top: plotTop, Bottom: plotBottom,
		TickLeft: plotLeft - 6, TickBottom: plotBottom + 5,
		XLabelX: (plotLeft + plotRight) / 2, XLabelY: chartH - 8, YLabelY: (plotTop + plotBottom) / 2,
		XTicks: x.ticks(levels), YTicks: y.ticks(spec.Format), XLabel: "concurrent streams", YLabel: spec.YLabel}
	legendX := plotLeft
	for _, s := range spec.Series {
		line := chartLine{Class: s.Class, Name: s.Name}
		var pts []string
		for i, v := range s.Values {
			if math.IsNaN(v) {
				continue
			}
			px, py := x.at(float64(levels[i])), y.at(v)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
			line.Dots = append(line.Dots, dot{X: px, Y: py, Missed: s.Missed != nil && s.Missed[i],
				Title: fmt.Sprintf("%s: %s %s", streams(levels[i]), s.Name, spec.Format(v))})
		}
		line.Points = strings.Join(pts, " ")
		c.Lines = append(c.Lines, line)
		c.Legend = append(c.Legend, legendItem{Class: s.Class, Name: s.Name, X: legendX})
		legendX += 14 + 7*float64(len(s.Name)) + 18
	}
	if spec.Objective > 0 {
		py := y.at(spec.Objective)
		c.Rules = append(c.Rules, chartRule{Class: "objective", Label: spec.ObjectiveLabel,
			Y: py, LabelX: plotRight - 4, LabelY: py - 5, Anchor: "end"})
	}
	for i, m := range capacities {
		if float64(m.Streams) < x.min || float64(m.Streams) > x.max {
			continue
		}
		px := x.at(float64(m.Streams))
		anchor, lx := "start", px+4
		if px > (plotLeft+plotRight)/2 {
			anchor, lx = "end", px-4
		}
		c.Rules = append(c.Rules, chartRule{Class: m.Class, Label: m.Label, Vertical: true,
			X: px, LabelX: lx, LabelY: plotTop + 12 + 13*float64(i), Anchor: anchor})
	}
	return c
}

// chartMark is a vertical mark at a number of streams.
type chartMark struct {
	Class, Label string
	Streams      int
}

// fmtMillis formats seconds as milliseconds (or seconds from 10 s up),
// short enough for an axis.
func fmtMillis(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 10:
		return strconv.FormatFloat(v, 'g', 4, 64) + " s"
	}
	return strconv.FormatFloat(v*1e3, 'g', 4, 64) + " ms"
}

// fmtRate formats tokens per second.
func fmtRate(v float64) string {
	if v >= 10000 {
		return strconv.FormatFloat(v/1000, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// fmtPercent formats a ratio as a percentage.
func fmtPercent(v float64) string {
	return strconv.FormatFloat(100*v, 'g', 4, 64) + "%"
}
