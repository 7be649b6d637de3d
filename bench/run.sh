#!/usr/bin/env bash
# itlproxy's benchmarks in one command (BENCHMARKS.md explains the method).
#
#   bench/run.sh --quick    100 and 400 streams direct and through itlproxy, the
#                           plain Go proxy and nginx, 10 s each, about 2 minutes: the
#                           cost ratios, transit and the verdicts, for every change
#                           to the data path
#   bench/run.sh --smoke    reduced sizes, a few minutes: proves every part works
#                           (printed, not written into BENCHMARKS.md)
#   bench/run.sh --full     the published sizes: 100/400/1,000/5,000 streams, 10,000
#
# One fast simulated upstream (itlbench upstream, fixed TTFT and ITL, each
# event stamped with its send time so that the client measures transit); for
# each number of streams and each target (direct, itlproxy, Go's plain
# httputil.ReverseProxy, nginx, HAProxy, Caddy), a fresh proxy process, an
# itlbench warm-up, then a measured itlbench run that also reads the
# proxy's CPU time and RSS from /proc (-watch-pid) and, for itlproxy, what
# it measured of itself over the run from its /metrics (-compare-metrics).
# Then the 10,000-stream run through itlproxy, a CPU profile of itlproxy,
# and the Go microbenchmarks. Raw results go to bench/results/<mode>/ (not
# committed); bench/tabulate turns them into the Markdown tables it prints
# and, for --full, writes into BENCHMARKS.md between the mode's markers.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() {
	cat <<'EOF'
usage: bench/run.sh [--quick | --smoke | --full | --parts] [options]

  --quick              100 and 400 streams for 10s each direct and through itlproxy,
                       the plain Go proxy and nginx, nothing else: the CPU and memory
                       ratios, transit and the verdicts, in about 2 minutes
  --smoke              50/200/500 streams for 5s each, a 500-stream "big" run,
                       microbenchmarks at 2000x (the default mode): proves that every
                       part works; its tables are printed, not written
  --full               100/400/1,000/5,000 streams for 30s each, the 10,000-stream run,
                       microbenchmarks at 1s x 5: the published run, written into
                       BENCHMARKS.md
  --streams "A B C"    override the numbers of concurrent streams
  --duration D         override each measured run's length (e.g. 10s)
  --targets "T ..."    among: direct itlproxy plain nginx haproxy caddy (default: all)
  --nice N             run everything at this niceness (default 0; 19 on a shared machine)
  --no-big             skip the big (10,000-stream) run
  --no-paced           skip the paced run (1,000 streams at a token rate the machine keeps up with)
  --no-profile         skip the CPU profile of itlproxy
  --no-micro           skip the Go microbenchmarks
  --parts              where itlproxy's cost goes, alone (in --full it runs anyway): at 100 and
                       400 streams, itlproxy under load with a CPU profile taken, each part's
                       share of the profile (go tool pprof -focus), then with tracing on, then
                       pushing its metrics over OTLP, next to the plain Go proxy (4 minutes)
  --no-parts           skip that in --full
  --no-install         never apt-get install (missing servers are skipped)
  --no-write           with --full, do not rewrite BENCHMARKS.md (tables are still printed)
  -h, --help           this text
EOF
}

mode=smoke streams="" duration="" targets="direct itlproxy plain nginx haproxy caddy"
niceness=0 do_big=1 do_paced=1 do_profile=1 do_micro=1 do_install=1 do_write=1 do_parts=""
while [ $# -gt 0 ]; do
	case $1 in
	--quick) mode=quick ;;
	--smoke) mode=smoke ;;
	--full) mode=full ;;
	--streams) streams=$2; shift ;;
	--duration) duration=$2; shift ;;
	--targets) targets=$2 custom_targets=1; shift ;;
	--nice) niceness=$2; shift ;;
	--no-big) do_big=0 ;;
	--no-paced) do_paced=0 ;;
	--no-profile) do_profile=0 ;;
	--no-micro) do_micro=0 ;;
	--parts) mode=parts ;;
	--no-parts) do_parts=0 ;;
	--no-install) do_install=0 ;;
	--no-write) do_write=0 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench/run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done

