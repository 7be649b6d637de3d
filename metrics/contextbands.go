package metrics

import "math"

// contextBands: a stream's input tokens, as the upstream reported them.
// Decode reads the whole KV cache at every step, so the time per output
// token grows with the context: TPOT by band tells longer prompts from
// more load. Each band is four times the one before, from 1,024 tokens.
var contextBands = []band{
	{1<<10 - 1, "0-1k"},
	{1<<12 - 1, "1k-4k"},
	{1<<14 - 1, "4k-16k"},
	{1<<16 - 1, "16k-64k"},
	{1<<18 - 1, "64k-256k"},
	{math.MaxInt, "256k+"},
}

// contextUnknown is the context band of a stream whose upstream reported
// no input tokens.
const contextUnknown = "unknown"

// contextBand returns the band label of a stream with input tokens, -1
// when the upstream reported none.
func contextBand(input int64) string {
	if input < 0 {
		return contextUnknown
	}
	return contextBands[bandOf(contextBands, int(input))].label
}
