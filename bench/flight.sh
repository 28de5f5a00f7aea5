#!/usr/bin/env bash
# The flight recorder under load (called by bench/run.sh, workload 18; runs on its own too):
#   bench/flight.sh [SECONDS]   both CPUs busy, -a -F 10000 --call-graph dwarf for SECONDS (45):
#     1. ringcap --flight-recorder=30s; SIGUSR2 at SECONDS-10: how long until the dump is named
#        (complete), the samples lost over the whole record, the dump's span and its samples;
#        ringcap's CPU from 5 s to SECONDS-12 (no dump yet) and its peak RSS (VmHWM) against the
#        window's compressed size;
#     2. ringcap -z to a file, same load: its CPU over the same stretch, against the flight
#        recorder's, in the order flight, -z, -z, flight (the last one without a dump);
#     3. the share of each capture's busy-loop samples that perf resolves to a symbol.
# PERF, RINGCAP, BENCHTOOL (bench/benchtool.c, built) and WORK (a scratch directory) from the environment.
set -euo pipefail
PERF=${PERF:-perf}
RINGCAP=${RINGCAP:?RINGCAP=path/to/ringcap}
BT=${BENCHTOOL:?BENCHTOOL=path/to/benchtool}
WORK=${WORK:-$(mktemp -d)}
SECONDS_RUN=${1:-45}
TICK=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' /proc/"$1"/stat; }

# The share (%) of the busy loops' samples whose symbol perf resolves.
resolved_share() {
    "$PERF" report --stdio --no-children -g none --comm benchtool --sort sym -i "$1" 2>/dev/null |
        awk '/^ *[0-9.]+%/ { p = $1 + 0; if ($0 ~ /\[unknown\]|0x[0-9a-f]+$/) u += p; else k += p }
             END { if (k + u > 0) printf "%.1f", 100 * k / (k + u); else print "-" }'
}

echo "workload 18: flight recorder, both CPUs busy, -a -F 10000 --call-graph dwarf, ${SECONDS_RUN} s"
dir="$WORK/flight"
rm -rf "$dir" && mkdir -p "$dir"
"$BT" spin $((4 * SECONDS_RUN + 30)) & s1=$!
"$BT" spin $((4 * SECONDS_RUN + 30)) & s2=$!
trap 'kill $s1 $s2 2>/dev/null || true' EXIT
sleep 0.5

# 1. The flight recorder.
"$RINGCAP" record -q -a -F 10000 --call-graph dwarf --flight-recorder=30s --json "$dir/fr.json" -o "$dir/p.data" \
    -- sleep "$SECONDS_RUN" >"$dir/fr.log" 2>&1 &
pid=$!
sleep 5
c0=$(cpu_ticks "$pid")
sleep $((SECONDS_RUN - 17))
c1=$(cpu_ticks "$pid")
sleep 2
hwm_before=$(awk '/^VmHWM/ { print $2 }' /proc/"$pid"/status)
t0=$(date +%s.%N)
kill -USR2 "$pid"
while ! compgen -G "$dir/p.data.*" >/dev/null; do sleep 0.01; done
t1=$(date +%s.%N)
hwm=$(awk '/^VmHWM/ { print $2 }' /proc/"$pid"/status)
wait "$pid" || echo "  ! ringcap exited with status $?"
dumps=("$dir"/p.data.*)
first=${dumps[0]}
python3 - "$dir/fr.json" "$t0" "$t1" "$hwm_before" "$hwm" "$c0" "$c1" "$TICK" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
f = j["flight_recorder"]
t0, t1, hwm_before, hwm, c0, c1, tick = map(float, sys.argv[2:])
d = f["dumps"][0]
print("  flight recorder: lost %d, dropped %s, cut %d over the record; %d samples captured" % (j["lost"], j["dropped"], j["cut"], j["samples"]))
print("  SIGUSR2 dump: named %.2f s after the signal; %s samples, %.1f s of window, %.1f MiB" % (t1 - t0, d["samples"], d["window_s"], d["bytes"] / 2**20))
print("  window at the end: %.1f s, %.1f MiB compressed (bound %.0f MiB%s)" % (f["window_s"], f["window_bytes"] / 2**20, f["size_bound"] / 2**20, ", shrunk" if f["shrunk"] else ""))
print("  peak RSS %.1f MiB before the dump, %.1f MiB after it; window x 1.25 + 64 MiB = %.1f MiB" % (hwm_before / 1024, hwm / 1024, f["window_bytes"] / 2**20 * 1.25 + 64))
EOF
fr_cpu=$(( c1 - c0 ))

# 2. -z to a file, the same stretch; then -z again and a flight recorder without a dump (ABBA: this
# VM's speed drifts by tens of percent between minutes, and a drift that is linear cancels out).
# cpu_of ARGS...: ringcap's CPU ticks from 5 s to SECONDS-12 of a record with ARGS.
cpu_of() {
    local out=$1 pid c0 c1
    shift
    "$RINGCAP" record -q -a -F 10000 --call-graph dwarf "$@" -o "$out" -- sleep "$SECONDS_RUN" >"$out.log" 2>&1 &
    pid=$!
    sleep 5
    c0=$(cpu_ticks "$pid")
    sleep $((SECONDS_RUN - 17))
    c1=$(cpu_ticks "$pid")
    kill -INT "$pid"
    wait "$pid" || echo "  ! ringcap $* exited with status $?" >&2
    echo $((c1 - c0))
}
z1=$(cpu_of "$dir/z.data" -z)
z2=$(cpu_of "$dir/z2.data" -z)
fr2=$(cpu_of "$dir/fr2.data" --flight-recorder=30s)
rm -f "$dir"/z2.data* "$dir"/fr2.data*
awk -v a="$fr_cpu" -v b="$z1" -v c="$z2" -v d="$fr2" -v hz="$TICK" -v s=$((SECONDS_RUN - 17)) 'BEGIN {
    printf "  CPU over %d s, in the order run: flight recorder %.2f s, -z to a file %.2f s, -z %.2f s, flight recorder %.2f s\n", s, a / hz, b / hz, c / hz, d / hz
    printf "  CPU flight recorder / -z to a file: %.2f (sums of the two runs each)\n", (b + c) ? (a + d) / (b + c) : 0 }'

# 3. What perf resolves (the load stopped first: perf report has work of its own).
kill $s1 $s2 2>/dev/null || true
echo "  busy-loop samples resolved to a symbol: dump $(resolved_share "$first") %, -z file $(resolved_share "$dir/z.data") %"
rm -rf "$dir"
