// Package metrics holds every Prometheus collector itlproxy exports and the
// recorder API the proxy reports to: the collectors, the bounds on every
// label value, the latency objectives, the sessions and the exemplars.
// Nothing here is global: [New] builds each collector and registers it on
// the registry it is given. Nothing here knows HTTP: the proxy decides what
// happened to a request, this package how it is counted.
//
// Each family's Help string (collectors.go, load.go, goodput.go,
// engine.go, reload.go) is one sentence: what it counts or observes, and
// where its clock starts and stops, in brief. The detail is in
// docs/metrics.md: what holds across families (t0 and the other clocks,
// labels, buckets), an index of the families generated from the registry,
// and a section per family, written by hand, with what its Help leaves out
// (the exact clocks, what each label value means, the bands, the usage
// fields each API's count reads). A test holds the Help strings to one
// sentence and the document to the registry. This comment says how the
// package works.
//
// # How data comes in
//
// For each request the proxy asks [Metrics.RequestLabels] for the bounded
// labels of the model its body names, its endpoint, and the service class
// and tenant its headers name. A stream is recorded on the [Stream] that
// [Metrics.StartStream] returns when the request (or, if it did not say,
// the upstream's event-stream headers) makes it a stream:
//
//   - [Stream.SetServer] with the record of the upstream server it is
//     sent to ([NewServer], one per server), and [Stream.Sent] when its
//     request has been written there;
//   - [Stream.FirstTokenAt], once, with the time from t0 to the first
//     token-bearing event and when it arrived ([Stream.FirstToken] takes
//     now);
//   - [Stream.GapInFlight] for each later token-bearing event, with the
//     time since the one before, the model's streams in flight when it
//     ended (read with [Stream.InFlight] when the read returned; [Stream.Gap]
//     reads it now) and when it ended, and [Stream.EventTokens] where the
//     upstream reports each event's own token count; [Stream.Gaps] sums the
//     gaps up (count, longest, where) for the span and the stream recorder;
//   - [Stream.ClientWrite] for each write of its bytes to its client, as
//     its start and end;
//   - [Stream.End], once, with the outcome, the TPOT, the output tokens and,
//     from the final usage, the tokens per event; the stream is then judged
//     for goodput.
//
// A gap over the stall threshold is a stall, counted by its cause once it
// is decided (stallcause.go, stallserver.go): the client's when the
// stream's writes to its client took most of it; a prefill when another
// stream of the same server, sent before it began, got its first token at
// its end; else the upstream's. [Stream.Stalls] lists them, with the
// request of each prefill.
//
// The per-event calls look no label up and allocate nothing: a stream
// resolves its series when it starts; a load band's series are made when
// the model's load first reaches it, and the band lookup is a bit length.
//
// Every histogram has native buckets (schema 3) and classic buckets shaped
// for LLM serving: fine for ITL and TTFT, coarse for the breakdowns by
// band and turn, the stream shapes and the engines' figures, which
// Options.NativeBreakdowns leaves with native buckets only
// (docs/series-budget.md counts the series).
//
// When any response ends, [Metrics.Tokens] adds its usage and
// [Metrics.Request] counts it with its status and duration;
// [Metrics.ParseFailure] counts, at any point, data the measurement could
// not read (the bytes were forwarded all the same).
//
// Each response of a Realtime API WebSocket (endpoint realtime) is a stream
// whose clock starts, in place of t0, when the client's response.create
// passed the proxy (or the upstream's response.created, for a response it
// began itself); its token-bearing events are its output deltas.
//
// # Bounded labels
//
// No label value comes from a client unbounded. The model label is the
// request's model if it is in Options.Models or, without that allow-list,
// among the first Options.MaxModels distinct names seen, else
// [ModelOther]; models with objectives of their own always keep their
// name; a name over 256 bytes or not UTF-8 is ModelOther, and a request
// that names none [ModelUnknown]. Tenants are bounded the same way
// (Options.Tenants, Options.MaxTenants, [TenantOther], [TenantNone]), and a
// value that looks like a credential is TenantOther. A class the SLOs do
// not define is [ClassDefault]. The endpoint label is the proxy's: one of
// the fixed values of package proxy/events (Endpoint.Label). Every other
// label takes its values from the constants here (Outcome, Parse, SLO and
// Verdict) or from fixed bands.
//
// # Objectives
//
// [SLOs] resolve each kind of objective most specific first ([SLOs.For]);
// [LoadSLOFile] reads them from a YAML file over defaults from the
// environment. Each objective, and Options.StallThreshold, is a bucket
// bound of its histograms, so that histogram_quantile and bucket ratios
// are exact at it. As each model label value appears, its objectives are
// exported in every class and its breach and observation counters start at
// 0. [Metrics.ReloadSLOs] puts new objectives in effect while serving: a
// stream keeps those it resolved at StartStream; bucket bounds stay those
// New was given. [Reloads] exports the outcome of every reload.
//
// # Load and sessions
//
// Each model label value keeps a count of its streams in flight through
// this proxy, up at StartStream, down at End; gaps and TTFTs are observed
// in the band of that count. A bounded tracker (Options.SessionMax
// sessions, the least recently seen dropped first; Options.SessionTTL)
// keeps each session's turn count and its baseline, from which a session's
// later streams are compared and counted degraded past
// Options.DegradeFactor. Per-stream medians and p99s come from a
// fixed-size log-linear sketch of the stream's gaps (sketch.go).
//
// # Exemplars
//
// The TTFT observation, a stream's first gap and each gap over 1.1 times
// the stream's longest before it carry the request's trace, request and
// session ids ([IDs]) as an exemplar, cut to fit OpenMetrics' 128 runes.
package metrics
