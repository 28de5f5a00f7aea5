#!/bin/bash
# Slurm Epilog: stops the capture that prolog.sh started for this job and waits, a bounded time,
# for ringcap to write the file's header and its JSON summary (job-$SLURM_JOB_ID.json, left for
# the scheduler or a post-processing step). SIGINT stops a record cleanly; ringcap exits 0, or 1
# after a write error (the file then holds what reached the disk), and says which in the JSON.
#
# Settings: RINGCAP (/usr/bin/ringcap), RINGCAP_DIR (/var/lib/ringcap), RINGCAP_STOP_WAIT seconds to
# wait after SIGINT (60; then SIGKILL: the file stays readable up to about half a second before the
# kill, but there is no JSON). The pid file's process is signalled only while it is the same process
# (pid and start time) and runs ringcap (or the prolog's shell still waiting for the cgroup).
# An epilog that fails drains the node, so this one always exits 0.
set -u

log() { logger -t ringcap-epilog -- "$*" 2>/dev/null || true; }

job=${SLURM_JOB_ID:-}
case "$job" in
    "" | *[!0-9]*) log "SLURM_JOB_ID missing or not a number: '$job'"; exit 0 ;;
esac
dir=${RINGCAP_DIR:-/var/lib/ringcap}
wait_s=${RINGCAP_STOP_WAIT:-60}
pidfile="$dir/job-$job.pid"

[ -f "$pidfile" ] || exit 0
pid="" start=""
read -r pid start _ <"$pidfile" 2>/dev/null
rm -f "$pidfile"  # stale or not, it is done with
if ! [[ "$pid" =~ ^[0-9]+$ && "$start" =~ ^[0-9]+$ ]]; then
    log "job $job: bad pid file (want 'PID STARTTIME')"
    exit 0
fi

# The start time of process $1 (/proc/PID/stat field 22, after the command name, which may hold
# spaces and parentheses), or nothing if it is gone.
start_time() {
    local stat rest f
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    rest=${stat##*) }
    read -r -a f <<<"$rest"
    echo "${f[19]:-}"
}
# Only our own process: the same pid with the same start time (a pid reused since is another
# process), running ringcap or still the prolog's shell waiting for the cgroup.
same() { [ "$(start_time "$pid")" = "$start" ]; }
same || exit 0  # it ended before the job did
exe=$(readlink "/proc/$pid/exe" 2>/dev/null)
ringcap=$(readlink -f "${RINGCAP:-/usr/bin/ringcap}" 2>/dev/null)
case "$exe" in
    "$ringcap") ;;
    */bash)
        if ! tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qx ringcap-prolog; then
            log "job $job: pid $pid runs $exe, not the prolog's shell: not signalled"
            exit 0
        fi ;;
    *) log "job $job: pid $pid runs ${exe:-?}, not $ringcap: not signalled"; exit 0 ;;
esac

kill -INT "$pid" 2>/dev/null
tenths=0
while same; do
    if [ "$tenths" -ge $((wait_s * 10)) ]; then
        log "job $job: ringcap (pid $pid) still running ${wait_s} s after SIGINT; SIGKILL"
        kill -KILL "$pid" 2>/dev/null
        break
    fi
    sleep 0.1; tenths=$((tenths + 1))
done
log "job $job: capture stopped ($dir/job-$job.data, $dir/job-$job.json)"
exit 0
