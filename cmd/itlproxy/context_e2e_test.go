package main

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// contextBandCase is a group of streams whose upstream reports the same
// input usage, and decodes at the same speed: slower, the longer the
// context, as a real server does.
type contextBandCase struct {
	band    string
	prompt  prompt
	gap     time.Duration
	streams int
}

// TestTPOTByContextAgainstClientClock streams chat completions with input
// usage in three context bands and one stream without usage through the
// proxy to the official OpenAI client, and an Anthropic Messages stream
// whose prompt is mostly in the prompt cache to a plain SSE client. Each
// band must count exactly its streams, with a sum of TPOTs within 2% of
// the clients' own, the stream without usage in "unknown", the Messages
// stream in the band of its input plus cache tokens (not of its
// input_tokens alone), and every TPOT observation in exactly one band.
func TestTPOTByContextAgainstClientClock(t *testing.T) {
	const tokens = 30
	chat := []contextBandCase{
		{"0-1k", prompt{tokens: 300}, 15 * ms, 3},
		{"1k-4k", prompt{tokens: 2500}, 20 * ms, 2},
		{"16k-64k", prompt{tokens: 30000}, 30 * ms, 2},
		{"unknown", prompt{none: true}, 15 * ms, 1},
	}
	// 40 input tokens alone would be 0-1k: the 4,100 cached ones make it
	// 4k-16k.
	messages := contextBandCase{"4k-16k", prompt{tokens: 40, cacheRead: 3000, cacheWrite: 1100}, 25 * ms, 1}
	const messagesModel = "claude"

	byModel := map[string]contextBandCase{messagesModel: messages}
	var models []string
	for _, c := range chat {
		for range c.streams {
			model := fmt.Sprintf("m%d", len(models))
			models = append(models, model)
			byModel[model] = c
		}
	}
	up := httptest.NewServer(scheduledUpstream{
		schedule: func(model string) (time.Duration, []time.Duration) {
			c, ok := byModel[model]
			if !ok { // the warm-up: one token, so no TPOT
				return 30 * ms, nil
			}
			gaps := make([]time.Duration, tokens-1)
			for i := range gaps {
				gaps[i] = c.gap
			}
			return 30 * ms, gaps
		},
		prompt: func(model string) prompt {
			if c, ok := byModel[model]; ok {
				return c.prompt
			}
			return prompt{tokens: 5}
		},
	})
	defer up.Close()
	in := start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL})

	client, results := clockedOpenAIClient(in, len(models))
	anthropic := clientStream{model: messagesModel}
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(50 * ms) // after the warm-up
		readMessages(in, &anthropic)
	})
	staggered(results, func(cs *clientStream) {
		params := openai.ChatCompletionNewParams{
			Model:    cs.model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("summarize the attached contract")},
		}
		if c, ok := byModel[cs.model]; !ok || !c.prompt.none {
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		stream := client.Chat.Completions.NewStreaming(context.Background(), params)
		for stream.Next() {
			if u := stream.Current().Usage; u.CompletionTokens > 0 {
				cs.totalTokens = u.CompletionTokens
			}
		}
		cs.err = stream.Err()
	})
	wg.Wait()
	fs := recordedStreams(t, in, len(models)+2) // and the warm-up and the Messages stream

	clientTPOT := func(cs clientStream) float64 {
		return cs.arrivals[len(cs.arrivals)-1].Sub(cs.arrivals[0]).Seconds() / float64(len(cs.arrivals)-1)
	}
	check := func(endpoint string, c contextBandCase, streams []clientStream) {
		t.Helper()
		var want float64
		for _, cs := range streams {
			reported := cs.totalTokens == tokens || c.prompt.none && cs.totalTokens == 0
			if cs.err != nil || len(cs.arrivals) != tokens || !reported {
				t.Errorf("%s: %d token events, usage %d (%v)", cs.model, len(cs.arrivals), cs.totalTokens, cs.err)
				return
			}
			want += clientTPOT(cs)
		}
		n, sum := fs.Histogram("itlproxy_time_per_output_token_by_context_seconds", "endpoint", endpoint, "context", c.band)
		t.Logf("%s %s: %d streams, TPOT sum proxy %.3fms, client %.3fms", endpoint, c.band, n, sum*1000, want*1000)
		if n != uint64(len(streams)) {
			t.Errorf("%s context %s: %d TPOT observations, want %d", endpoint, c.band, n, len(streams))
		}
		if math.Abs(sum-want) > 0.02*want {
			t.Errorf("%s context %s: TPOT sum %.3fms, the clients' %.3fms: want within 2%%", endpoint, c.band, sum*1000, want*1000)
		}
	}
	first := 0
	for _, c := range chat {
		check("chat_completions", c, results[first:first+c.streams])
		first += c.streams
	}
	check("messages", messages, []clientStream{anthropic})
	if got, want := fs.Value("itlproxy_input_tokens_total", "endpoint", "messages"), float64(40+3000+1100); got != want {
		t.Errorf("Messages input tokens %v, want %v: input_tokens with the cache's", got, want)
	}
	banded, _ := fs.Histogram("itlproxy_time_per_output_token_by_context_seconds")
	all, _ := fs.Histogram("itlproxy_time_per_output_token_seconds")
	if banded != all || all != uint64(len(models)+1) {
		t.Errorf("%d TPOT observations banded by context, %d in all: want every one of the %d streams once", banded, all, len(models)+1)
	}
}