# The upstream of the comparison: every stream is a role chunk, 64 token
# events 20 ms apart after a 50 ms TTFT, usage and [DONE] (67 events).
up_ttft_ms=50 up_itl_ms=20 up_tokens=64
# Each worker's requests are sessions of this many turns (the session
# header, which itlproxy's session tracker follows and the others pass on).
turns=8
stream_ms=$((up_ttft_ms + (up_tokens - 1) * up_itl_ms))
# The paced run's upstream: a token every 100 ms, so that its streams make
# a tenth of the events the comparison's do and the machine, which runs
# the client and the upstream too, keeps up. The comparison at 1,000
# streams and more is CPU-bound on two cores: every proxy's gaps stretch
# there, and the added p99 gap measures the machine, not the proxy.
paced_ttft_ms=100 paced_itl_ms=100 paced_tokens=64
paced_ms=$((paced_ttft_ms + (paced_tokens - 1) * paced_itl_ms))
custom=0
[ "$mode" = quick ] || [ -z "$streams$duration${custom_targets:-}" ] || custom=1
if [ "$mode" = quick ]; then
	# The ratios only: the targets the cost targets compare (direct for
	# the added transit), at the sizes that show the per-event cost, and
	# none of the other runs.
	[ -n "${custom_targets:-}" ] || targets="direct itlproxy plain nginx"
	do_big=0 do_paced=0 do_profile=0 do_micro=0 do_write=0
fi
if [ "$mode" = smoke ]; then
	# A check that every part works on this machine, not a result: its
	# tables are printed, and BENCHMARKS.md keeps the full run's.
	do_write=0
fi
if [ "$mode" = parts ]; then
	# The attribution alone, at the sizes and length given if any: none
	# of the comparison's runs.
	parts_streams_given=$streams parts_duration_given=$duration
	streams="" do_big=0 do_paced=0 do_profile=0 do_micro=0 do_write=0 do_parts=1
	: "${duration:=10s}"
	big_streams=0 big_ttft=1s big_itl=1s big_tokens=0 big_ramp=1s
	micro_benchtime=2000x micro_count=1
	profile_streams=100 profile_seconds=5
	paced_streams=100
elif [ "$mode" = quick ]; then
	: "${streams:=100 400}" "${duration:=10s}"
	big_streams=0 big_ttft=1s big_itl=1s big_tokens=0 big_ramp=1s
	micro_benchtime=2000x micro_count=1
	profile_streams=100 profile_seconds=5
	paced_streams=100
elif [ "$mode" = full ]; then
	: "${streams:=100 400 1000 5000}" "${duration:=30s}"
	big_streams=10000 big_ttft=1s big_itl=1s big_tokens=60 big_ramp=20s
	micro_benchtime=1s micro_count=5
	profile_streams=1000 profile_seconds=20
	paced_streams=1000
else
	: "${streams:=50 200 500}" "${duration:=5s}"
	big_streams=500 big_ttft=200ms big_itl=200ms big_tokens=20 big_ramp=1s
	micro_benchtime=2000x micro_count=1
	profile_streams=200 profile_seconds=8
	paced_streams=200
fi
: "${do_parts:=$([ "$mode" = full ] && echo 1 || echo 0)}"
# The attribution's sizes, run length and rounds (each round runs every
# configuration once, the second in the reverse order, so that a drift of
# the machine falls on all of them alike).
parts_streams=${parts_streams_given:-100 400} parts_duration=${parts_duration_given:-10s}
out=$root/bench/results/$mode
if [ "$custom" = 1 ]; then
	# Other sizes are not the mode's published run: their results go
	# elsewhere and BENCHMARKS.md stays as it is.
	out=$root/bench/results/custom do_write=0
fi
work=$(mktemp -d /tmp/itlbench-run.XXXXXX)
chmod 755 "$work"
nice_cmd=(nice -n "$niceness")

log() { printf '%s bench: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "$*"; exit 1; }

# Every process this script starts is recorded here and ended by its id.
pids=()
cleanup() {
	local status=$? pid
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [ "$status" != 0 ] && [ -d "$out" ]; then
		mkdir -p "$out/logs"
		cp "$work"/*.log "$work"/*/*.log "$out/logs/" 2>/dev/null || true
		log "failed: the processes' logs are in ${out#"$root"/}/logs"
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- packages -----------------------------------------------------------
need_pkgs=()
command -v curl >/dev/null || need_pkgs+=(curl)
for t in $targets; do
	case $t in
	nginx) command -v nginx >/dev/null || need_pkgs+=(nginx-light) ;;
	haproxy) command -v haproxy >/dev/null || need_pkgs+=(haproxy) ;;
	caddy) command -v caddy >/dev/null || need_pkgs+=(caddy) ;;
	esac
