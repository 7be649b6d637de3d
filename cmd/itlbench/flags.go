package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/itlproxy/itlproxy/proxy/events"
)

// usageError is a command line itlbench refuses: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string {
	return e.err.Error() + "\nrun 'itlbench -h' for usage"
}

func (e *usageError) Unwrap() error { return e.err }

// config is a load run's command line, checked.
type config struct {
	base     *url.URL        // the API's base URL, e.g. http://127.0.0.1:8080/v1
	target   string          // base + the endpoint's path
	endpoint events.Endpoint // chat completions or completions, or a native API's
	api      string          // openai, ollama, tgi, llamacpp or sglang
	models   []weighted

	prompt       string
	maxTokens    int
	stream       bool
	includeUsage bool
	extraBody    map[string]any

	concurrency int
	duration    time.Duration
	ramp        time.Duration
	warmup      int
	requests    int64
	rate        float64
	timeout     time.Duration
	insecure    bool

	header        http.Header // extra headers, values never printed
	sessionHeader string
	turns         int

	jsonOut    bool
	progress   string // auto, always, never
	compareURL string
	watchPIDs  []int

	// objectives judge each request (goodput): a sweep's -slo-ttft and
	// -slo-itl; none in a load run.
	objectives objectives
}

// weighted is a model and its share of the requests.
type weighted struct {
	Name   string `json:"name"`
	Weight int    `json:"weight"`
}

const maxWeight = 1000

const loadUsageHead = `itlbench drives streaming requests at an OpenAI-compatible server (or at
Ollama's, TGI's, llama.cpp's or SGLang's native API: -api) and measures, on the client's clock, time to first token (TTFT), every gap
between token-bearing events (ITL) and time per output token (TPOT).

usage:
  itlbench [flags]             run a load and report
  itlbench sweep [flags]       step the concurrency over -levels, judge each level
                               against objectives and find the capacity
                               (itlbench sweep -h)
  itlbench upstream [flags]    serve a simulated upstream with fixed timing
                               (itlbench upstream -h)
  itlbench plainproxy [flags]  serve Go's plain httputil.ReverseProxy, the
                               baseline of itlproxy's cost (itlbench plainproxy -h)
  itlbench otlpsink [flags]    take OTLP/HTTP trace exports and drop them: the
                               collector of a traced benchmark (itlbench otlpsink -h)

Flags take one dash or two (-c 10, --c=10) and come before any argument.

`

const loadUsageTail = `
What is measured (as itlproxy measures it: itlbench reads streams with
itlproxy's own event reader):
  A token-bearing event is an SSE event whose chunk carries output: a
  choices[].delta with non-empty content, reasoning_content/reasoning,
  refusal or tool-call name/arguments, or a non-empty choices[].text. Each is
  stamped when the read that completes it (its terminating blank line)
  returns, before any JSON decoding; events completed by one read share a
  stamp. TTFT runs from just before the request is sent (connection set-up
  included) to the first token-bearing event; ITL is one sample per gap
  between consecutive token-bearing events; TPOT = (last - first) / (N - 1)
  per stream, N = usage.completion_tokens when reported, else the events.
  TTFT and ITL count every token event received, also in streams that later
  fail; request duration counts successful requests only.
  Transit: when the server puts its send time into an event as the SSE
  comment line ": sent=<Unix nanoseconds>" (itlbench upstream -stamp), each
  token-bearing event's arrival (the same stamp) less that time; it needs
  both ends on one machine's clock, and is absent from streams without it.
  Percentiles come from a log-linear (HDR-style) histogram: within 0.4% of
  the exact value, exact below 256ns; means, min, max, counts are exact.
  Memory does not grow with the number of samples.

The run stops starting requests after -duration or -requests (whichever
comes first); requests in flight then finish, bounded by -timeout. Ctrl-C
stops at once and reports what was measured. The open-file limit is raised
to what -c needs when the process may (it warns otherwise).

Examples:
  itlbench -url http://127.0.0.1:8080/v1 -model llama -c 64 -duration 30s
  itlbench -c 200 -rate 20 -requests 1000 -H 'Authorization: Bearer '$KEY
  itlbench -model a=3,b=1 -turns 4 -json > run.json
  itlbench -url http://127.0.0.1:8080/v1 -compare-metrics http://127.0.0.1:9090/metrics
  itlbench -api ollama -url http://127.0.0.1:11434 -model llama3.2 -c 4
`

// headerFlag collects repeated -H flags.
type headerFlag struct{ h http.Header }

func (f headerFlag) String() string { return "" }

func (f headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") {
		return errors.New(`want "Name: value"`)
	}
	f.h.Add(name, strings.TrimSpace(value))
	return nil
}

