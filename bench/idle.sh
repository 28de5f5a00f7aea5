#!/usr/bin/env bash
# Long unattended captures, perf record beside ringcap record (called by bench/run.sh, workloads 16
# and 17; runs on its own too):
#   bench/idle.sh idle SECONDS   -a -F 100 on an idle machine: each thread's wake-ups per second
#                                (voluntary + involuntary context switches, /proc/PID/task/*/status)
#                                and each tool's CPU seconds over SECONDS, after 2 s of start-up
#   bench/idle.sh long MINUTES   ringcap -a -F 100 --switch-output=1m for MINUTES: CPU, peak RSS
#                                (VmHWM) after 30 s and at the end, and whether perf reads every file
# PERF, RINGCAP and WORK (a scratch directory) come from the environment.
set -euo pipefail
PERF=${PERF:-perf}
RINGCAP=${RINGCAP:?RINGCAP=path/to/ringcap}
WORK=${WORK:-$(mktemp -d)}
TICK=$(getconf CLK_TCK)

# Per-thread "tid comm switches" of process $1.
thread_switches() {
    local t
    for t in /proc/"$1"/task/*; do
        awk -v tid="${t##*/}" -v comm="$(tr ' ' _ 2>/dev/null <"$t/comm")" \
            '/^(non)?voluntary_ctxt_switches/ { n += $2 } END { print tid, comm, n }' "$t/status" 2>/dev/null || true
    done | sort
}
cpu_ticks() { awk '{ print $14 + $15 }' /proc/"$1"/stat; }
# Nanoseconds on CPU of every thread of process $1 (schedstat: an idle minute is a few ticks).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d\n", s }'; }

idle() {
    local seconds=$1 tool pid a b c0 c1
    echo "workload 16: idle ${seconds} s, -a -F 100, nothing running (after 2 s of start-up)"
    for tool in perf ringcap; do
        local out="$WORK/idle-$tool.data"
        if [ "$tool" = perf ]; then
            "$PERF" record -q -a -F 100 -o "$out" -- sleep $((seconds + 4)) >/dev/null 2>&1 &
        else
            "$RINGCAP" record -q -a -F 100 -o "$out" -- sleep $((seconds + 4)) >/dev/null 2>&1 &
        fi
        pid=$!
        sleep 2
        a=$(thread_switches "$pid"); c0=$(cpu_ns "$pid")
        sleep "$seconds"
        b=$(thread_switches "$pid"); c1=$(cpu_ns "$pid")
        wait "$pid" || true
        join <(echo "$a") <(echo "$b") | awk -v s="$seconds" -v tool="$tool" \
            '{ line = line sprintf("  %s %.1f", $2, ($5 - $3) / s) } END { printf "  %-8s wake-ups/s per thread:%s\n", tool, line }'
        awk -v c=$((c1 - c0)) -v tool="$tool" 'BEGIN { printf "  %-8s CPU %.1f ms (its threads, schedstat)\n", tool, c / 1e6 }'
        rm -f "$out" "$out.old"
    done
}

long() {
    local minutes=$1 dir="$WORK/long" pid hwm_start hwm_end c ok=0 n=0
    echo "workload 17: ringcap -a -F 100 --switch-output=1m for $minutes min"
    mkdir -p "$dir"
    "$RINGCAP" record -q -a -F 100 --switch-output=1m --duration $((minutes * 60)) -o "$dir/perf.data" >"$dir/log" 2>&1 &
    pid=$!
    sleep 30
    hwm_start=$(awk '/^VmHWM/ { print $2 }' /proc/"$pid"/status)
    while [ -e /proc/"$pid"/status ]; do
        hwm_end=$(awk '/^VmHWM/ { print $2 }' /proc/"$pid"/status 2>/dev/null || echo "$hwm_end")
        c=$(cpu_ticks "$pid" 2>/dev/null || echo "${c:-0}")
        sleep 5
    done
    wait "$pid" || echo "  ! ringcap exited with status $?"
    for f in "$dir"/perf.data.*; do
        n=$((n + 1))
        "$PERF" report --stats -i "$f" >/dev/null 2>&1 && ok=$((ok + 1))
    done
    awk -v c="$c" -v hz="$TICK" -v m="$minutes" -v a="$hwm_start" -v b="$hwm_end" -v n="$n" -v ok="$ok" 'BEGIN {
        printf "  CPU %.2f s in %d min (%.3f %% of one CPU); peak RSS %.1f MiB after 30 s, %.1f MiB at the end; perf read %d of %d files\n",
            c / hz, m, 100 * c / hz / (m * 60), a / 1024, b / 1024, ok, n }'
    rm -rf "$dir"
}

case "${1:-}" in
    idle) idle "${2:-60}" ;;
    long) long "${2:-10}" ;;
    *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
