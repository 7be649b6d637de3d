package admin

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics/scrape"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// The live page at / on the admin listener: per model, streams in flight,
// rates, TTFT and ITL quantiles over the last minute and five (history.go),
// goodput where objectives judge streams, each upstream endpoint's when the
// proxy balances (upstreams.go), and the slowest recent streams from the
// recorder, each naming its endpoint, each gap timeline drawn as inline
// SVG. Rendered on
// the server from a Go template: no script, no external asset; the page
// reloads itself with a meta refresh.

//go:embed livepage.html
var livePageHTML string

var livePageTemplate = template.Must(template.New("live").Parse(livePageHTML))

const (
	// pageRefresh is how often the page reloads itself.
	pageRefresh = 5 * time.Second
	// pageSlowest is how many of the slowest streams the page draws.
	pageSlowest = 10
	// barsHigh is the height of a timeline's drawing in its own units:
	// the longest gap's bar is that tall. Bars are a unit wide, one per
	// gap, and the drawing is stretched to its box.
	barsHigh = 100
)

// pageModel is one model's row.
type pageModel struct {
	Name     string
	InFlight float64
	Windows  []pageWindow // the last minute, the last five
}

// pageWindow is one window's figures, formatted.
type pageWindow struct {
	Label                            string
	Requests, Tokens                 string
	TTFTP50, TTFTP99, ITLP50, ITLP99 string
	Attainment, Goodput              string // "" when no stream was judged
}

// pageStream is one of the slowest streams, drawn.
type pageStream struct {
	Entry   *recorder.Entry
	Link    string
	TTFT    string
	Longest string
	// WriteWait is the stream's client write wait.
	WriteWait string
	Bars      []pageBar
	Stalls    []pageStall // the stream's stalls, with their causes
	Rest      string
	Width     int // the drawing's width: one unit per bar
}

// pageBar is one gap's bar, in the drawing's units. Most gaps are bare
// rectangles, so that a page of full timelines stays small; a breach has
// a class, and a stall its index, its cause and a tooltip too.
type pageBar struct {
	X, Y, H int
	Index   int
	Length  string
	Class   string // "", "breach" (over the model's ITL objective) or "stall"
	Cause   string // a stall's, as recorded ("" past the recorded ones)
}

// pageStall is one of a stream's stalls: its gap's index (from 1), its
// cause, and the request whose prefill it was, with the address of its
// JSON.
type pageStall struct {
	Index                       int
	Cause, Prefill, PrefillLink string
}

type pageData struct {
	Now     string
	Refresh int
	Models  []pageModel
	Slowest []pageStream
	// SlowestTTFT are the slowest to their first token, not drawn;
	// TTFTUpstreams when any of them names its upstream endpoint.
	SlowestTTFT   []pageStream
	TTFTUpstreams bool
	Stall         string
	Recording     string
	// Upstreams is each model on each upstream endpoint, when the proxy
	// balances (upstreams.go).
	Upstreams pageUpstreams
}

