#!/usr/bin/env bash
# The flight recorder under load (called by bench/run.sh, workload 18; runs on its own too):
#   bench/flight.sh [SECONDS]   both CPUs busy, -a -F 10000 --call-graph dwarf for SECONDS (45):
#     1. ringcap --flight-recorder=30s; SIGUSR2 at SECONDS-10: how long until the dump is named
#        (complete), the samples lost over the whole record, the dump's span and its samples;
#        ringcap's CPU from 5 s to SECONDS-12 (no dump yet) and its peak RSS (VmHWM) against the
#        window's compressed size;
#     2. a flight recorder (no dump) and two ringcap -z to a file side by side on the same load,
#        FLIGHT_ROUNDS (3) times: the CPU of each over the same stretch (the two -z: the noise);
#     3. the share of each capture's busy-loop samples that perf resolves to a symbol.
# PERF, RINGCAP, BENCHTOOL (bench/benchtool.c, built) and WORK (a scratch directory) from the environment.
set -euo pipefail
PERF=${PERF:-perf}
RINGCAP=${RINGCAP:?RINGCAP=path/to/ringcap}
BT=${BENCHTOOL:?BENCHTOOL=path/to/benchtool}
WORK=${WORK:-$(mktemp -d)}
SECONDS_RUN=${1:-45}
TICK=$(getconf CLK_TCK)
# shellcheck source=bench/median.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/median.sh"
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
"$BT" spin $(((${FLIGHT_ROUNDS:-3} + 2) * SECONDS_RUN + 30)) & s1=$!
"$BT" spin $(((${FLIGHT_ROUNDS:-3} + 2) * SECONDS_RUN + 30)) & s2=$!
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

# 2. CPU without dumps against -z to a file: all at once, on the same load, ROUNDS times. This VM's
# speed moves by tens of percent from one minute to the next (and ABBA orders of separate runs still
# disagreed between series), so they are measured side by side over the same seconds; each also
# samples the others, which is the same for all. Two -z captures, not one: how far apart two
# identical captures land is what this measurement cannot tell apart.
# trio_cpu: "FLIGHT Z1 Z2" CPU ticks of each from 5 s to SECONDS-12.
trio_cpu() {
    local a b c a0 b0 c0 a1 b1 c1
    "$RINGCAP" record -q -a -F 10000 --call-graph dwarf --flight-recorder=30s -o "$dir/fr2.data" \
        -- sleep "$SECONDS_RUN" >"$dir/fr2.log" 2>&1 &
    a=$!
    "$RINGCAP" record -q -a -F 10000 --call-graph dwarf -z -o "$dir/z.data" -- sleep "$SECONDS_RUN" >"$dir/z.log" 2>&1 &
    b=$!
    "$RINGCAP" record -q -a -F 10000 --call-graph dwarf -z -o "$dir/z2.data" -- sleep "$SECONDS_RUN" >"$dir/z2.log" 2>&1 &
    c=$!
    sleep 5
    a0=$(cpu_ticks "$a") b0=$(cpu_ticks "$b") c0=$(cpu_ticks "$c")
    sleep $((SECONDS_RUN - 17))
    a1=$(cpu_ticks "$a") b1=$(cpu_ticks "$b") c1=$(cpu_ticks "$c")
    kill -INT "$a" "$b" "$c"
    wait "$a" || echo "  ! ringcap --flight-recorder exited with status $?" >&2
    wait "$b" || echo "  ! ringcap -z exited with status $?" >&2
    wait "$c" || echo "  ! ringcap -z (the second) exited with status $?" >&2
    echo "$((a1 - a0)) $((b1 - b0)) $((c1 - c0))"
}
trios=()
for _ in $(seq 1 "${FLIGHT_ROUNDS:-3}"); do
    rm -f "$dir"/fr2.data* "$dir"/z.data "$dir"/z2.data
    trios+=("$(trio_cpu)")
done
rm -f "$dir"/fr2.data* "$dir"/z2.data
printf '%s\n' "${trios[@]}" | awk -v hz="$TICK" -v s=$((SECONDS_RUN - 17)) -v alone="$fr_cpu" "$MEDIAN_AWK"'
    {
        z = ($2 + $3) / 2; r[NR] = z ? $1 / z : 0; q[NR] = $3 ? $2 / $3 : 0
        f += $1; zs += z
        line = line sprintf(" %.2f/%.2f/%.2f", $1 / hz, $2 / hz, $3 / hz)
        rl = rl sprintf(" %.2f", r[NR]); ql = ql sprintf(" %.2f", q[NR])
    }
    END {
        printf "  CPU over %d s, the flight recorder alone (before its dump): %.2f s\n", s, alone / hz
        printf "  CPU over %d s, flight recorder / -z / -z side by side, per round (s):%s\n", s, line
        printf "  CPU flight recorder / -z to a file (the two -z averaged), per round:%s; median %.2f; all rounds %.3f\n", rl, median(r, NR), zs ? f / zs : 0
        printf "  the same measure between the two identical -z captures, per round:%s\n", ql
    }'

# 3. What perf resolves (the load stopped first: perf report has work of its own).
kill $s1 $s2 2>/dev/null || true
echo "  busy-loop samples resolved to a symbol: dump $(resolved_share "$first") %, -z file $(resolved_share "$dir/z.data") %"
rm -rf "$dir"
