#!/usr/bin/env bash
# Head-to-head benchmark: `perf record` vs `ringcap record`.
#
#   bench/run.sh [--quick] [--runs N] [--duration S] [--mmap PAGES] [--only LIST] [--raw] [--keep DIR]
#                [--perf-nice N] [--ringcap-flags "FLAGS"]
#   (--perf-nice runs perf record under `nice -n N`, e.g. -5 = the priority ringcap gives its
#    collectors by default; --ringcap-flags adds FLAGS to every ringcap record, e.g. "--collector-nice 0")
#   (--only takes workload numbers, e.g. 1,4: 1 busy 10 kHz, 2 busy 40 kHz, 3 idle max rate,
#    4 context-switch storm, 5 the same with the sched:sched_switch tracepoint, 6 and 7 = 1 and 2
#    with each tool's default ring size, 8 the synthetic many-ring benchmark, ringcap only,
#    9 = 7 with ringcap --threads 2, 10 the synthetic benchmark at max rate with 1, 2 and 4
#    collector threads, 11 and 12 = 6 and 7 with -z for both tools (zstd level 1), 13 the
#    synthetic benchmark with -z: what one collector compresses, and the ratio, 14 = 7 with the
#    output disk throttled to THROTTLE_MBPS (200) MB/s for both tools (cgroup io.max or blkio),
#    15 the workload's own slowdown: fixed CPU work on every CPU, timed alone, under the kernel's
#    sampling alone (no ring), under the kernel's sampling and writing into rings read at no cost,
#    under perf record and under ringcap record, -F 10000 --call-graph dwarf, with and without -z,
#    16 idle
#    IDLE_SECONDS (60) at -a -F 100: each thread's wake-ups per second and CPU, perf beside ringcap,
#    17 a LONG_MINUTES (10) ringcap capture at -F 100 with --switch-output=1m: CPU, peak RSS, every
#    file read by perf; both in bench/idle.sh), 18 the flight recorder at 10 kHz dwarf on busy
#    CPUs: a dump on SIGUSR2 (how long it takes, its samples and span), lost samples, peak RSS
#    against the window, CPU against -z to a file, what perf resolves (bench/flight.sh)
# Busy workloads print, per ringcap run: kernel-lost, dropped and cut samples (back-pressure), CPU
# and bytes per captured sample.
#
# For each workload the two collectors run ALTERNATELY (perf,ringcap / ringcap,perf / ...), with
# the same events, frequency, ring size (-m; workloads 6-7: each tool's default) and duration, both
# as `COLLECTOR record -a ... -- sleep S`. Each run starts after `sync`, on a quiet disk (quiet_disk).
# Per tool it prints the median over the runs of:
#   samples    PERF_RECORD_SAMPLE records in the file            (perf report --stats, "SAMPLE events")
#   lost       samples the kernel dropped, per the kernel's per-event counter (PERF_FORMAT_LOST),
#              which both tools store as PERF_RECORD_LOST_SAMPLES at the end of the file
#              (perf report --stats, per-event "LOST_SAMPLES events: N" = sum of the lost counts;
#              perf's dummy/sideband event is left out)
#   lost%      lost / (samples + lost)
#   lostrec    sum of the `lost` fields of the in-stream PERF_RECORD_LOST records
#              (perf script --show-lost-events: "PERF_RECORD_LOST lost N")
#   cpu_s      user+sys CPU seconds of the collector process (wait4() rusage; includes the `sleep`
#              child, which is negligible and the same for both)
#   wall_s     wall time of the collector process
#   bytes      size of the output file
#   MB/s       bytes / duration (1 MB = 1e6 bytes)
#   maxrss_MB  peak RSS of the collector (ru_maxrss)
#   ok         files perf read without error / runs
# and the ringcap/perf ratio of each median.
#
# `lost` and `lostrec` count the SAME drops two ways and must not be added: the kernel bumps the
# event's lost counter and the ring's lost counter together, and reports the ring's count in a LOST
# record the next time a record fits. So lostrec <= lost, give or take: the tail of a capture may
# never get a LOST record, and with several events per ring (perf's and ringcap's dummy tracking
# event, which shares the ring) lostrec also covers the other events' drops.
# A file that perf report cannot read to the end is flagged (column ok, and a "!" line) and left
# out of the samples/lost medians; ringcap's own summary line is cross-checked against perf's reading.
#
# Workload 8 runs ringcap_synthbench (bench/synth.cpp; it prints its own table): synthetic rings in
# memory drained by ringcap's collector, 1..512 rings, output to the bench's work dir and to /dev/shm,
# with the memcpy and write limits measured in the same run.
#
# Environment: RINGCAP=/path/to/ringcap (default: build it into build-bench with cmake + make;
# SYNTHBENCH=/path/to/ringcap_synthbench, default: next to RINGCAP),
# PERF=perf, BENCH_TMPDIR=/dir (parent of the mktemp -d work dir, default $TMPDIR or /tmp).
set -euo pipefail

