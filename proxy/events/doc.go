// Package events reads the response streams and request bodies of the LLM
// APIs itlproxy measures: OpenAI's chat completions and completions, its
// Responses API, Anthropic's Messages API, and the servers' native APIs
// (Ollama's newline-delimited JSON, TGI's, llama.cpp server's and
// SGLang's event streams: native.go, native_generate.go, whose doc
// comments give each API's token rule, end marker, usage and engine
// timing). It owns the definitions the
// measurement rests on, so that itlproxy and itlbench (which imports this
// package, and not the proxy) count exactly the same things at the two
// ends of a comparison.
//
// # Data flow
//
// The caller feeds the bytes of each read of a response body, as they
// pass, to a Scanner, with the Stamp of that read (its time, and the
// load the caller counts then). The scanner's SSE (or NDJSON) splitter cuts them into server-sent events as the HTML standard's
// event-stream rules define them ("\r\n", "\n" or "\r" line ends, comment
// lines, multi-line data joined with '\n', a blank line dispatching the
// event), however the reads cut them; each event is classified by the
// reader of its Endpoint into an Event, and handed to the caller with
// the Stamp of the Write that completed it: the caller owns the clock, and
// every event a Write completes arrived at that Write's stamp. A whole non-streamed body goes to ParseJSON instead.
// The bytes themselves are never changed: the scanner only watches them.
//
// # Definitions
//
// An event is one dispatched server-sent event (data lines ended by a
// blank line); a comment or an event without data is none. An event is
// token-bearing when it carries output:
//   - chat completions and completions: a choices[].delta with non-empty
//     content, reasoning_content, reasoning, refusal, or tool-call name or
//     arguments, or a non-empty choices[].text. Role-only and usage-only
//     chunks are not;
//   - the Responses API: a response.*.delta event with a non-empty delta;
//   - the Messages API: a content_block_delta whose delta has non-empty
//     text, partial_json or thinking (not a signature).
//
// The end markers: data [DONE] (chat completions and completions),
// response.completed, response.failed and response.incomplete (Responses),
// message_stop (Messages). Failures: an "error" event type, an "error"
// member, vLLM's {"object": "error"}, response.failed.
//
// Usage (token counts) comes from a "usage" object: prompt_tokens and
// completion_tokens (OpenAI's chat and completions), input_tokens and
// output_tokens (Responses, Messages; the OpenAI names win when an object
// has both). The input count is every prompt token the model attended to,
// cached or not: prompt_tokens and the Responses API's input_tokens count
// cached tokens already; Anthropic's input_tokens does not, so its
// cache_read_input_tokens and cache_creation_input_tokens are added to
// it. The Responses API reports usage in response.completed's
// response.usage; Anthropic reports input tokens in message_start's
// message.usage and output tokens in message_delta's usage. Counts arrive
// cumulatively, and the latest of each counts; a value that is not a
// non-negative integer of at most 15 digits is no count.
//
// Time per output token, TPOT = (last - first) / (N - 1), from the stamps
// of a stream's first and last token-bearing events, with N the reported
// output tokens, else the number of token-bearing events, and only when
// N >= 2. A Tally keeps these per-stream counts and does this arithmetic
// for whoever reads a stream: the proxy's meter and itlbench alike.
//
// # Bounds and cost
//
// Memory per stream is bounded: the splitter holds at most the given
// number of bytes of one event (a longer one is reported as Oversized,
// unread), and so does the UsageStripper. The JSON readers walk each event
// once, without encoding/json and without allocating; a differential fuzz
// test holds them to encoding/json. Splitting, classifying and counting an
// event allocates nothing, so that the per-event cost the proxy adds stays
// flat however many events pass.
//
// # Usage injection
//
// Servers report a stream's usage only when the request asks for it.
// WithUsageRequested asks on a client's behalf, and UsageStripper takes
// out of the response what asking added, so that the client gets the bytes
// it would have got otherwise. InspectRequest reads a request body's
// model, stream flag and user.
package events