done
if [ ${#need_pkgs[@]} -gt 0 ] && [ "$do_install" = 1 ] && [ "$(id -u)" -eq 0 ]; then
	log "apt-get install ${need_pkgs[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends "${need_pkgs[@]}" >/dev/null 2>&1 ||
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "${need_pkgs[@]}" >/dev/null; }
	# Debian's packages start their own server where systemd runs; these
	# runs start their own on other ports.
	for s in nginx haproxy caddy; do
		command -v systemctl >/dev/null && systemctl stop "$s" >/dev/null 2>&1 || true
	done
fi
command -v curl >/dev/null || die "curl is needed (apt-get install curl)"
skipped=""
kept=""
for t in $targets; do
	case $t in
	nginx | haproxy | caddy)
		if ! command -v "$t" >/dev/null; then
			skipped="$skipped $t(not installed)"
			continue
		fi
		;;
	direct | itlproxy | plain) ;;
	*) die "unknown target $t" ;;
	esac
	kept="$kept $t"
done
targets=$kept

# --- limits -------------------------------------------------------------
# Each proxied stream holds two sockets in the proxy (client and upstream):
# 5,000 streams need about 10,000 descriptors, 10,000 about 20,000.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
nofile=$(ulimit -n)
max_streams=0
for c in $streams $([ "$do_paced" = 0 ] || echo "$paced_streams") $([ "$do_parts" = 0 ] || echo "$parts_streams"); do max_streams=$((c > max_streams ? c : max_streams)); done
if [ $((2 * max_streams + 256)) -gt "$nofile" ]; then
	die "$max_streams streams need $((2 * max_streams + 256)) open files per proxy; the limit is $nofile"
fi
# Each proxy stopped leaves its upstream connections in TIME_WAIT for a
# minute, all to the one upstream port: without reuse on loopback (Linux's
# default, 2) the next proxies could run out of ports.
tw_reuse=$(cat /proc/sys/net/ipv4/tcp_tw_reuse 2>/dev/null || echo "?")
if [ "$tw_reuse" = 0 ] && [ "$max_streams" -ge 1000 ]; then
	log "warning: net.ipv4.tcp_tw_reuse is 0: thousands of streams per run may exhaust loopback ports (sysctl -w net.ipv4.tcp_tw_reuse=2)"
fi

# --- build --------------------------------------------------------------
log "go build itlproxy, itlbench"
mkdir -p "$work/bin"
go build -o "$work/bin/itlproxy" ./cmd/itlproxy
go build -o "$work/bin/itlbench" ./cmd/itlbench
itlbench=$work/bin/itlbench itlproxy=$work/bin/itlproxy
rm -rf "$out"
mkdir -p "$out"

# --- helpers ------------------------------------------------------------
# A port that nothing listens on, below the kernel's ephemeral range so
# that outgoing connections are never given it.
used_ports=" "
free_port() {
	local low p
	read -r low _ </proc/sys/net/ipv4/ip_local_port_range
	for _ in $(seq 500); do
		p=$((10000 + RANDOM % (low - 10000)))
		if [[ $used_ports != *" $p "* ]] && [ -z "$(ss -Htln "sport = :$p")" ]; then
			used_ports="$used_ports$p "
			REPLY=$p
			return
		fi
	done
	die "no free port found"
}

# wait_http URL [CURL_ARGS...]: until URL answers 2xx, at most 15 s.
wait_http() {
	local i
	for i in $(seq 150); do
		curl -fsS -o /dev/null --max-time 1 "${@:2}" "$1" 2>/dev/null && return
		sleep 0.1
	done
	die "$1 did not answer in 15s (logs: $work/*.log)"
}

# start NAME CMD...: starts a process in the background, logging to
# $work/NAME.log; its id is in $REPLY.
start() {
	local name=$1
	shift
	"${nice_cmd[@]}" "$@" >"$work/$name.log" 2>&1 &
	REPLY=$!
	pids+=("$REPLY")
}

# stop PID: SIGTERM, then SIGKILL after 10 s.
stop() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for i in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	local kept=()
	for p in "${pids[@]}"; do [ "$p" = "$pid" ] || kept+=("$p"); done
	pids=("${kept[@]}")
}

