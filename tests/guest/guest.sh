#!/bin/bash
# shellcheck disable=SC2016  # check() and wait_for() eval their single-quoted conditions
# Runs in the guest (tests/guest/run.sh boots it; guest-run.service starts this as the payload's
# `run`, as root, once the system is up): installs ringcap's .deb as a site does, then the Slurm
# jobs (guest_slurm.sh) and the systemd timer (guest_systemd.sh). Every check it can make in the
# guest prints "ok: ..." or "FAIL: ..." (on the console and in checks.txt); the files and facts
# the host checks with perf go to OUT, which ends up as a tar archive on the disk named by $1.
set -u
PAY=$(cd "$(dirname "$0")" && pwd)
DEV=${1:?usage: run OUTPUT_DEVICE}
OUT=/run/out
mkdir -p "$OUT"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8

say() { echo "guest: $*"; }
check() {  # check NAME CONDITION (a shell condition, evaluated)
    if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fi | tee -a "$OUT/checks.txt"
}
# wait_for SECONDS CONDITION: polls the condition every 0.2 s, at most SECONDS; false if it never held.
wait_for() {
    local end=$((SECONDS + $1))
    while ! eval "$2"; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.2
    done
}
fact() { echo "$1=$2" >>"$OUT/facts.txt"; }  # for the host's checks
up() { cut -d' ' -f1 /proc/uptime; }
# The results onto the output disk; the end either way.
finish() {
    journalctl -b --no-pager -o short-monotonic >"$OUT/journal.txt" 2>&1
    cp -a /var/log/slurm "$OUT/slurm-logs" 2>/dev/null
    say "$(grep -c '^ok' "$OUT/checks.txt") ok, $(grep -c '^FAIL' "$OUT/checks.txt") failed in the guest; total $(up) s"
    tar -cf "$DEV" -C /run out && sync
    say "results written"
    systemctl poweroff -ff  # at once: nothing in the guest is kept
}
# bail REASON: a failure the rest cannot go on from; what may say why goes to the console too.
bail() {
    echo "FAIL: $*" | tee -a "$OUT/checks.txt"
    tail -n 30 /var/log/slurm/*.log 2>/dev/null
    systemctl --no-pager --failed
    journalctl -b --no-pager -n 40 -p warning
    finish
}

if [ -e "$PAY/debug-shell" ]; then setsid bash -i <>/dev/ttyS1 >&0 2>&1 & fi
say "up after $(up) s: $(nproc) CPUs, kernel $(uname -r), $(systemctl --version | head -1)"
fact boot_s "$(up)"
fact cgroup_fs "$(stat -f -c %T /sys/fs/cgroup)"
check "pure cgroup2 at /sys/fs/cgroup" '[ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] && [ -z "$(awk '"'"'$3 == "cgroup"'"'"' /proc/mounts)" ]'
check "systemd is PID 1" '[ "$(cat /proc/1/comm)" = systemd ]'
systemd-analyze >"$OUT/systemd-analyze.txt" 2>&1 || true

# The kernel lowers kernel.perf_event_max_sample_rate when a sampling interrupt takes long, which it
# does under TCG; the tests' -F 999 must not be refused for that (a site's hardware does not see
# it). The "refused by the kernel" case sets it on purpose. (The rate cannot be set while the
# percentage is 0.)
sample_rate() { sysctl -q -w kernel.perf_cpu_time_max_percent=25 kernel.perf_event_max_sample_rate="$1" kernel.perf_cpu_time_max_percent=0; }
sample_rate 100000

# ringcap as a site installs it (its Depends are in the image: no network here).
if apt-get install -y -q /run/payload/ringcap.deb >"$OUT/install.txt" 2>&1; then
    say "installed $(dpkg-query -W -f '${Package} ${Version}' ringcap)"
else
    cat "$OUT/install.txt"
fi
[ -x /usr/bin/ringcap ] || bail "ringcap .deb not installed"

# A busy loop outside every job, for the whole test: no capture of a job may hold it.
cp /usr/bin/yes /usr/local/bin/outside-spin
systemd-run -q --unit=outside-spin -p StandardOutput=null /usr/local/bin/outside-spin
fact outside_pid "$(systemctl show -p MainPID --value outside-spin)"

t0=$(up)
# shellcheck source=tests/guest/guest_slurm.sh
. "$PAY/guest_slurm.sh"
fact slurm_s "$(awk "BEGIN {print $(up) - $t0}")"
t0=$(up)
# shellcheck source=tests/guest/guest_systemd.sh
. "$PAY/guest_systemd.sh"
fact systemd_s "$(awk "BEGIN {print $(up) - $t0}")"
slurm_finish  # waits for the time-limit job, which ran beside the systemd test

systemctl stop outside-spin
finish
