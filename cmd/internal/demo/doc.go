// Package demo is what `itlproxy demo` adds to the proxy it runs in front
// of a simulated upstream (package llmsim): the simulated models and the
// objectives that judge them, a model served by a batch-stepping engine
// whose streams stall for other requests' long prompts and for its own
// pauses (batch.go), simulated clients (mostly streams, some non-streamed
// requests, a few abandoned half-way, and the batch model's long prompts),
// and the table of the proxy's own /metrics printed every few seconds.
package demo
