// Package llmsim is a simulated OpenAI-compatible LLM server: chat
// completions and completions, streamed or not, with a time to first token
// and gaps between tokens drawn from each model's profile (jitter and
// occasional stalls included, and gaps that lengthen with the requests in
// flight by a known law: load.go). It stands in for vLLM in itlproxy's demo
// mode and load runs; it generates filler words, not language.
package llmsim
