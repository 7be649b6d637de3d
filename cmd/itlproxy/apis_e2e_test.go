package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/itlproxy/itlproxy/metrics/scrape"
)

// recordedStreams waits until the proxy has recorded n streams and
// returns a scrape taken after that.
func recordedStreams(t *testing.T, in *instance, n int) scrape.Families {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d streams to be recorded", n), 5*time.Second, func() bool {
		return in.scrape().Value("itlproxy_streams_total") == float64(n)
	})
	// A stream is counted as ended after all else its end records, but one
	// scrape is no snapshot: the registry collects its families
	// concurrently, and may have read the others before the stream's end.
	// A scrape begun after this one has seen it counted sees all of it.
	return in.scrape()
}

// clockedOpenAIClient returns an official OpenAI client talking to the
// proxy through the client-side clock, and the streams of models m0..mN-1
// that clock stamps.
func clockedOpenAIClient(in *instance, streams int) (openai.Client, []clientStream) {
	clock := &arrivalClock{streams: map[string]*clientStream{}}
	results := modelStreams(streams)
	for i := range results {
		clock.streams[results[i].model] = &results[i]
	}
	client := openai.NewClient(option.WithBaseURL("http://"+in.proxy+"/v1/"), option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: clock}))
	return client, results
}

// scheduledProxy starts itlproxy in front of an upstream that answers
// each model "mN" with tokens token events on its own randomSchedule; both
// stop when the test ends.
func scheduledProxy(t *testing.T, tokens int) *instance {
	t.Helper()
	up := httptest.NewServer(scheduledUpstream{schedule: randomSchedule(tokens)})
	t.Cleanup(up.Close)
	return start(t, nil, map[string]string{"ITLPROXY_UPSTREAM_URL": up.URL})
}

// modelStreams returns n streams to fill, of models m0..m(n-1).
func modelStreams(n int) []clientStream {
	results := make([]clientStream, n)
	for i := range results {
		results[i].model = fmt.Sprintf("m%d", i)
	}
	return results
}

// staggered runs each stream after a warm-up stream (so that one-time
// costs of the process's first connection fall outside the comparison),
// starting them 40 ms apart: they overlap, as real users' do, without all
// starting in the same instant.
func staggered(results []clientStream, run func(*clientStream)) {
	run(&clientStream{model: "warmup"})
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 40 * time.Millisecond)
			run(&results[i])
		})
	}
	wg.Wait()
}

// TestResponsesAPIAgainstClientClock drives the Responses API through the
// proxy with the official OpenAI client: counts exact, TTFT and ITL sums
// as clockAgreement says, tokens from
// response.completed's usage.
func TestResponsesAPIAgainstClientClock(t *testing.T) {
	const streams, tokens = 6, 30
	agreeOnClock(t, func(agree *clockAgreement) {
		in := scheduledProxy(t, tokens)
		client, results := clockedOpenAIClient(in, streams)
		run := func(cs *clientStream) {
			stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
				Model: cs.model,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("count to thirty")},
			})
			for stream.Next() {
				ev := stream.Current()
				if ev.Type == "response.output_text.delta" {
					cs.content += ev.Delta
				}
				if ev.Type == "response.completed" {
					cs.totalTokens = ev.Response.Usage.OutputTokens
				}
			}
			cs.err = stream.Err()
		}
		staggered(results, run)
		fs := recordedStreams(t, in, streams+1)
		for _, cs := range results {
			if cs.err != nil || strings.Count(cs.content, "w") != tokens || cs.totalTokens != tokens || len(cs.arrivals) != tokens {
				t.Errorf("%s: client got %q (%v), usage %d, %d stamped", cs.model, cs.content, cs.err, cs.totalTokens, len(cs.arrivals))
				continue
			}
			agree.stream(t, fs, cs, "responses", tokens)
		}
	})
}

// TestMessagesAgainstClientClock reads Anthropic-format streams through the
// proxy with a plain SSE client that times each event itself.
func TestMessagesAgainstClientClock(t *testing.T) {
	const streams, tokens = 6, 30
	agreeOnClock(t, func(agree *clockAgreement) {
		in := scheduledProxy(t, tokens)
		results := modelStreams(streams)
		staggered(results, func(cs *clientStream) { readMessages(in, cs) })
		fs := recordedStreams(t, in, streams+1)
		for _, cs := range results {
			if cs.err != nil || len(cs.arrivals) != tokens || cs.totalTokens != tokens {
				t.Errorf("%s: %d events (%v), message_stop seen: %v", cs.model, len(cs.arrivals), cs.err, cs.totalTokens == tokens)
				continue
			}
			agree.stream(t, fs, cs, "messages", tokens)
			if in := fs.Value("itlproxy_input_tokens_total", "model", cs.model); in != 5 {
				t.Errorf("%s: input tokens %v, want 5 (from message_start)", cs.model, in)
			}
		}
	})
}

// readMessages reads an Anthropic-format stream of cs.model through the
// proxy with a plain SSE client that stamps each content_block_delta
// carrying a token as its blank line is read.
func readMessages(in *instance, cs *clientStream) {
	resp, err := postTimed(in, "/v1/messages",
		fmt.Sprintf(`{"model":%q,"max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, cs.model),
		cs, "Anthropic-Version", "2023-06-01")
	if err != nil {
		cs.err = err
		return
	}
	defer resp.Body.Close()
	// A plain SSE reader: lines; a blank line ends an event, stamped
	// when that line is read.
	sc := bufio.NewScanner(resp.Body)
	var name, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if name == "content_block_delta" && tokenEvent.MatchString(data) {
				cs.arrivals = append(cs.arrivals, time.Now())
				cs.content += data
			}
			if name == "message_stop" {
				cs.totalTokens = int64(len(cs.arrivals))
			}
			name, data = "", ""
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	cs.err = sc.Err()
}
