#!/usr/bin/env bash
# ringcap on 64 CPUs: boots Debian's cloud kernel in a QEMU guest with 64 vCPUs (TCG: this kind of
# host cannot run a stock kernel under KVM), from an initramfs holding busybox, ringcap and the
# libraries it links. The guest records system-wide with the default collector and with --threads 4;
# the files come back on a virtio disk (a tar archive written to the raw device) and the host's perf
# reads them. Checked here, for each run:
#   - ringcap exits 0 and perf reads the file, with as many samples as ringcap's summary counted;
#   - `perf report --sort cpu` has samples from every one of the guest's CPUs;
#   - --duration 2 stops after about 2 s (it counts from when the events are enabled, which takes
#     seconds of IPIs here; before that was fixed the capture ran for a minute).
# And a flight recorder (--flight-recorder=3s over 6 s): ping and snapshot on the control FIFO are
# acknowledged; the snapshot's dump and the end's each hold what the JSON says (perf report --stats);
# the end's has samples from every CPU.
#
#   tests/vm/many_cpus.sh RINGCAP_BINARY [WORK_DIR]
#
# Needs qemu-system-x86, busybox-static and cpio (scripts/bootstrap --tests installs them) and apt
# access to download linux-image-cloud-amd64 (kept in WORK_DIR/cache). Exits 77 (ctest: skipped) with
# the reason when something is missing, unless RINGCAP_VM_REQUIRED=1 (CI), where that is a failure.
# RINGCAP_VM_CPUS changes the number of vCPUs (default 64).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(readlink -f "${1:?usage: many_cpus.sh RINGCAP_BINARY [WORK_DIR]}")
WORK=$(readlink -f "${2:-$(dirname "$BIN")/vm}")
CPUS=${RINGCAP_VM_CPUS:-64}
DURATION=2
FLIGHT_WINDOW=3     # the flight recorder's run: a 3 s window over 6 s
FLIGHT_DURATION=6
MAX_STOP_S=10  # --duration 2 must stop well before this (the old behaviour: 55-65 s)

skip() {
    echo "many_cpus: SKIPPED: $*" >&2
    if [ "${RINGCAP_VM_REQUIRED:-0}" = 1 ]; then exit 1; fi
    exit 77
}
fail() {
    echo "many_cpus: FAILED: $*" >&2
    exit 1
}

QEMU=$(command -v qemu-system-x86_64 || true)
[ -n "$QEMU" ] || skip "qemu-system-x86_64 not found (apt-get install qemu-system-x86, or scripts/bootstrap --tests)"
command -v cpio >/dev/null || skip "cpio not found (apt-get install cpio)"
command -v perf >/dev/null || skip "perf not found (apt-get install linux-perf)"
BUSYBOX=/bin/busybox
[ -x "$BUSYBOX" ] && ! ldd "$BUSYBOX" >/dev/null 2>&1 ||
    skip "$BUSYBOX is missing or not static (apt-get install busybox-static)"

mkdir -p "$WORK/cache"
cd "$WORK"

# The guest kernel: the package linux-image-cloud-amd64 points to, unpacked (not installed).
# shellcheck source=tests/vm/kernel.sh
. "$HERE/kernel.sh"
guest_kernel "$WORK/cache"

# The initramfs: busybox, ringcap and its libraries at the paths the loader expects, the virtio
# modules in load order, and /init.
ROOT="$WORK/initrd"
rm -rf "$ROOT" && mkdir -p "$ROOT"/{bin,dev,proc,sys,tmp,modules,out}
cp "$BUSYBOX" "$ROOT/bin/busybox"
cp "$BIN" "$ROOT/bin/ringcap"
for lib in $(ldd "$BIN" | grep -o '/[^ ]*'); do
    mkdir -p "$ROOT$(dirname "$lib")"
    cp -L "$lib" "$ROOT$lib"
done
MODS=$(guest_virtio_modules "$ROOT/modules" | tr '\n' ' ') || fail "cannot copy the virtio modules"

