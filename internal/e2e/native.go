package e2e

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// ollamaChat streams Ollama's /api/chat (newline-delimited JSON): a line
// per token, then the done line with the usage and the engine's own
// timing, which is the decode's gaps as the upstream drew them.
func (m Model) ollamaChat(w http.ResponseWriter, r *http.Request, model string, turn int) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	rc := http.NewResponseController(w)
	send := func(line string) bool {
		_, err := io.WriteString(w, line+"\n")
		return err == nil && rc.Flush() == nil
	}
	wait, decode := m.TTFT, time.Duration(0)
	for i := range m.Tokens {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(wait):
		}
		if i > 0 {
			decode += wait
		}
		wait = m.Gap(turn)
		if !send(fmt.Sprintf(`{"model":%q,"created_at":"2026-11-22T13:20:34Z","message":{"role":"assistant","content":"t%d"},"done":false}`, model, i)) {
			return
		}
	}
	send(fmt.Sprintf(`{"model":%q,"created_at":"2026-11-22T13:20:35Z","message":{"role":"assistant","content":""},"done":true,`+
		`"done_reason":"length","total_duration":%d,"load_duration":0,"prompt_eval_count":9,"prompt_eval_duration":%d,`+
		`"eval_count":%d,"eval_duration":%d}`, model, m.TTFT+decode, m.TTFT, m.Tokens, decode))
}
