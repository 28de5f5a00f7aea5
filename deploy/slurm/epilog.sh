#!/bin/bash
# Slurm Epilog: stops the capture that prolog.sh started for this job and waits, a bounded time,
# for ringcap to write the file's header and its JSON summary (job-$SLURM_JOB_ID.json, left for
# the scheduler or a post-processing step). SIGINT stops a record cleanly; ringcap exits 0, or 1
# after a write error (the file then holds what reached the disk), and says which in the JSON.
#
# Settings: RINGCAP_DIR (/var/lib/ringcap), RINGCAP_STOP_WAIT seconds to wait after SIGINT (60; then
# SIGKILL: the file stays readable up to about half a second before the kill, but there is no JSON).
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
pid=$(cat "$pidfile" 2>/dev/null)
rm -f "$pidfile"
case "$pid" in
    "" | *[!0-9]*) log "job $job: bad pid file"; exit 0 ;;
esac
# Only our own process: the capture (or its shell still waiting for the cgroup), not a reused pid.
cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || exit 0
case "$cmd" in
    *ringcap*) ;;
    *) exit 0 ;;
esac

kill -INT "$pid" 2>/dev/null
tenths=0
while kill -0 "$pid" 2>/dev/null; do
    if [ "$tenths" -ge $((wait_s * 10)) ]; then
        log "job $job: ringcap (pid $pid) still running ${wait_s} s after SIGINT; SIGKILL"
        kill -KILL "$pid" 2>/dev/null
        break
    fi
    sleep 0.1; tenths=$((tenths + 1))
done
log "job $job: capture stopped ($dir/job-$job.data, $dir/job-$job.json)"
exit 0