cat >"$ROOT/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
for m in $MODS; do insmod /modules/\$m || echo "guest: insmod \$m failed"; done
echo "guest: \$(nproc) cpus, kernel \$(uname -r)"
up() { cut -d' ' -f1 /proc/uptime; }
# Some user-space load on a few CPUs; the rest are idle (cpu-clock samples them in the idle task).
for i in 1 2 3 4; do (while :; do :; done) & done
mkdir -p /tmp/out
for run in default threads4; do
    args=""
    [ \$run = threads4 ] && args="--threads 4"
    t0=\$(up)
    ringcap record -a -F 1000 \$args --duration $DURATION -o /tmp/out/\$run.data >/tmp/out/\$run.log 2>&1
    echo "rc=\$? wall=\$(awk "BEGIN {print \$(up) - \$t0}")" >>/tmp/out/\$run.log
    echo "guest: \$run: \$(tail -1 /tmp/out/\$run.log)"
done
# The flight recorder: a window of $FLIGHT_WINDOW s over a longer capture, a snapshot on the control
# FIFO once the capture runs (ping answered), and the end's dump.
mkfifo /tmp/ctl /tmp/ack
t0=\$(up)
ringcap record -v -a -F 1000 --flight-recorder=${FLIGHT_WINDOW}s --duration $FLIGHT_DURATION --control=fifo:/tmp/ctl,/tmp/ack \\
    --json /tmp/out/flight.json -o /tmp/out/flight.data >/tmp/out/flight.log 2>&1 &