children() { ps -o pid= --ppid "$1" | tr -d ' ' | paste -sd, -; }

# start_target NAME UPSTREAM_URL [ENV...]: starts a fresh proxy to the
# upstream and sets target_url, target_pid (what to stop) and watch (the
# processes whose CPU and memory are read: the workers, where there are).
start_target() {
	local name=$1 up=$2
	shift 2
	local dir=$work/$name port
	mkdir -p "$dir"
	chmod 755 "$dir"
	watch="" target_pid=""
	if [ "$name" = direct ]; then
		target_url=$up
		return
	fi
	free_port
	port=$REPLY
	target_url=http://127.0.0.1:$port
	local uphostport=${up#*://}
	case $name in
	itlproxy)
		free_port
		admin_url=http://127.0.0.1:$REPLY
		start itlproxy env ITLPROXY_UPSTREAM_URL="$up" ITLPROXY_LISTEN_ADDR="127.0.0.1:$port" \
			ITLPROXY_ADMIN_ADDR="${admin_url#http://}" "$@" "${itlproxy_bin:-$itlproxy}"
		target_pid=$REPLY
		wait_http "$admin_url/readyz"
		;;
	plain)
		start plain "$itlbench" plainproxy -addr "127.0.0.1:$port" -upstream "$up"
		target_pid=$REPLY
		;;
	nginx)
		mkdir -p "$dir/tmp"
		sed -e "s|@PORT@|$port|g" -e "s|@UPSTREAM@|$uphostport|g" -e "s|@DIR@|$dir|g" \
			-e "s|@CONNS@|$((2 * max_streams + 256))|g" -e "s|@NOFILE@|$nofile|g" \
			bench/nginx.conf >"$dir/nginx.conf"
		start nginx nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
		target_pid=$REPLY
		;;
	haproxy)
		sed -e "s|@PORT@|$port|g" -e "s|@UPSTREAM@|$uphostport|g" \
			-e "s|@MAXCONN@|$((max_streams + 256))|g" -e "s|@THREADS@|$(nproc)|g" \
			bench/haproxy.cfg >"$dir/haproxy.cfg"
		start haproxy haproxy -f "$dir/haproxy.cfg" -db
		target_pid=$REPLY
		;;
	caddy)
		sed -e "s|@PORT@|$port|g" -e "s|@UPSTREAM@|$uphostport|g" bench/Caddyfile >"$dir/Caddyfile"
		start caddy env HOME="$dir" XDG_CONFIG_HOME="$dir" XDG_DATA_HOME="$dir" \
			caddy run --config "$dir/Caddyfile" --adapter caddyfile
		target_pid=$REPLY
		;;
	esac
	wait_http "$target_url/v1/models"
	watch=$target_pid
	if [ "$name" = nginx ]; then
		# The master only supervises; the workers carry the traffic.
		local i
		for i in $(seq 50); do
			watch=$(children "$target_pid")
			[ "$(echo "$watch" | tr ',' '\n' | grep -c .)" -ge "$(nproc)" ] && break
			sleep 0.1
		done
	fi
	sleep 1 # idle: the memory before any stream
}

# bench_run OUT ARGS...: itlbench -json into OUT, the log next to it.
bench_run() {
	local json=$1
	shift
	if ! "${nice_cmd[@]}" "$itlbench" -json -progress never -model sim ${watch:+-watch-pid "$watch"} "$@" \
		>"$json" 2>"${json%.json}.log"; then
		log "itlbench failed (see ${json#"$root"/} and its .log)"
	fi
	[ -s "${json%.json}.log" ] || rm -f "${json%.json}.log"
}

# own_account TARGET: sets own to the arguments that have itlbench read
# itlproxy's /metrics after the warm-up and after the run, for what it
# measured of itself over the same run (its own delay per event, its wait
# to run, ...), set beside the transit it added; none for the other
# targets. Both scrapes fall outside the window -watch-pid measures.
own_account() {
	own=()
	[ "$1" != itlproxy ] || own=(-compare-metrics "$admin_url/metrics")
}

errors_of() {
	# The client's failed requests, from its report.
	grep -o '"failed": [0-9]*' "$1" | head -1 | grep -o '[0-9]*$' || echo "?"
}