# ---- knobs: one variable each ----------------------------------------------------------------
RUNS=3            # runs per tool and workload (--runs, --quick = 1)
DURATION=3        # seconds per run (--duration, --quick = 1)
MMAP=128          # -m, data pages per CPU ring, for both tools (--mmap)
# Callchains for the busy workloads 1 and 2 (the issue asks for "--call-graph dwarf"), for both
# tools. "auto": dwarf if this ringcap's `record --help` lists --call-graph, else none (with a
# note). Or give the flags, e.g. CALLGRAPH="--call-graph fp", or CALLGRAPH=none.
CALLGRAPH=${CALLGRAPH:-auto}
# The tracepoint variant of the context-switch storm (workload 5). "auto": both tools if this
# ringcap records the tracepoint (probed for 0.1 s), else perf only (with a note). Or 1 / 0.
SCHED_EVENT="sched:sched_switch"
RINGCAP_TRACEPOINTS=${RINGCAP_TRACEPOINTS:-auto}
# Extra perf record flags, empty = perf as people run it. E.g. "-B" (--no-buildid) skips perf's
# build-id pass over the file at the end, which ringcap does not do (perf's cpu_s and maxrss_MB
# include that pass, and perf -a also synthesizes every task's COMM/MMAP records at the start).
PERF_EXTRA=""
# perf record under `nice -n PERF_NICE` (--perf-nice); empty = perf as people run it. ringcap's
# collector and encoder threads run at nice -5 by default (--collector-nice).
PERF_NICE=""
RINGCAP_FLAGS=""  # --ringcap-flags: extra flags for every ringcap record
THROTTLE_MBPS=${THROTTLE_MBPS:-200}  # workload 14's write limit
WORK_ITERATIONS=${WORK_ITERATIONS:-40000}  # workload 15: about 3.5 s of CPU work per CPU here
# ------------------------------------------------------------------------------------------------

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
PERF=${PERF:-perf}
RAW=0
KEEP=""
ONLY="1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"
IDLE_SECONDS=${IDLE_SECONDS:-60}
LONG_MINUTES=${LONG_MINUTES:-10}
QUICK=0

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1; RUNS=1; DURATION=1; IDLE_SECONDS=10; LONG_MINUTES=1 ;;
        --runs) RUNS=$2; shift ;;
        --duration) DURATION=$2; shift ;;
        --only) ONLY=$2; shift ;;
        --mmap) MMAP=$2; shift ;;
        --raw) RAW=1 ;;
        --keep) KEEP=$2; shift ;;
        --perf-nice) PERF_NICE=$2; shift ;;
        --ringcap-flags) RINGCAP_FLAGS=$2; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

BENCH_START=$(date +%s)
die() { echo "run.sh: $*" >&2; exit 2; }
command -v "$PERF" >/dev/null || die "perf not found (apt-get install linux-perf)"
command -v cc >/dev/null || die "no C compiler (apt-get install build-essential)"
[ "$(id -u)" = 0 ] || echo "run.sh: warning: not root; system-wide capture needs root or CAP_PERFMON" >&2