// livePage answers GET /.
func (s *Server) livePage(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if err := livePageTemplate.Execute(&buf, s.pageData(time.Now())); err != nil {
		s.o.Log.Warn("live page", zap.Error(err))
		http.Error(w, "the page failed to render", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

func (s *Server) pageData(now time.Time) pageData {
	o := s.o.Recorder.Options()
	d := pageData{
		Now:     now.UTC().Format(time.RFC3339),
		Refresh: int(pageRefresh.Seconds()),
		Stall:   "none",
		Recording: fmt.Sprintf("the last %d streams and the %d slowest by longest gap and by TTFT over the last %s, %d gaps each",
			o.Last, o.Slowest, o.Window, o.MaxGaps),
	}
	if s.o.StallThreshold > 0 {
		d.Stall = s.o.StallThreshold.String()
	}
	if cur, err := takeSample(s.o.Registry, now); err == nil {
		d.Models = s.pageModels(now, cur)
		d.Upstreams = s.upstreamTable(now, cur)
	}
	for _, e := range s.o.Recorder.Slowest(recorder.ByLongestGap, pageSlowest) {
		d.Slowest = append(d.Slowest, s.drawStream(e))
	}
	for _, e := range s.o.Recorder.Slowest(recorder.ByTTFT, pageSlowest) {
		d.SlowestTTFT = append(d.SlowestTTFT, pageStream{Entry: e, Link: streamLink(e), TTFT: e.TTFT.Round(time.Millisecond).String()})
		d.TTFTUpstreams = d.TTFTUpstreams || e.Upstream != ""
	}
	return d
}

// pageModels returns each model's row, by name, from cur, the registry
// now.
func (s *Server) pageModels(now time.Time, cur sample) []pageModel {
	var out []pageModel
	for name, m := range cur.models {
		row := pageModel{Name: name, InFlight: m.inFlight}
		for _, w := range []struct {
			label string
			d     time.Duration
		}{{"1m", time.Minute}, {"5m", 5 * time.Minute}} {
			pw := pageWindow{Label: w.label, Requests: "-", Tokens: "-", TTFTP50: "-", TTFTP99: "-", ITLP50: "-", ITLP99: "-"}
			if then, ok := s.history.since(now, w.d); ok {
				pw = formatWindow(w.label, w.d, windowOf(then.models[name], m, now.Sub(then.at)))
			}
			row.Windows = append(row.Windows, pw)
		}
		out = append(out, row)
	}
	slices.SortFunc(out, func(a, b pageModel) int { return cmpString(a.Name, b.Name) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// formatWindow formats w, a window of length full, or shorter when the
// proxy has not been up that long.
func formatWindow(label string, full time.Duration, w window) pageWindow {
	if w.span < full-historyEvery {
		label += " (" + w.span.Round(time.Second).String() + " so far)"
	}
	pw := pageWindow{
		Label:    label,
		Requests: fmt.Sprintf("%.2f/s", w.requestRate),
		Tokens:   fmt.Sprintf("%.1f/s", w.tokenRate),
		TTFTP50:  scrape.Seconds(w.ttftP50), TTFTP99: scrape.Seconds(w.ttftP99),
		ITLP50: scrape.Seconds(w.itlP50), ITLP99: scrape.Seconds(w.itlP99),
	}
	if w.judged > 0 {
		pw.Attainment = fmt.Sprintf("%.1f%% of %.0f", 100*w.attainment, w.judged)
		pw.Goodput = fmt.Sprintf("%.1f tokens/s", w.good)
	}
	return pw
}

// streamLink is the address of e's JSON.
func streamLink(e *recorder.Entry) string { return "/debug/streams/" + url.PathEscape(e.RequestID) }

// drawStream draws e's timeline: a bar per recorded gap, as tall as the
// gap is long next to the longest, stalls and objective breaches marked.
func (s *Server) drawStream(e *recorder.Entry) pageStream {
	ps := pageStream{
		Entry:   e,
		Link:    streamLink(e),
		TTFT:    "-",
		Longest: e.LongestGap.Round(100 * time.Microsecond).String(),

		WriteWait: e.ClientWriteWait.Round(100 * time.Microsecond).String(),
	}
	if e.TTFT >= 0 {
		ps.TTFT = e.TTFT.Round(time.Millisecond).String()
	}
	if e.Rest.Gaps > 0 {
		ps.Rest = fmt.Sprintf("and %d more gaps, %s in all, the longest %s", e.Rest.Gaps,
			e.Rest.Total.Round(time.Millisecond), e.Rest.Longest.Round(time.Millisecond))
	}
	// The objective the stream was judged by: a reload since changes
	// what later streams are judged by, not what this one was.
	objective := e.ITLObjective
	longest := max(e.LongestGap, time.Millisecond)
	ps.Width = max(len(e.Timeline), 1)
	causes := make(map[int]recorder.Stall, len(e.Stalls))
	for _, st := range e.Stalls {
		causes[st.Gap] = st
		p := pageStall{Index: st.Gap, Cause: st.Cause, Prefill: st.Prefill}
		if p.Prefill != "" {
			p.PrefillLink = "/debug/streams/" + url.PathEscape(p.Prefill)
		}
		ps.Stalls = append(ps.Stalls, p)
	}
	for i, g := range e.Timeline {
		h := max(1, int(math.Round(barsHigh*float64(g.Length)/float64(longest))))
		bar := pageBar{X: i, Y: barsHigh - h, H: h, Index: i + 1, Length: g.Length.Round(100 * time.Microsecond).String()}
		st, recorded := causes[i+1]
		switch {
		case recorded || s.o.StallThreshold > 0 && g.Length > s.o.StallThreshold:
			bar.Class, bar.Cause = "stall", st.Cause
			if !recorded {
				ps.Stalls = append(ps.Stalls, pageStall{Index: i + 1})
			}
		case objective > 0 && g.Length > objective:
			bar.Class = "breach"
		}
		ps.Bars = append(ps.Bars, bar)
	}
	slices.SortFunc(ps.Stalls, func(a, b pageStall) int { return a.Index - b.Index })
	return ps
}