// parseLoadFlags reads a load run's command line. help is true when it
// asked for the usage, which is then written to stdout.
func parseLoadFlags(args []string, stdout io.Writer) (cfg config, help bool, err error) {
	fs := flag.NewFlagSet("itlbench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	check := defineLoadFlags(fs, &cfg)
	if help, err := parseFlags(fs, args, stdout, loadUsageHead, loadUsageTail); help || err != nil {
		return cfg, help, err
	}
	if fs.NArg() > 0 {
		return cfg, false, &usageError{fmt.Errorf("unexpected argument %q (flags come first; the target is -url)", fs.Arg(0))}
	}
	if _, errs := check(); len(errs) > 0 {
		return cfg, false, &usageError{errors.Join(errs...)}
	}
	return cfg, false, nil
}

// defineLoadFlags defines a load run's flags on fs, into cfg: a run's and
// a sweep's. The function it returns, called once fs has parsed, completes
// cfg from them and returns the flags given and every problem found.
func defineLoadFlags(fs *flag.FlagSet, cfg *config) (check func() (set map[string]bool, errs []error)) {
	base := fs.String("url", "http://127.0.0.1:8080/v1", "base `URL` of the OpenAI-compatible API; the endpoint's path is appended")
	endpoint := fs.String("endpoint", "chat", "`API`: chat (/chat/completions) or completions (/completions)")
	api := fs.String("api", "openai", "`family` of the API: openai (-endpoint's), or a server's native one: ollama\n(/api/chat), tgi (/generate_stream, /generate), llamacpp (/completion) or\nsglang (/generate); -url is then the server's root")
	models := fs.String("model", "", "model(s), comma-separated, each optionally weighted `name=W` (W 1-1000; round-robin\nby weight); empty: the first model GET <url>/models lists")
	fs.StringVar(&cfg.prompt, "prompt", "Write a long story about a lighthouse keeper.", "the prompt `text` (chat: one user message)")
	promptFile := fs.String("prompt-file", "", "read the prompt from `file` instead")
	fs.IntVar(&cfg.maxTokens, "max-tokens", 128, "max_tokens of each request; 0 leaves it out")
	fs.BoolVar(&cfg.stream, "stream", true, "request streaming responses; -stream=false measures whole responses")
	fs.BoolVar(&cfg.includeUsage, "include-usage", true, "ask for stream_options.include_usage (token counts from usage)")
	body := fs.String("body", "", "a JSON `object` merged into every request body, e.g. '{\"ignore_eos\":true}'")
	fs.IntVar(&cfg.concurrency, "c", 10, "concurrent requests (closed loop: each starts when one ends)")
	fs.DurationVar(&cfg.duration, "duration", 0, "how long to start requests (default 10s unless -requests is set)")
	fs.Int64Var(&cfg.requests, "requests", 0, "how many requests to send; 0: no limit")
	fs.IntVar(&cfg.warmup, "warmup", 0, "requests sent (c at a time) before the measured run and left out of it; their\nconnections stay open for it, so its TTFT then excludes connection set-up")
	fs.DurationVar(&cfg.ramp, "ramp", 0, "start the workers (of the warm-up, then of the run) evenly over this time instead\nof at once: thousands of connections opened at once can overflow the server's\naccept queue")
	fs.Float64Var(&cfg.rate, "rate", 0, "at most this many requests started per second, evenly spaced; 0: no limit")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "limit on each request, response and stream included; 0: none")
	fs.BoolVar(&cfg.insecure, "insecure", false, "do not verify the server's TLS certificate")
	cfg.header = http.Header{}
	fs.Var(headerFlag{cfg.header}, "H", "extra request header `Name: value`, repeatable (values are never printed)")
	fs.StringVar(&cfg.sessionHeader, "session-header", "X-Session-Id", "header `name` carrying the session id when -turns is set")
	fs.IntVar(&cfg.turns, "turns", 0, "requests per session: each worker sends this many requests in a row with\none session id and model, then starts a new session; 0: no sessions")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print the report as JSON on stdout")
	fs.StringVar(&cfg.progress, "progress", "auto", "live progress line on stderr, `when`: auto (when stderr is a terminal), always, never")
	fs.StringVar(&cfg.compareURL, "compare-metrics", "", "itlproxy's /metrics `URL`: scrape before and after the run and compare its TTFT,\nITL and TPOT with the client's, and report what it measured of itself (each\nevent's own delay and client write, the wait to run, the request leg)")
	watch := fs.String("watch-pid", "", "report the CPU time and memory of these processes (`PID[,PID...]`, summed; Linux's\n/proc) over the measured run: the cost of the server or proxy under the load")
	return func() (map[string]bool, []error) {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if *api != "openai" && !set["url"] {
			*base = "http://127.0.0.1:8080"
		}
		raw := rawFlags{api: *api, base: *base, endpoint: *endpoint, models: *models, promptFile: *promptFile, body: *body, watch: *watch}
		return set, append(cfg.checkRequest(raw, set), cfg.checkLoad(raw, set)...)
	}
}

// rawFlags are the flags parseLoadFlags checks and converts into config.
type rawFlags struct {
	api, base, endpoint, models, promptFile, body, watch string
}