# report_failed JSON TARGET: logs the client's failed requests and, when
# there are any, keeps the target's own log beside the report
# (<report>.<target>.log), since the work folder goes when the script ends.
report_failed() {
	local failed
	failed=$(errors_of "$1")
	log "  failed requests: $failed"
	if [ "$failed" != 0 ] && [ -f "$work/$2.log" ]; then
		cp "$work/$2.log" "${1%.json}.$2.log"
		log "  its log: $(basename "${1%.json}").$2.log"
	fi
}

# --- environment ----------------------------------------------------------
{
	echo "mode=$mode"
	echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
	# -dirty: the code differs from the commit (results of earlier runs aside).
	echo "revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- . ':!bench/results' 2>/dev/null || echo -dirty)"
	echo "go=$(go env GOVERSION)"
	echo "kernel=$(uname -r)"
	echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "cores=$(nproc)"
	echo "nofile=$nofile"
	echo "tcp_tw_reuse=$tw_reuse"
	echo "nice=$niceness"
	echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
	echo "upstream=ttft ${up_ttft_ms}ms, itl ${up_itl_ms}ms, $up_tokens tokens"
	echo "turns=$turns"
	echo "streams=$streams"
	echo "duration=$duration"
	echo "targets=$targets"
	echo "skipped=$skipped"
	command -v nginx >/dev/null && echo "nginx=$(nginx -v 2>&1 | sed 's|.*/||')"
	command -v haproxy >/dev/null && echo "haproxy=$(haproxy -v | head -1 | awk '{print $3}')"
	command -v caddy >/dev/null && echo "caddy=$(caddy version | awk '{print $1}')"
} >"$out/env.txt"

# --- the comparison -------------------------------------------------------
free_port
up_port=$REPLY
start upstream "$itlbench" upstream -addr "127.0.0.1:$up_port" -ttft "${up_ttft_ms}ms" -itl "${up_itl_ms}ms" -tokens "$up_tokens" -stamp
up_pid=$REPLY
up_url=http://127.0.0.1:$up_port
wait_http "$up_url/v1/models"

# Workers start evenly over one stream's length, so that streams are
# spread over the cycle instead of starting and ending together; the
# warm-up (one stream per worker, left out) opens every connection first.
ramp=${stream_ms}ms
for c in $streams; do
	for t in $targets; do
		log "$c streams, $t: warm-up, then $duration"
		start_target "$t" "$up_url"
		own_account "$t"
		json=$out/load-$(printf %05d "$c")-$t.json
		bench_run "$json" -url "$target_url/v1" -max-tokens "$up_tokens" -c "$c" -warmup "$c" -ramp "$ramp" \
			-duration "$duration" -timeout 2m -turns "$turns" "${own[@]}"
		report_failed "$json" "$t"
		[ -z "$target_pid" ] || stop "$target_pid"
	done
done

# --- the paced run -------------------------------------------------------
if [ "$do_paced" = 1 ]; then
	free_port
	paced_port=$REPLY
	start paced-upstream "$itlbench" upstream -addr "127.0.0.1:$paced_port" -ttft "${paced_ttft_ms}ms" \
		-itl "${paced_itl_ms}ms" -tokens "$paced_tokens" -stamp
	paced_pid=$REPLY
	paced_url=http://127.0.0.1:$paced_port
	wait_http "$paced_url/v1/models"
	for t in $targets; do
		log "paced: $paced_streams streams, $t: warm-up, then $duration"
		start_target "$t" "$paced_url"
		own_account "$t"
		json=$out/paced-$(printf %05d "$paced_streams")-$t.json
		bench_run "$json" -url "$target_url/v1" -max-tokens "$paced_tokens" -c "$paced_streams" \
			-warmup "$paced_streams" -ramp "${paced_ms}ms" -duration "$duration" -timeout 2m "${own[@]}"
		report_failed "$json" "$t"
		[ -z "$target_pid" ] || stop "$target_pid"
	done
	stop "$paced_pid"
	echo "paced_upstream=ttft ${paced_ttft_ms}ms, itl ${paced_itl_ms}ms, $paced_tokens tokens" >>"$out/env.txt"
fi