# ---- ringcap binary ----------------------------------------------------------------------------
RINGCAP_SOURCE="prebuilt (RINGCAP=...)"
if [ -z "${RINGCAP:-}" ]; then
    echo "building ringcap (build-bench)..." >&2
    cmake -S "$ROOT" -B "$ROOT/build-bench" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null \
        && make -C "$ROOT/build-bench" -j2 ringcap ringcap_synthbench >/dev/null \
        || die "building ringcap failed (or pass RINGCAP=/path/to/ringcap)"
    RINGCAP="$ROOT/build-bench/ringcap"
    RINGCAP_SOURCE="built from $ROOT"
    if git -C "$ROOT" rev-parse --short HEAD >/dev/null 2>&1; then
        dirty=$(git -C "$ROOT" status --porcelain -- src include CMakeLists.txt 2>/dev/null | wc -l)
        RINGCAP_SOURCE="$RINGCAP_SOURCE at commit $(git -C "$ROOT" rev-parse --short HEAD)"
        [ "$dirty" -gt 0 ] && RINGCAP_SOURCE="$RINGCAP_SOURCE + $dirty uncommitted file(s) in src/, include/"
    fi
fi
[ -x "$RINGCAP" ] || die "RINGCAP=$RINGCAP is not executable"
SYNTHBENCH=${SYNTHBENCH:-$(dirname "$RINGCAP")/ringcap_synthbench}