// checkRequest completes what cfg sends from the parsed flags, raw and set
// (the flags given), and returns every problem found.
func (cfg *config) checkRequest(raw rawFlags, set map[string]bool) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	var err error
	cfg.base, err = url.Parse(strings.TrimSuffix(raw.base, "/"))
	if err != nil || (cfg.base.Scheme != "http" && cfg.base.Scheme != "https") || cfg.base.Host == "" {
		bad("-url %q: want an http or https URL with a host", raw.base)
	}
	cfg.api = raw.api
	switch {
	case raw.api != "openai":
		native, ok := nativeEndpoints[raw.api]
		if !ok {
			bad("-api %q: want openai, ollama, tgi, llamacpp or sglang", raw.api)
		}
		if set["endpoint"] {
			bad("-endpoint is for -api openai")
		}
		cfg.endpoint = native
		if raw.api == "ollama" && strings.TrimSpace(raw.models) == "" {
			bad("-api ollama: name the -model")
		}
	case raw.endpoint == "chat":
		cfg.endpoint = events.ChatCompletions
	case raw.endpoint == "completions":
		cfg.endpoint = events.Completions
	default:
		bad("-endpoint %q: want chat or completions", raw.endpoint)
	}
	if cfg.base != nil {
		cfg.target = cfg.base.String() + cfg.path()
	}
	if cfg.models, err = parseModels(raw.models); err != nil {
		bad("-model: %v", err)
	}
	if raw.promptFile != "" {
		if set["prompt"] {
			bad("-prompt and -prompt-file: give one")
		}
		b, err := os.ReadFile(raw.promptFile)
		if err != nil {
			bad("-prompt-file: %v", err)
		}
		cfg.prompt = string(b)
	}
	if cfg.maxTokens < 0 {
		bad("-max-tokens %d: want 0 or more", cfg.maxTokens)
	}
	if raw.body != "" {
		if err := json.Unmarshal([]byte(raw.body), &cfg.extraBody); err != nil || cfg.extraBody == nil {
			bad("-body: want a JSON object")
		}
	}
	return errs
}

// checkLoad checks how cfg drives the load, and returns every problem
// found.
func (cfg *config) checkLoad(raw rawFlags, set map[string]bool) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if cfg.concurrency < 1 {
		bad("-c %d: want at least 1", cfg.concurrency)
	}
	if cfg.duration < 0 || set["duration"] && cfg.duration == 0 {
		bad("-duration %v: want a positive duration", cfg.duration)
	}
	if cfg.warmup < 0 {
		bad("-warmup %d: want 0 or more", cfg.warmup)
	}
	if cfg.ramp < 0 {
		bad("-ramp %v: want 0 or more", cfg.ramp)
	}
	if cfg.requests < 0 {
		bad("-requests %d: want 0 or more", cfg.requests)
	}
	if !set["duration"] && cfg.requests == 0 {
		cfg.duration = 10 * time.Second
	}
	if cfg.rate < 0 || cfg.rate > 1e6 {
		bad("-rate %v: want 0 to 1e6 requests per second", cfg.rate)
	}
	if cfg.timeout < 0 {
		bad("-timeout %v: want 0 or more", cfg.timeout)
	}
	if cfg.turns < 0 {
		bad("-turns %d: want 0 or more", cfg.turns)
	}
	if cfg.turns > 0 && strings.TrimSpace(cfg.sessionHeader) == "" {
		bad("-session-header: want a header name")
	}
	switch cfg.progress {
	case "auto", "always", "never":
	default:
		bad("-progress %q: want auto, always or never", cfg.progress)
	}
	if cfg.compareURL != "" {
		if u, err := url.Parse(cfg.compareURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("-compare-metrics %q: want the http URL of itlproxy's /metrics", cfg.compareURL)
		}
		if !cfg.stream {
			bad("-compare-metrics compares streams: it needs -stream")
		}
	}
	if raw.watch != "" {
		var err error
		if cfg.watchPIDs, err = parsePIDs(raw.watch); err != nil {
			bad("-watch-pid %v", err)
		}
	}
	return errs
}

// parseModels reads "a,b=3,c".
func parseModels(s string) ([]weighted, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []weighted
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, w, hasWeight := strings.Cut(strings.TrimSpace(part), "=")
		m := weighted{Name: strings.TrimSpace(name), Weight: 1}
		if hasWeight {
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil || n < 1 || n > maxWeight {
				return nil, fmt.Errorf("%q: the weight must be a whole number from 1 to %d", part, maxWeight)
			}
			m.Weight = n
		}
		if m.Name == "" {
			return nil, fmt.Errorf("%q: empty model name", s)
		}
		if seen[m.Name] {
			return nil, fmt.Errorf("%q named twice", m.Name)
		}
		seen[m.Name] = true
		out = append(out, m)
	}
	return out, nil
}

// parseFlags parses a command line; help is true when it asked for the
// usage, which is then written to stdout (head, the flags, tail).
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer, head, tail string) (help bool, err error) {
	err = fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeUsage(stdout, fs, head, tail)
		return true, nil
	case err != nil:
		return false, &usageError{err}
	}
	return false, nil
}

// writeUsage writes head, every flag with its default, and tail.
func writeUsage(w io.Writer, fs *flag.FlagSet, head, tail string) {
	fs.SetOutput(w)
	_, _ = io.WriteString(w, head+"Flags:\n")
	fs.PrintDefaults()
	_, _ = io.WriteString(w, tail)
	fs.SetOutput(io.Discard)
}
