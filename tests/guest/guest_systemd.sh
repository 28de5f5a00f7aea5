# shellcheck shell=bash
# shellcheck disable=SC2016  # check() and wait_for() eval their single-quoted conditions
# Sourced by guest.sh (its say, check, wait_for, fact, OUT): the package's systemd timer and
# service as README tells a site to use them: `systemctl enable --now ringcap-capture.timer`, the
# service started with `systemctl start`, its first rotated file (--switch-output=1m), stopped with
# `systemctl stop` (SIGINT). Checked here: the timer is waiting, the
# retention of earlier runs' files (the newest 20 kept), the unit's result and exit status, the
# hardening the running capture has, and a run that the kernel refuses (exit 2, the unit failed,
# the JSON says why). The files and last.json go to OUT/systemd for the host's perf.
mkdir -p "$OUT/systemd"
state=/var/lib/ringcap
unit=ringcap-capture.service

systemctl enable -q --now ringcap-capture.timer
check "ringcap-capture.timer enabled and waiting" \
    '[ "$(systemctl is-enabled ringcap-capture.timer)" = enabled ] && [ "$(systemctl is-active ringcap-capture.timer)" = active ]'
systemctl list-timers --all ringcap-capture.timer >"$OUT/systemd/list-timers.txt" 2>&1
check "the timer's next run is within 80 minutes (hourly, RandomizedDelaySec=20min)" \
    'next=$(systemctl show -p NextElapseUSecRealtime --value ringcap-capture.timer); [ -n "$next" ] && [ $(( $(date -d "$next" +%s) - $(date +%s) )) -le 4800 ]'
check "the service is not enabled on its own (static)" '[ "$(systemctl is-enabled $unit)" = static ]'

# Files of earlier runs: 25 rotated files, a minute apart; ExecStartPre= keeps the newest 20.
mkdir -p "$state"
for i in $(seq 1 25); do
    f="$state/perf.data.20200101$(printf '%02d' "$i")000000"
    echo old >"$f"
    touch -d "2020-01-01 00:$(printf '%02d' "$i"):00" "$f"
done

systemctl start "$unit"
wait_for 120 '[ -f $state/perf.data ]'
check "systemctl start: the capture runs and its file is there" '[ "$(systemctl is-active $unit)" = active ] && [ -f $state/perf.data ]'
check "retention: the 5 oldest files of earlier runs removed, the newest 20 kept" \
    '[ ! -e $state/perf.data.2020010101000000 ] && [ ! -e $state/perf.data.2020010105000000 ] && [ -e $state/perf.data.2020010106000000 ] && [ -e $state/perf.data.2020010125000000 ]'
rm -f "$state"/perf.data.2020*

pid=$(systemctl show -p MainPID --value "$unit")
[ "${pid:-0}" -gt 0 ] || pid=no-such-process  # every check of it fails
grep -E '^(Uid|NoNewPrivs|Seccomp|CapBnd|CapEff)' "/proc/$pid/status" >"$OUT/systemd/status.txt"
cat "/proc/$pid/cgroup" >>"$OUT/systemd/status.txt"
check "the capture is ringcap, at Nice=5" '[ "$(readlink /proc/$pid/exe)" = /usr/bin/ringcap ] && [ "$(ps -o ni= -p $pid | tr -d " ")" = 5 ]'
check "hardening: NoNewPrivs, a seccomp filter" 'grep -q "^NoNewPrivs:[[:space:]]*1" /proc/$pid/status && grep -q "^Seccomp:[[:space:]]*2" /proc/$pid/status'
# CAP_PERFMON CAP_SYS_ADMIN CAP_SYSLOG CAP_SYS_PTRACE CAP_IPC_LOCK CAP_DAC_READ_SEARCH
# CAP_DAC_OVERRIDE CAP_SYS_RESOURCE CAP_SYS_NICE: bits 38 21 34 19 14 2 1 24 23.
capbnd=$(printf '%016x' $(( (1 << 38) | (1 << 21) | (1 << 34) | (1 << 19) | (1 << 14) | (1 << 2) | (1 << 1) | (1 << 24) | (1 << 23) )))
check "hardening: the capability bounding set is the unit's ($capbnd)" 'grep -q "^CapBnd:[[:space:]]*$capbnd" /proc/$pid/status'
check "hardening: /home is empty to it (ProtectHome), /var/lib/ringcap its only writable state" \
    '[ -d /proc/$pid/root/home ] && [ -z "$(ls -A /proc/$pid/root/home)" ] && [ -n "$(ls -A /home)" ]'
check "hardening: its memory cgroup limit (MemoryMax=512M)" \
    '[ "$(cat /sys/fs/cgroup/system.slice/$unit/memory.max)" = $((512 * 1024 * 1024)) ]'
systemd-analyze security "$unit" >"$OUT/systemd/security.txt" 2>&1
fact systemd_security "$(tail -1 "$OUT/systemd/security.txt")"

# The unit's --switch-output=1m: a finished file a minute after the start (SIGUSR2 would not
# switch: with a time it is ignored, as by perf); then the stop.
wait_for 150 'ls $state/perf.data.* >/dev/null 2>&1'
check "a rotated file perf.data.<YYYYmmddHHMMSScc> after a minute" 'ls $state | grep -Eq "^perf\.data\.[0-9]{16}$"'
systemctl stop "$unit"
check "systemctl stop (SIGINT): the unit inactive, Result=success, exit status 0" \
    '[ "$(systemctl is-active $unit)" = inactive ] && [ "$(systemctl show -p Result --value $unit)" = success ] && [ "$(systemctl show -p ExecMainStatus --value $unit)" = 0 ]'
systemctl status --no-pager "$unit" >"$OUT/systemd/status-after.txt" 2>&1
ls -la "$state" >"$OUT/systemd/ls.txt"
cp "$state"/perf.data.* "$state/last.json" "$OUT/systemd/" 2>/dev/null
check "no perf.data left being written" '[ ! -e $state/perf.data ]'

# A run the kernel refuses: the unit's capabilities without CAP_SYS_ADMIN, through a drop-in as
# README says to change the unit (Debian's kernel.perf_event_paranoid=3 wants CAP_SYS_ADMIN).
check "kernel.perf_event_paranoid is Debian's 3" '[ "$(sysctl -n kernel.perf_event_paranoid)" = 3 ]'
mkdir -p "/etc/systemd/system/$unit.d"
printf '[Service]\nCapabilityBoundingSet=\nCapabilityBoundingSet=%s\n' \
    'CAP_PERFMON CAP_SYSLOG CAP_SYS_PTRACE CAP_IPC_LOCK CAP_DAC_READ_SEARCH CAP_DAC_OVERRIDE CAP_SYS_RESOURCE CAP_SYS_NICE' \
    >"/etc/systemd/system/$unit.d/test.conf"
systemctl daemon-reload
systemctl start "$unit"
wait_for 120 '[ "$(systemctl is-active $unit)" != active ] && [ "$(systemctl is-active $unit)" != activating ]'
check "without CAP_SYS_ADMIN: refused, the unit failed with exit status 2" \
    '[ "$(systemctl is-active $unit)" = failed ] && [ "$(systemctl show -p ExecMainStatus --value $unit)" = 2 ]'
journalctl -q -u "$unit" -n 20 >"$OUT/systemd/failed-journal.txt" 2>&1
cp "$state/last.json" "$OUT/systemd/failed.json"
rm -rf "/etc/systemd/system/$unit.d"
systemctl daemon-reload
systemctl reset-failed "$unit"
systemctl disable -q --now ringcap-capture.timer