# --- profile -------------------------------------------------------------
if [ "$do_profile" = 1 ] && [[ " $targets " == *" itlproxy "* ]]; then
	log "CPU profile of itlproxy: $profile_streams streams, ${profile_seconds}s"
	start_target itlproxy "$up_url" ITLPROXY_PPROF=true
	idle_rss_kib=$(awk '/^VmRSS:/ {print $2}' "/proc/$target_pid/status")
	bench_run "$out/profile-load.json" -url "$target_url/v1" -max-tokens "$up_tokens" -c "$profile_streams" \
		-warmup "$profile_streams" -ramp "$ramp" -duration "$((profile_seconds + 6))s" -timeout 2m &
	load=$!
	# After the warm-up (about two stream lengths), inside the run.
	sleep $((2 * stream_ms / 1000 + 2))
	curl -fsS -o "$out/itlproxy-cpu.pprof" "$admin_url/debug/pprof/profile?seconds=$profile_seconds" ||
		log "the profile failed"
	# Where the memory goes, with the streams still in flight: the heap
	# profile after a collection (what is live, not what awaits the
	# collector), then the runtime's own figures, read after it.
	if curl -fsS -o "$out/itlproxy-heap.pprof" "$admin_url/debug/pprof/heap?gc=1"; then
		{
			echo "streams=$profile_streams"
			curl -fsS "$admin_url/metrics" |
				grep -E '^(go_goroutines|go_memstats_(heap_alloc|heap_inuse|stack_inuse|sys)_bytes) ' | tr ' ' '='
			echo "vmrss_kib=$(awk '/^VmRSS:/ {print $2}' "/proc/$target_pid/status")"
			echo "rss_idle_kib=$idle_rss_kib"
		} >"$out/memory.txt"
		go tool pprof -top -sample_index=inuse_space -nodecount=25 "$itlproxy" "$out/itlproxy-heap.pprof" \
			>"$out/memory-top.txt" 2>/dev/null
	else
		log "the heap profile failed"
	fi
	wait "$load" || true
	stop "$target_pid"
	if [ -s "$out/itlproxy-cpu.pprof" ]; then
		{
			echo "# go tool pprof -top (flat), then -top -cum: itlproxy under $profile_streams streams"
			go tool pprof -top -nodecount=30 "$itlproxy" "$out/itlproxy-cpu.pprof" 2>/dev/null
			echo
			go tool pprof -top -cum -nodecount=30 "$itlproxy" "$out/itlproxy-cpu.pprof" 2>/dev/null
		} >"$out/profile-top.txt"
	fi
fi
# --- where the cost goes -------------------------------------------------
if [ "$do_parts" = 1 ]; then
	# At each size: itlproxy under load with a CPU profile of the middle of
	# the run; the plain Go proxy for the baseline; then itlproxy with
	# tracing on, every request a span, exported to a sink that drops
	# them; then itlproxy pushing its metrics over OTLP to the same sink
	# every second (sixty times as often as by default), beside /metrics. Each part's share of itlproxy's profile is what pprof counts
	# with -focus on its functions and -ignore on the parts it calls
	# (bench/parts.txt).
	free_port
	sink_url=http://127.0.0.1:$REPLY
	start otlpsink "$itlbench" otlpsink -addr "${sink_url#http://}"
	sink_pid=$REPLY
	wait_http "$sink_url/v1/traces" -X POST
	parts_seconds=${parts_duration%s}
	for c in $parts_streams; do
		for cfg in itlproxy plain traced pushed; do
			log "where the cost goes: $c streams, $cfg: warm-up, then $parts_duration"
			case $cfg in
			plain) start_target plain "$up_url" ;;
			itlproxy) start_target itlproxy "$up_url" ITLPROXY_PPROF=true ;;
			traced) start_target itlproxy "$up_url" OTEL_EXPORTER_OTLP_ENDPOINT="$sink_url" OTEL_TRACES_SAMPLER=always_on ;;
			pushed) start_target itlproxy "$up_url" OTEL_METRICS_EXPORTER=prometheus,otlp \
				OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="$sink_url/v1/metrics" OTEL_METRIC_EXPORT_INTERVAL=1000 ;;
			esac
			json=$out/parts-$(printf %05d "$c")-$cfg.json
			bench_run "$json" -url "$target_url/v1" -max-tokens "$up_tokens" -c "$c" -warmup "$c" -ramp "$ramp" \
				-duration "$parts_duration" -timeout 2m -turns "$turns" &
			load_pid=$!
			if [ "$cfg" = itlproxy ]; then
				# The warm-up and ramp first, then the middle of the run.
				sleep $(((stream_ms + 999) / 1000 + 2))
				prof=$out/parts-$(printf %05d "$c").pprof
				curl -fsS -o "$prof" "$admin_url/debug/pprof/profile?seconds=$((parts_seconds - 3))" ||
					log "the profile failed"
			fi
			wait "$load_pid" || true
			[ -z "$target_pid" ] || stop "$target_pid"
			if [ "$cfg" = itlproxy ] && [ -s "$prof" ]; then
				# part <TAB> focused samples <TAB> all samples, from pprof's header.
				while IFS=$'\t' read -r part focus ignore; do
					[ -n "$part" ] && [ "${part#\#}" = "$part" ] || continue
					go tool pprof -top -nodecount=1000000 -nodefraction=0 -focus="$focus" ${ignore:+-ignore="$ignore"} "$itlproxy" "$prof" 2>/dev/null |
						sed -n "s/^Showing nodes accounting for \([0-9.]*m*s\), [0-9.]*% of \([0-9.]*m*s\) total.*/$part\t\1\t\2/p"
				done <bench/parts.txt >"${prof%.pprof}-shares.tsv"
			fi
		done
	done
	stop "$sink_pid"
	echo "parts=streams $parts_streams, $parts_duration each" >>"$out/env.txt"
