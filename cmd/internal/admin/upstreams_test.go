package admin

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// TestUpstreamTable: a proxy that balances nothing has no table of
// upstream endpoints; one that balances has a row per model and endpoint,
// by model and endpoint, with the streams that ended since the window's
// first sample and the quantiles of their TTFT and gaps alone; past
// pageUpstreamRows rows, the rest are counted, and the page stays within
// its size.
func TestUpstreamTable(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg, metrics.Options{MaxModels: 64})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Registry: reg, Log: zap.NewNop(), Recorder: recorder.New(recorder.Options{Last: 10, Slowest: 10, Window: time.Minute, MaxGaps: 16})})
	streamOn := func(model, upstream string, ttft, gap time.Duration) {
		st := rec.StartStream(rec.RequestLabels(model, "chat_completions", "", ""), metrics.IDs{})
		if upstream != "" {
			st.SetUpstream(upstream)
		}
		st.FirstToken(ttft)
		for range 4 {
			st.Gap(gap, 1)
		}
		st.End(metrics.StreamEnd{Outcome: metrics.OutcomeCompleted, TPOT: -1})
	}
	now := time.Now()
	streamOn("m", "", 10*time.Millisecond, time.Millisecond)
	s.history.add(now.Add(-6 * time.Minute)) // outside the window
	if d := s.pageData(now); len(d.Upstreams.Rows) != 0 || strings.Contains(page(t, s), `id="upstreams"`) {
		t.Fatalf("a table of upstream endpoints without balancing: %+v", d.Upstreams)
	}

	endpoints := []string{"10.0.0.2:8000", "10.0.0.1:8000", "10.0.0.3:8000"}
	rec.UpstreamsChanged(endpoints, nil)
	// Before the window: slow streams on every endpoint, which the
	// window's quantiles must leave out.
	for _, e := range endpoints {
		streamOn("m", e, 2*time.Second, time.Second)
	}
	s.history.add(now.Add(-time.Minute))
	for i, e := range endpoints {
		for range i + 1 {
			streamOn("m", e, time.Duration(i+1)*20*time.Millisecond, time.Duration(i+1)*10*time.Millisecond)
		}
	}
	d := s.pageData(now)
	if !strings.HasPrefix(d.Upstreams.Window, "the last 5 minutes (1m0s so far)") {
		t.Errorf("window %q", d.Upstreams.Window)
	}
	want := []struct{ upstream, streams, ttftP99, itlP99 string }{
		// The per-endpoint ladders' buckets: 20 ms in (15, 22], 10 ms in
		// (6.8, 10], and so on.
		{"10.0.0.1:8000", "2", "46.9ms", "21.9ms"},
		{"10.0.0.2:8000", "1", "21.9ms", "10ms"},
		{"10.0.0.3:8000", "3", "67.8ms", "32.9ms"},
	}
	if len(d.Upstreams.Rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(d.Upstreams.Rows), len(want), d.Upstreams.Rows)
	}
	for i, w := range want {
		r := d.Upstreams.Rows[i]
		if r.Model != "m" || r.Upstream != w.upstream || r.Streams != w.streams || r.TTFTP99 != w.ttftP99 || r.ITLP99 != w.itlP99 {
			t.Errorf("row %d: %+v, want %+v", i, r, w)
		}
	}

	more := slices.Clone(endpoints)
	for i := range 5 {
		more = append(more, fmt.Sprintf("10.0.1.%d:8000", i))
	}
	rec.UpstreamsChanged(more, nil)
	for i := range 200 {
		streamOn(fmt.Sprintf("model-%02d", i%40), more[3+i/40], 20*time.Millisecond, 10*time.Millisecond)
	}
	d = s.pageData(now)
	if len(d.Upstreams.Rows) != pageUpstreamRows || d.Upstreams.More != 3+200-pageUpstreamRows {
		t.Errorf("%d rows and %d more, want %d and %d", len(d.Upstreams.Rows), d.Upstreams.More, pageUpstreamRows, 3+200-pageUpstreamRows)
	}
	body := page(t, s)
	if n := strings.Count(body, `<tr class="upstream"`); n != pageUpstreamRows {
		t.Errorf("%d rows on the page, want %d", n, pageUpstreamRows)
	}
	if !strings.Contains(body, fmt.Sprintf("And %d more", d.Upstreams.More)) {
		t.Error("the page does not say how many rows it leaves out")
	}
	if len(body) > 64<<10 {
		t.Errorf("the page is %d bytes with a full table of upstream endpoints", len(body))
	}
}

// page renders the live page.
func page(t *testing.T, s *Server) string {
	t.Helper()
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	body, _ := io.ReadAll(w.Result().Body)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, body)
	}
	return string(body)
}