pid=\$!
# (A writer of the FIFO would wait forever for a ringcap that is gone: bounded. At its exit the ACK
# FIFO ends: an empty line, not an answer.)
ack() { timeout 120 sh -c "echo \$1 >/tmp/ctl && [ \\"\\\$(head -n 1 /tmp/ack)\\" = ack ]" && echo "\$1 acknowledged at \$(up) s" >>/tmp/out/flight.acks; }
ack ping && sleep 2 && ack snapshot
wait \$pid
echo "rc=\$? wall=\$(awk "BEGIN {print \$(up) - \$t0}")" >>/tmp/out/flight.log
echo "guest: flight: \$(tail -1 /tmp/out/flight.log), \$(wc -l </tmp/out/flight.acks 2>/dev/null || echo 0) acks"
tar -cf /dev/vda -C /tmp out && sync && echo "guest: results written"
poweroff -f
EOF
chmod +x "$ROOT/init"
(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd.gz"

rm -f "$WORK/out.img" && truncate -s 512M "$WORK/out.img"
rm -rf "$WORK/out"
echo "many_cpus: booting $KVER with $CPUS vCPUs (TCG; about 2 minutes to boot, 1-2 minutes per capture)"
start=$(date +%s)
timeout 1800 "$QEMU" -accel tcg,thread=multi -smp "$CPUS" -m 4096 \
    -kernel "$VMLINUZ" -initrd "$WORK/initrd.gz" \
    -append "console=ttyS0 panic=-1 loglevel=3 rdinit=/init" \
    -drive file="$WORK/out.img",format=raw,if=virtio,cache=unsafe \
    -display none -nodefaults -monitor none -serial stdio -no-reboot </dev/null >"$WORK/console.log" 2>&1 ||
    fail "qemu failed or timed out after $(($(date +%s) - start)) s; see $WORK/console.log"
grep '^guest:' "$WORK/console.log" || true
echo "many_cpus: guest ran for $(($(date +%s) - start)) s"
tar -xf "$WORK/out.img" -C "$WORK" 2>/dev/null || fail "no results on the output disk; see $WORK/console.log"

failures=0
check() {  # check RUN
    local run=$1 data="$WORK/out/$1.data" log="$WORK/out/$1.log"
    echo "== $run: $(grep -E '^ringcap: (samples|stopped)' "$log" | tr '\n' ' ')"
    local rc
    rc=$(sed -n 's/^rc=\([0-9]*\).*/\1/p' "$log")
    if [ "$rc" != 0 ]; then
        echo "   ringcap exited $rc:"; sed 's/^/   | /' "$log"; return 1
    fi
    local ours perfs cpus stopped
    ours=$(sed -n 's/^ringcap: samples=\([0-9]*\).*/\1/p' "$log")
    perfs=$(perf report -i "$data" --stats 2>/dev/null | awk '/ SAMPLE events:/ {for (i = 1; i < NF; i++) if ($i == "events:") {print $(i + 1); exit}}')
    cpus=$(perf report -i "$data" --sort cpu --stdio -q 2>/dev/null | awk 'NF >= 2 {print $2}' | sort -un | wc -l)
    stopped=$(sed -n 's/^ringcap: stopped (duration reached) after \([0-9.]*\) s.*/\1/p' "$log")
    echo "   summary samples $ours, perf report --stats $perfs; CPUs with samples $cpus of $CPUS; stopped after ${stopped:-?} s"
    local ok=0
    [ -n "$ours" ] && [ "$ours" = "$perfs" ] || { echo "   FAIL: perf counts ${perfs:-nothing}, the summary ${ours:-nothing}"; ok=1; }
    [ "$ours" != 0 ] || { echo "   FAIL: no samples"; ok=1; }
    [ "$cpus" = "$CPUS" ] || { echo "   FAIL: samples from $cpus CPUs, not $CPUS"; ok=1; }
    if [ -z "$stopped" ] || ! awk "BEGIN {exit !($stopped >= $DURATION && $stopped < $MAX_STOP_S)}"; then
        echo "   FAIL: --duration $DURATION stopped after ${stopped:-?} s"; ok=1
    fi
    if [ "$run" = threads4 ]; then
        local collectors
        collectors=$(awk '/^  collector / {on = 1; next} on && NF == 4 && $1 ~ /^[0-9]+$/ {n++} END {print n + 0}' "$log")
        echo "   collectors in the summary: $collectors"
        local want=$((CPUS < 4 ? CPUS : 4))  # never more collectors than rings
        [ "$collectors" = "$want" ] || { echo "   FAIL: --threads 4 ran $collectors collectors, not $want"; ok=1; }
    fi
    return $ok
}
for run in default threads4; do
    [ -f "$WORK/out/$run.log" ] || { echo "== $run: no log"; failures=$((failures + 1)); continue; }
    check "$run" || failures=$((failures + 1))
done
# The flight recorder: both dumps as perf counts them, the end's with every CPU. Their windows are
# printed, not checked: here a vCPU gets a thirty-second of a host CPU, a round (every collector
# flushed through its encoder) takes seconds and the window starts at a round's marker, so it
# reaches back further than asked (with 8 vCPUs: 2.5 and 3.2 s for 3 s; RINGCAP_VM_CPUS=8).
check_flight() {
    local log="$WORK/out/flight.log" rc
    echo "== flight: $(grep -E '^ringcap: (samples|stopped)' "$log" | tr '\n' ' ')"
    rc=$(sed -n 's/^rc=\([0-9]*\).*/\1/p' "$log")
    if [ "$rc" != 0 ]; then
        echo "   ringcap exited $rc:"; sed 's/^/   | /' "$log"; return 1
    fi
    echo "   acks: $(tr '\n' ';' <"$WORK/out/flight.acks" 2>/dev/null)"
    [ "$(grep -c acknowledged "$WORK/out/flight.acks" 2>/dev/null)" = 2 ] || { echo "   FAIL: ping and snapshot were not both acknowledged"; return 1; }
    local ok=0 n=0 trigger path samples window_s perfs cpus
    while read -r trigger path samples window_s; do
        n=$((n + 1))
        path="$WORK/out/$(basename "$path")"
        perfs=$(perf report -i "$path" --stats 2>/dev/null | awk '/ SAMPLE events:/ {for (i = 1; i < NF; i++) if ($i == "events:") {print $(i + 1); exit}}')
        cpus=$(perf report -i "$path" --sort cpu --stdio -q 2>/dev/null | awk 'NF >= 2 {print $2}' | sort -un | wc -l)
        echo "   dump ($trigger): $samples samples in the JSON, perf report --stats ${perfs:-nothing}; ${window_s} s of window; CPUs with samples $cpus of $CPUS"
        [ "$samples" != 0 ] && [ "$samples" = "$perfs" ] || { echo "   FAIL: perf counts ${perfs:-nothing}, the JSON $samples"; ok=1; }
        if [ "$trigger" = end ] && [ "$cpus" != "$CPUS" ]; then echo "   FAIL: the end's dump has samples from $cpus CPUs, not $CPUS"; ok=1; fi
    done < <(python3 -c '
import json, sys
for d in json.load(open(sys.argv[1]))["flight_recorder"]["dumps"]:
    print(d["trigger"].replace(" ", "_"), d["path"], d["samples"], d["window_s"])' "$WORK/out/flight.json")
    [ "$n" = 2 ] || { echo "   FAIL: $n dumps in the JSON, not 2 (the snapshot and the end)"; ok=1; }
    return $ok
}
check_flight || failures=$((failures + 1))
[ "$failures" = 0 ] || fail "$failures of 3 captures failed; guest logs in $WORK/out, console in $WORK/console.log"
echo "many_cpus: passed"