# ---- work dir, helpers, cleanup ----------------------------------------------------------------
WORK=$(mktemp -d "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/ringcap-bench.XXXXXX")
BG_PIDS=()
stop_bg() {
    local p
    for p in "${BG_PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    for p in "${BG_PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
    BG_PIDS=()
}
cleanup() {
    stop_bg
    [ -n "$KEEP" ] && { mkdir -p "$KEEP"; cp "$WORK"/*.tsv "$WORK"/*.log "$KEEP"/ 2>/dev/null || true; }
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

BT="$WORK/benchtool"
cc -O2 -Wall -o "$BT" "$HERE/benchtool.c" || die "compiling bench/benchtool.c failed"

CALLGRAPH_NOTE=""
if [ "$CALLGRAPH" = auto ]; then
    # The help text whole first: grep -q stops reading early, and under pipefail the help's
    # SIGPIPE would read as "no --call-graph".
    help=$("$RINGCAP" record --help 2>&1 || true)
    if grep -q -- '--call-graph' <<<"$help"; then
        CALLGRAPH="--call-graph dwarf"
    else
        CALLGRAPH=""
        CALLGRAPH_NOTE="no callchains: the issue asks for --call-graph dwarf, but this ringcap has no --call-graph (CALLGRAPH in bench/run.sh)"
    fi
elif [ "$CALLGRAPH" = none ]; then
    CALLGRAPH=""
    CALLGRAPH_NOTE="no callchains (CALLGRAPH=none)"
fi
TRACEPOINT_NOTE=""
if [ "$RINGCAP_TRACEPOINTS" = auto ]; then
    if "$RINGCAP" record -a -e "$SCHED_EVENT" -c 1 --duration 0.1 -o "$WORK/probe.data" >/dev/null 2>&1 \
            && "$PERF" report --stats -i "$WORK/probe.data" >/dev/null 2>&1; then
        RINGCAP_TRACEPOINTS=1
    else
        RINGCAP_TRACEPOINTS=0
        TRACEPOINT_NOTE="perf only: this ringcap cannot record $SCHED_EVENT (RINGCAP_TRACEPOINTS in bench/run.sh)"
    fi
    rm -f "$WORK"/probe.data*
elif [ "$RINGCAP_TRACEPOINTS" != 1 ]; then
    RINGCAP_TRACEPOINTS=0
    TRACEPOINT_NOTE="perf only (RINGCAP_TRACEPOINTS=0)"
fi
RESULTS="$WORK/results.tsv"
: >"$RESULTS"
NOTES="$WORK/notes.txt"
: >"$NOTES"

# Safety net for background workers: they exit on their own after this many seconds.
WORKER_MAX=$(( RUNS * 2 * (DURATION + 30) + 60 ))

# The block device under $WORK (its stat and inflight files), or empty.
WORK_DEV=$(basename "$(findmnt -n -o SOURCE --target "$WORK" 2>/dev/null)" 2>/dev/null || true)
[ -n "$WORK_DEV" ] && [ -r "/sys/class/block/$WORK_DEV/stat" ] || WORK_DEV=""
# sync, then wait until the disk is idle: nothing in flight and no discard completing for 300 ms (at
# most 30 s). The previous run's 1-2 GB file, deleted on a filesystem mounted with `discard`, sends
# its discards after the journal commit that sync forces; a capture starting meanwhile waited behind
# 64 MiB discards (no write completed for 250 ms) and cut stacks it would not have cut.
quiet_disk() {
    sync
    [ -n "$WORK_DEV" ] || return 0
    local f=/sys/class/block/$WORK_DEV prev="" now calm=0 i
    for i in $(seq 300); do
        now="$(cat "$f/inflight" | tr -s ' ') $(awk '{ print $12, $15 }' "$f/stat")"
        if [ "$now" = "$prev" ] && [ "$(awk '{ print $1 + $2 }' "$f/inflight")" = 0 ]; then
            calm=$((calm + 1))
            [ "$calm" -ge 3 ] && return 0
        else
            calm=0
        fi
        prev=$now
        sleep 0.1
    done
}

start_spinners() {  # two busy loops (this VM has 2 vCPUs); started here, so not children of the collector
    local i
    for i in 1 2; do "$BT" spin "$WORKER_MAX" & BG_PIDS+=($!); done
    sleep 0.5
}
start_pingpong() {
    "$BT" pingpong "$WORKER_MAX" >"$WORK/pingpong.out" & BG_PIDS+=($!)
    PINGPONG_T0=$(date +%s.%N)
    sleep 0.5
}

max_rate() { cat /proc/sys/kernel/perf_event_max_sample_rate 2>/dev/null || echo '?'; }

# Punted writes: data writes io_uring hands to a worker thread instead of issuing them inline
# (io_uring:io_uring_queue_async_work for IORING_OP_WRITE_FIXED = 5 and IORING_OP_WRITE = 23),
# counted on every CPU by a `perf stat -a` around each run, of either tool (perf record does not use
# io_uring: its count shows what else on the machine punts writes).
PUNT_EVENT=io_uring:io_uring_queue_async_work
PUNT_FILTER="opcode == 5 || opcode == 23"
PUNTS=0
# The tracepoint needs tracefs (a fresh boot may not have it mounted).
if [ -d /sys/kernel/tracing ] && ! mountpoint -q /sys/kernel/tracing; then
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
if "$PERF" stat -a -e "$PUNT_EVENT" --filter "$PUNT_FILTER" -x, -o /dev/null -- true >/dev/null 2>&1; then PUNTS=1; fi
[ "$PUNTS" = 1 ] || echo "note: punted writes are not counted (perf stat -e $PUNT_EVENT fails: tracefs missing or not root)"
punt_start() {  # punt_start FILE
    [ "$PUNTS" = 1 ] || return 0
    "$PERF" stat -a -x, -e "$PUNT_EVENT" --filter "$PUNT_FILTER" -o "$1" 2>/dev/null & PUNT_PID=$!
    sleep 0.3  # its events open before the collector starts
}
punt_stop() {  # punt_stop FILE -> the count, or "n/a"
    if [ "$PUNTS" != 1 ]; then echo n/a; return; fi
    kill -INT "$PUNT_PID" 2>/dev/null || true
    # Called as $(punt_stop ...), a subshell, where `wait` cannot wait for perf: poll until it is gone.
    while kill -0 "$PUNT_PID" 2>/dev/null; do sleep 0.05; done
    awk -F, -v ev="$PUNT_EVENT" '$3 == ev { n = $1 } END { print (n == "" ? "n/a" : n) }' "$1"
}

# ---- runs (bench/runner.sh), report and write throttle (bench/report.sh), workload 15 -------
# (bench/slowdown.sh) --------------------------------------------------------------------------
# shellcheck source=bench/median.sh
. "$HERE/median.sh"
# shellcheck source=bench/runner.sh
. "$HERE/runner.sh"
# shellcheck source=bench/report.sh
. "$HERE/report.sh"
# shellcheck source=bench/slowdown.sh
. "$HERE/slowdown.sh"

# ---- header ------------------------------------------------------------------------------------
fs_type=$(stat -f -c %T "$WORK" 2>/dev/null || echo '?')
echo "ringcap vs perf record: head-to-head ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo "machine: nproc=$(nproc), kernel $(uname -r) ($(uname -m)), $("$PERF" version 2>&1 | head -1)"
echo "ringcap: $("$RINGCAP" --version 2>&1 | head -1), binary $RINGCAP"
echo "ringcap source: $RINGCAP_SOURCE"
echo "kernel.perf_event_max_sample_rate=$(max_rate), perf_event_paranoid=$(cat /proc/sys/kernel/perf_event_paranoid), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "output files in $WORK ($fs_type); each collector runs as: TOOL record -a -m $MMAP EVENTS -o FILE -- sleep $DURATION (perf with -q)"
[ -n "$PERF_EXTRA" ] && echo "perf extra flags: $PERF_EXTRA"
echo "priority: ringcap's collectors at SCHED_FIFO 1 and its encoders at nice -5 unless its flags say otherwise (--no-realtime, --collector-nice); perf record at nice ${PERF_NICE:-0}"
[ -n "$RINGCAP_FLAGS" ] && echo "ringcap extra flags: $RINGCAP_FLAGS"
echo "counting: perf report --stats (SAMPLE, per-event LOST_SAMPLES) and perf script --show-lost-events (LOST records)"
echo "callchains in workloads 1-2: ${CALLGRAPH:-none}; workload 5 ($SCHED_EVENT): $([ "$RINGCAP_TRACEPOINTS" = 1 ] && echo "both tools" || echo "perf only")"
[ "$QUICK" = 1 ] && echo "QUICK smoke mode: $RUNS run(s) each, ${DURATION} s"

want() { [[ ",$ONLY," == *",$1,"* ]]; }
RING_FLAG=(-m "$MMAP")  # workloads 6-7 clear it: each tool's default ring size
RINGCAP_EXTRA=()        # workloads 6-7: -v, to log the ring size ringcap chose
BOTH_EXTRA=()           # workloads 11-12: -z, added to both tools' flags

# busy_workload HZ same|default [RINGCAP_FLAGS...]: cpu-clock at HZ on both CPUs kept busy, with the
# same ring size for both tools (-m $MMAP, workloads 1-2) or each tool's default (workloads 6-7, 9),
# and extra flags for ringcap only (workload 9: --threads 2).
busy_workload() {
    local hz=$1 rings=$2 wl="busy$(( $1 / 1000 ))k${WL_SUFFIX:-}" ring_text="-m $MMAP"
    shift 2
    local -a args=(-a -e cpu-clock -F "$hz" $CALLGRAPH)
    if [ ${#BOTH_EXTRA[@]} -gt 0 ]; then wl="$wl$(echo "${BOTH_EXTRA[@]}" | tr -d ' =-')"; args+=("${BOTH_EXTRA[@]}"); fi
    if [ "$rings" = default ]; then
        wl="$wl-default"; ring_text="no -m"
        RING_FLAG=(); RINGCAP_EXTRA=(-v)
    fi
    if [ $# -gt 0 ]; then
        RINGCAP_EXTRA+=("$@"); wl="$wl$(echo "$@" | tr -d ' =-')"; ring_text="$ring_text, ringcap $*"
    fi
    start_spinners
    run_workload "$wl" both "${args[@]}"
    stop_bg
    RING_FLAG=(-m "$MMAP"); RINGCAP_EXTRA=()
    print_table "$wl" "busy $((hz / 1000)) kHz$([ "$rings" = default ] && echo ", default rings") (${args[*]}, ${DURATION} s, $ring_text, 2 busy loops)"
    [ -n "$CALLGRAPH_NOTE" ] && echo "  note: $CALLGRAPH_NOTE"
    pressure_lines "$wl"
    LAST_BUSY_WL=$wl
    # With -z: bytes per sample and CPU per captured sample of each tool, and ringcap's compression.
    if [ ${#BOTH_EXTRA[@]} -gt 0 ]; then
        per_sample "$wl"
        grep -h '^ringcap: compressed' "$WORK/$wl"-ringcap-*.log 2>/dev/null | sed 's/^ringcap: /  ringcap run: /' || true
        zstd_share "$wl"
    fi
    # The size ringcap picked (perf's default is 128 data pages, its mlock default).
    if [ "$rings" = default ]; then
        grep -h -m1 -E 'ring\(s\) of' "$WORK/$wl-ringcap-1.log" 2>/dev/null | sed 's/^/  /' || true
    fi
    flush_notes
}

# ---- workloads ---------------------------------------------------------------------------------
want 1 && busy_workload 10000 same
want 2 && busy_workload 40000 same

if want 3; then
    rate0=$(max_rate)
    args=(-a -e cpu-clock -F max)
    run_workload idlemax both "${args[@]}"
    rate1=$(max_rate)
    print_table idlemax "idle, max rate (${args[*]} = $rate0 Hz, ${DURATION} s, -m $MMAP, no workers)"
    [ "$rate0" != "$rate1" ] && echo "  note: the kernel lowered perf_event_max_sample_rate during this workload: $rate0 -> $rate1 (dmesg: 'perf: interrupt took too long')"
    flush_notes
fi

if want 4; then
    args=(-a -e context-switches -c 1)
    start_pingpong
    run_workload ctxsw both "${args[@]}"
    pp_t1=$(date +%s.%N)
    stop_bg
    trips=$(cat "$WORK/pingpong.out" 2>/dev/null || echo 0)
    print_table ctxsw "context-switch storm (${args[*]}, ${DURATION} s, -m $MMAP, pipe ping-pong)"
    awk -v n="${trips:-0}" -v a="$PINGPONG_T0" -v b="$pp_t1" 'BEGIN { if (n > 0) printf "  ping-pong: %.0f round trips/s over the whole workload (2 context switches each)\n", n / (b - a) }'
    flush_notes
fi

if want 5; then
    args=(-a -e "$SCHED_EVENT" -c 1)
    start_pingpong
    if [ "$RINGCAP_TRACEPOINTS" = 1 ]; then run_workload sched both "${args[@]}"; else run_workload sched perf "${args[@]}"; fi
    stop_bg
    print_table sched "context-switch storm, tracepoint (${args[*]}, ${DURATION} s, -m $MMAP, pipe ping-pong)"
    [ -n "$TRACEPOINT_NOTE" ] && echo "  note: $TRACEPOINT_NOTE"
    flush_notes
fi

want 6 && busy_workload 10000 default
want 7 && busy_workload 40000 default
want 9 && busy_workload 40000 default --threads 2
if want 11; then BOTH_EXTRA=(-z); busy_workload 10000 default; BOTH_EXTRA=(); fi
if want 12; then BOTH_EXTRA=(-z); busy_workload 40000 default; BOTH_EXTRA=(); fi

if want 14; then
    echo
    unthrottled=""
    want 7 && unthrottled="$WORK/busy40k-default-ringcap-1.top"
    if throttle_on; then
        echo "workload 14: the output disk throttled to $THROTTLE_MBPS MB/s for each collector ($THROTTLE_CG)"
        WL_SUFFIX=-throttled busy_workload 40000 default
        throttle_off
        if [ -n "$unthrottled" ]; then
            echo "  the busy loops' top 10 symbols (self %), throttled ringcap run 1 against unthrottled (workload 7) run 1: largest difference $(top10_diff "$unthrottled" "$WORK/$LAST_BUSY_WL-ringcap-1.top")"
            echo "  the same over all runs (each symbol's mean self % of the $RUNS runs each): largest difference $(top10_diff "$(ls "$WORK"/busy40k-default-ringcap-*.top)" "$(ls "$WORK/$LAST_BUSY_WL"-ringcap-*.top)")"
            echo "  for scale, unthrottled run 1 against unthrottled run 2: largest difference $(top10_diff "$unthrottled" "$WORK/busy40k-default-ringcap-2.top")"
        fi
    fi
fi

want 15 && slowdown_workload

if want 8; then
    echo
    if [ -x "$SYNTHBENCH" ]; then
        synth_args=(--dirs "$WORK,/dev/shm" --perf "$PERF")
        [ "$QUICK" = 1 ] && synth_args+=(--rings 1,64 --duration 1)
        "$SYNTHBENCH" "${synth_args[@]}" || echo "  ! ringcap_synthbench failed (exit $?)"
        # The same at half the total rate, in memory: where the output has headroom.
        [ "$QUICK" = 1 ] || "$SYNTHBENCH" --dirs /dev/shm --rings 256,512 --total-mb 512 --perf "$PERF" \
            || echo "  ! ringcap_synthbench failed (exit $?)"
    else
        echo "workload 8 skipped: no ringcap_synthbench next to $RINGCAP (set SYNTHBENCH=...)"
    fi
fi

if want 10; then
    echo
    if [ -x "$SYNTHBENCH" ]; then
        # Collector threads: does a second (fourth) collector add throughput or only cost? Max rate,
        # 64 and 256 rings, on disk and in memory; CPU per GB per collector should stay flat.
        synth_args=(--dirs "$WORK,/dev/shm" --rings 64,256 --threads 1,2,4 --modes max --perf "$PERF")
        [ "$QUICK" = 1 ] && synth_args=(--dirs "$WORK" --rings 64 --threads 1,2 --modes max --duration 1 --perf "$PERF")
        "$SYNTHBENCH" "${synth_args[@]}" || echo "  ! ringcap_synthbench failed (exit $?)"
    else
        echo "workload 10 skipped: no ringcap_synthbench next to $RINGCAP (set SYNTHBENCH=...)"
    fi
fi

if want 13; then
    echo
    if [ -x "$SYNTHBENCH" ]; then
        # -z: the uncompressed MB/s one collector takes in and compresses, and the ratio (synthetic
        # samples: a header and a stack that changes a little from sample to sample).
        synth_args=(--dirs "$WORK" --rings 256 --modes fixed,max --compress 1 --perf "$PERF")
        [ "$QUICK" = 1 ] && synth_args+=(--duration 1)
        "$SYNTHBENCH" "${synth_args[@]}" || echo "  ! ringcap_synthbench failed (exit $?)"
    else
        echo "workload 13 skipped: no ringcap_synthbench next to $RINGCAP (set SYNTHBENCH=...)"
    fi
fi

if want 18; then
    echo
    FLIGHT_ROUNDS=$([ "$QUICK" = 1 ] && echo 1 || echo 3) \
        PERF="$PERF" RINGCAP="$RINGCAP" BENCHTOOL="$BT" WORK="$WORK" "$HERE/flight.sh" "$([ "$QUICK" = 1 ] && echo 25 || echo 45)" ||
        echo "  ! bench/flight.sh failed (exit $?)"
fi

for w in 16 17; do
    want $w || continue
    echo
    if [ $w = 16 ]; then mode=(idle "$IDLE_SECONDS"); else mode=(long "$LONG_MINUTES"); fi
    PERF="$PERF" RINGCAP="$RINGCAP" WORK="$WORK" "$HERE/idle.sh" "${mode[@]}" || echo "  ! bench/idle.sh ${mode[*]} failed (exit $?)"
done

echo
echo "total time: $(( $(date +%s) - BENCH_START )) s"
