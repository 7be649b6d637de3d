// Package metrics holds every Prometheus collector itlproxy exports and the
// recorder API the proxy reports to: the metric contract (each family, its
// labels, where its clock starts and stops), the bounds on every label
// value, the latency objectives, the sessions and the exemplars. Nothing
// here is global: [New] builds each collector and registers it on the
// registry it is given. Nothing here knows HTTP: the proxy decides what
// happened to a request, this package how it is counted.
//
// # How data comes in
//
// For each request the proxy asks [Metrics.RequestLabels] for the bounded
// labels of the model its body names, its endpoint, and the service class
// and tenant its headers name. A stream is recorded on the
// [Stream] that [Metrics.StartStream] returns when the request (or, if it
// did not say, the upstream's event-stream headers) makes it a stream:
//
//   - [Stream.FirstToken], once, with the time from t0 to the first
//     token-bearing event;
//   - [Stream.Gap] for each later token-bearing event, with the time since
//     the one before, and [Stream.EventTokens] where the upstream reports
//     each event's own token count;
//   - [Stream.End], once, with the outcome, the TPOT, the output tokens and,
//     from the final usage, the tokens per event; the stream is then judged
//     for goodput.
//
// The per-event calls look no label up and allocate nothing: a stream
// resolves its series when it starts. When any response ends,
// [Metrics.Tokens] adds its usage and [Metrics.Request] counts it with its
// status and duration; [Metrics.ParseFailure] counts, at any point, data
// the measurement could not read (the bytes were forwarded all the same).
//
// # Where each clock starts and stops
//
// t0 is the proxy receiving the request headers; an event is stamped when
// it has been read whole from the upstream. Each response of a Realtime
// API WebSocket (endpoint realtime) is a stream whose clock starts, in
// place of t0, when the client's response.create passed the proxy (or the
// upstream's response.created, for a response it began itself); its
// token-bearing events are its output deltas. Every histogram has classic
// buckets shaped for LLM serving and native buckets (schema 3) together.
// The families, all under the itlproxy_ namespace:
//
//   - time_to_first_token_seconds {model, endpoint}: t0 to the first
//     token-bearing event; once per stream that produced a token.
//   - inter_token_latency_seconds {model, endpoint}: each gap between
//     consecutive token-bearing events of a stream; events that arrive in
//     one read are 0 s apart.
//   - inter_token_latency_by_position_seconds {model, endpoint, position}:
//     the same gaps, by the position band of the event that ends the gap.
//   - inter_token_latency_per_token_seconds {model, endpoint}: a gap divided
//     by the tokens of the event that ends it, where events report them.
//   - time_per_output_token_seconds {model, endpoint}: (last token-bearing
//     event − first) / (N − 1), N the output tokens the upstream reported,
//     else the token-bearing events; at the end of a stream with N ≥ 2.
//   - request_duration_seconds {model, endpoint, streaming}: t0 to the last
//     byte handed to the client, or to the request failing; every request.
//   - active_streams {model, endpoint}: a gauge, up from StartStream to End.
//   - stream_max_gap_seconds, stream_gap_spread_ratio (p99 gap over median,
//     streams of 20 gaps or more), tokens_per_event {model, endpoint}: each
//     stream's shape, observed when it ends.
//   - inter_token_latency_by_load_seconds {model, endpoint, load}: the same
//     gaps, by the load band when each ended; time_to_first_token_by_load_
//     seconds {model, endpoint, load}: TTFT by the load band when the stream
//     started; load_band_upper_streams {load}: each band's bound. See Load
//     below.
//   - requests_total {model, endpoint, streaming, code, tenant},
//     streams_total {model, endpoint, outcome, tenant}, input_tokens_total
//     and output_tokens_total {model, endpoint, tenant}, parse_failures_total
//     {model, endpoint, reason}: counted when a response ends (parse
//     failures when they happen).
//   - slo_objective_seconds {model, class, slo}, slo_breaches_total and
//     slo_observations_total {model, class, tenant, slo},
//     streams_judged_total {model, class, tenant, verdict},
//     goodput_tokens_total {model, class, tenant}, stalls_total {model,
//     endpoint}: see Objectives below.
//   - time_to_first_token_by_turn_seconds, stream_median_gap_by_turn_seconds
//     {model, turn}, session_gap_ratio and sessions_degraded_total {model},
//     sessions_tracked, session_evictions_total: see Sessions below.
//   - build_info {version, revision, goversion}: always 1.
//
// Each collector's Help (collectors.go) says the same in full.
//
// # Bounded labels
//
// No label value comes from a client unbounded:
//
//   - model: the request's model if it is in Options.Models or, without
//     that allow-list, among the first Options.MaxModels distinct names
//     seen; else [ModelOther]. Models with objectives of their own always
//     keep their name. A name over 256 bytes or not UTF-8 is ModelOther; a
//     request that names none is [ModelUnknown].
//   - endpoint: the Endpoint constants ([EndpointOther] for every other
//     path); outcome: the Outcome constants; reason: the Parse constants;
//     slo: [SLOTTFT], [SLOITL], [SLOTPOT], [SLOMaxGap]; verdict: [VerdictMet],
//     [VerdictMissed]; streaming: true or false; code: the status sent to
//     the client.
//   - class: a class the SLOs define, else [ClassDefault].
//   - tenant: the request's tenant if it is in Options.Tenants or, without
//     that allow-list, among the first Options.MaxTenants distinct values
//     seen; else [TenantOther], as is a value that looks like a credential
//     (a bearer token, an API key, a JWT); no tenant is [TenantNone].
//   - load: the band of the streams of a model in flight, 1, 2, 3-4, 5-8,
//     ..., 257-512, 513+.
//   - position: the band of a token's output position in its stream, 1-32,
//     33-128, 129-512, 513-2048, 2049+; turn: the band of a stream's turn in
//     its session, 1, 2-4, 5-16, 17+.
//
// Request, session and trace ids are never labels: they go in exemplars.
//
// # Objectives
//
// [SLOs] are each model's [Objectives] (TTFT per stream, ITL per gap, TPOT
// per stream, the longest gap per stream), a default for every other
// model, and per service class [Class] overrides of some kinds, per model
// too; [SLOs.For] resolves each kind most specific first (class and model,
// class, model, default). [LoadSLOFile] reads them from a YAML file, over
// defaults from the environment. Each objective is a bucket bound of its
// histograms, so that histogram_quantile and bucket ratios are exact at
// it. As each model label value appears, slo_objective_seconds exports its
// objectives in every class, and the breach and observation counters start
// at 0; breaches are observations strictly over the objective, so the
// breach ratio is slo_breaches_total over slo_observations_total. A stream
// that ends by any outcome but client_canceled is judged when its
// objectives include a TTFT, TPOT or longest-gap one: met when it produced
// a token within every objective and did not fail, else missed
// (streams_judged_total); the output tokens of those that met are
// goodput_tokens_total. The stall threshold (Options.StallThreshold) is a bound of the
// ITL histograms too, and stalls_total counts the gaps over it.
//
// [Metrics.ReloadSLOs] puts new objectives in effect while serving: a
// stream keeps the objectives it resolved at StartStream, later streams
// take the new ones, and slo_objective_seconds is exported anew. Bucket
// bounds stay those New was given, so a new objective that is not one is
// judged exactly by the counters but interpolated by quantiles. [Reloads]
// exports the outcome: config_last_reload_successful,
// config_last_reload_success_timestamp_seconds and
// tls_reload_failures_total {file}.
//
// # Load
//
// Each model label value keeps a count of its streams in flight through
// this proxy (all endpoints, as active_streams counts them), up at
// StartStream, down at End. A gap is observed in the band of that count
// when it ends, the stream itself included; a TTFT in the band when the
// stream started. The band lookup is a bit length and the band's series is
// resolved when the stream starts: no lookup and no allocation per gap.
//
// # Sessions
//
// A stream that carries a session id is its session's next turn. A bounded
// tracker (at most Options.SessionMax sessions, the least recently seen
// dropped first; a session idle for Options.SessionTTL starts afresh) keeps
// each session's turn count and its baseline, the median of the median gaps
// of its first 3 streams. TTFT and each stream's median gap are observed by
// turn; session_gap_ratio is a later stream's median gap over the baseline,
// and sessions_degraded_total counts a session once, when that ratio first
// exceeds Options.DegradeFactor.
//
// # Exemplars
//
// The TTFT observation, a stream's first gap and each gap over 1.1 times
// the stream's longest before it carry the request's trace, request and
// session ids as an exemplar (within OpenMetrics' 128 runes), so that a
// spike on a latency panel leads to its request.
package metrics
