package admin

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/itlproxy/itlproxy/internal/testenv"
	"github.com/itlproxy/itlproxy/metrics"
	"github.com/itlproxy/itlproxy/proxy/recorder"
)

// TestLivePageBudget renders the page with the recorder full (1,000
// streams, each slowest one with a full timeline) and the registry holding
// many models: the page stays within its size and render-time budget.
// The render time is the best of three, so that a busy machine's pauses
// fall outside it; about 30 ms here, on two shared cores.
func TestLivePageBudget(t *testing.T) {
	const (
		maxBytes  = 256 << 10
		maxRender = 100 * time.Millisecond * testenv.RaceSlowdown
	)
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg, metrics.Options{MaxModels: 32})
	if err != nil {
		t.Fatal(err)
	}
	// The recorder as itlproxy's defaults make it.
	s := New(Options{Registry: reg, StallThreshold: 2 * time.Second, Log: zap.NewNop(),
		Recorder: recorder.New(recorder.Options{Last: 1000, Slowest: 100, Window: 15 * time.Minute, MaxGaps: 256})})
	now := time.Now()
	for i := range 1000 {
		model := fmt.Sprintf("model-%02d", i%32)
		l := rec.RequestLabels(model, "chat_completions", "", "")
		st := rec.StartStream(l, metrics.IDs{Request: fmt.Sprint(i)})
		tl := s.o.Recorder.Start()
		st.FirstToken(50 * time.Millisecond)
		for g := range 300 {
			d := time.Duration(5+g%7+i%50) * time.Millisecond
			st.Gap(d, 1)
			tl.Gap(d, 1)
		}
		st.End(metrics.StreamEnd{Outcome: metrics.OutcomeCompleted, TPOT: -1, OutputTokens: 301})
		rec.Request(l, true, 200, time.Second)
		gaps := st.Gaps()
		s.o.Recorder.Record(tl, recorder.Stream{RequestID: fmt.Sprintf("request-%04d", i), Model: model, Outcome: metrics.OutcomeCompleted,
			Start: now.Add(-time.Second), Duration: time.Second, TTFT: 50 * time.Millisecond, TPOT: -1, OutputTokens: 301,
			ITLObjective: st.Objectives().ITL, Gaps: gaps.Count, LongestGap: gaps.Longest, LongestGapAt: gaps.LongestAt})
		if i == 0 {
			s.history.add(now.Add(-time.Minute))
		}
	}
	var w *httptest.ResponseRecorder
	took := time.Hour
	for range 3 {
		start := time.Now()
		w = httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		took = min(took, time.Since(start))
	}
	body, _ := io.ReadAll(w.Result().Body)
	t.Logf("%d bytes in %v", len(body), took)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, body)
	}
	if len(body) > maxBytes {
		t.Errorf("%d bytes, over the budget of %d", len(body), maxBytes)
	}
	if took > maxRender {
		t.Errorf("rendered in %v, over the budget of %v", took, maxRender)
	}
	if got := strings.Count(string(body), `class="stream"`); got != pageSlowest {
		t.Errorf("%d streams drawn, want %d", got, pageSlowest)
	}
	if got := strings.Count(string(body), `class="model"`); got != 2*32 {
		t.Errorf("%d model rows, want 2 for each of 32 models", got)
	}
}