fi
stop "$up_pid"

# --- the big run ----------------------------------------------------------
if [ "$do_big" = 1 ]; then
	# HTTP/1.1 to the upstream holds a socket per stream on both sides of
	# the proxy; where the open-file limit cannot hold that for the full
	# size, the upstream speaks HTTP/2 over TLS (many streams on one
	# connection) and the proxy keeps only the clients' sockets. The choice
	# is made for 10,000 streams in both modes, so that --smoke runs the
	# path --full will take here.
	if [ $((2 * 10000 + 256)) -le "$nofile" ]; then big_link=h1; else big_link=h2-tls; fi
	log "big run: $big_streams streams through itlproxy, upstream over $big_link"
	free_port
	big_port=$REPLY
	big_args=(-addr "127.0.0.1:$big_port" -ttft "$big_ttft" -itl "$big_itl" -tokens "$big_tokens" -stamp)
	big_env=()
	big_url=http://127.0.0.1:$big_port
	if [ "$big_link" = h2-tls ]; then
		big_args+=(-tls-cert "$work/upstream.pem")
		big_url=https://127.0.0.1:$big_port
		big_env=(ITLPROXY_UPSTREAM_CA_FILE="$work/upstream.pem")
	fi
	start big-upstream "$itlbench" upstream "${big_args[@]}"
	big_up_pid=$REPLY
	if [ "$big_link" = h2-tls ]; then
		for _ in $(seq 50); do [ -s "$work/upstream.pem" ] && break; sleep 0.1; done
		wait_http "$big_url/v1/models" --cacert "$work/upstream.pem"
	else
		wait_http "$big_url/v1/models"
	fi
	start_target itlproxy "$big_url" "${big_env[@]}"
	bench_run "$out/big.json" -url "$target_url/v1" -max-tokens "$big_tokens" -c "$big_streams" \
		-requests "$big_streams" -ramp "$big_ramp" -timeout 5m
	log "  failed requests: $(errors_of "$out/big.json")"
	stop "$target_pid"
	stop "$big_up_pid"
	{
		echo "big_streams=$big_streams"
		echo "big_link=$big_link"
		echo "big_upstream=ttft $big_ttft, itl $big_itl, $big_tokens tokens; workers started over $big_ramp"
	} >>"$out/env.txt"
fi

# --- microbenchmarks ------------------------------------------------------
if [ "$do_micro" = 1 ]; then
	log "go test ./proxy/... -bench . -benchtime $micro_benchtime -count $micro_count"
	"${nice_cmd[@]}" go test ./proxy/... -run '^$' -bench . -benchmem -benchtime "$micro_benchtime" \
		-count "$micro_count" >"$out/micro.txt" 2>&1 || log "the microbenchmarks failed (see micro.txt)"
fi

echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/env.txt"

# --- tables ---------------------------------------------------------------
write=()
[ "$do_write" = 1 ] && write=(-write BENCHMARKS.md)
go run ./bench/tabulate -dir "$out" "${write[@]}"
