#!/bin/bash
# Slurm Epilog: stops the capture that prolog.sh started for this job and waits, a bounded time,
# for ringcap to write the file's header and its JSON summary (job-$SLURM_JOB_ID.json, left for
# the scheduler or a post-processing step). SIGINT stops a record cleanly; ringcap exits 0, or 1
# after a write error (the file then holds what reached the disk), and says which in the JSON.
# The epilog then adds to the JSON a "slurm" object: how the job ended, as Slurm tells the epilog
# (see docs/batch-jobs.md).
#
# Settings: RINGCAP (/usr/bin/ringcap), RINGCAP_DIR (/var/lib/ringcap), RINGCAP_STOP_WAIT seconds to
# wait after SIGINT (60; then SIGKILL: the file stays readable up to about a second before the
# kill, and the JSON is the epilog's alone). The pid file's process is signalled only while it is
# the same process (pid and start time) and runs ringcap (also one an upgrade has since replaced).
# An epilog that fails drains the node, so this one always exits 0.
set -u
# Slurm builds the epilog's environment from scratch, without a PATH.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 077

log() { logger -t ringcap-epilog -- "$*" 2>/dev/null || true; }

job=${SLURM_JOB_ID:-}
case "$job" in
    "" | *[!0-9]*) log "SLURM_JOB_ID missing or not a number: '$job'"; exit 0 ;;
esac
dir=${RINGCAP_DIR:-/var/lib/ringcap}
wait_s=${RINGCAP_STOP_WAIT:-60}
pidfile="$dir/job-$job.pid"
json="$dir/job-$job.json"

# The "slurm" object: the job's id and how it ended, as slurmctld tells it while the epilog runs
# (one squeue call, at most 10 s; RINGCAP_ASK_SLURM=0 leaves it out): its reason (TimeLimit,
# NonZeroExitCode, None, ...) and exit code "CODE:SIGNAL" ("0:15": ended by SIGTERM, as scancel and
# the time limit end a job). Slurm's own JobState reads COMPLETING until the epilog is done.
# Without an answer, the exit code slurmd gives the epilog (SLURM_JOB_EXIT_CODE2) and a null reason.
# Only values of the expected form are written: a reason is a word, an exit code a number.
slurm_json() {
    local ec=${SLURM_JOB_EXIT_CODE2:-} reason="" status="" answer
    if [ "${RINGCAP_ASK_SLURM:-1}" != 0 ]; then
        answer=$(timeout 10 squeue -h -t all -j "$job" -O "reason:64,exit_code:16" 2>/dev/null)
        read -r reason status _ <<<"$answer"
    fi
    if [[ "$status" =~ ^[0-9]+$ ]]; then ec="$(( (status >> 8) & 255 )):$(( status & 127 ))"; fi
    if [[ "$ec" =~ ^[0-9]+:[0-9]+$ ]]; then ec="\"$ec\""; else ec=null; fi
    if [[ "$reason" =~ ^[A-Za-z0-9_]+$ ]]; then reason="\"$reason\""; else reason=null; fi
    printf '"slurm": {"job_id": %s, "exit_code": %s, "reason": %s, "capture": "%s"}' \
        "$job" "$ec" "$reason" "$1"
}
# Adds the "slurm" object to ringcap's JSON (one object on one line), or writes a JSON of its own when
# ringcap left none; renamed into place like ringcap's.
finish_json() {
    local stopped=$1 body tmp
    body=$(cat "$json" 2>/dev/null)
    if [[ "$body" == "{"*"}" && "$body" != *'"slurm":'* ]]; then
        body="${body%\}}, $(slurm_json "$stopped")}"
    elif [ -z "$body" ]; then
        body="{$(slurm_json "$stopped")}"
    else
        return 0
    fi
    tmp=$(mktemp "$dir/.job-$job.json.XXXXXX") || return 0
    if ! { printf '%s\n' "$body" >"$tmp" && mv -f "$tmp" "$json"; }; then rm -f "$tmp"; fi
}

# No capture ran (ringcap refused to start: the prolog said why; its JSON has no stop_reason), or it
# had ended: a JSON it left gets the job's end.
ended() {
    if grep -q '"stop_reason":null' "$json" 2>/dev/null; then finish_json "did not start"
    elif [ -f "$json" ]; then finish_json "ended before the job"; fi
}
if [ ! -f "$pidfile" ]; then
    ended
    exit 0
fi
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
# process), running ringcap.
same() { [ "$(start_time "$pid")" = "$start" ]; }
if ! same; then  # it ended before the job did
    ended
    exit 0
fi
exe=$(readlink "/proc/$pid/exe" 2>/dev/null)
ringcap=$(readlink -f "${RINGCAP:-/usr/bin/ringcap}" 2>/dev/null)
# A package upgrade during the job replaced the binary: the kernel then reads "PATH (deleted)".
if [ "$exe" != "$ringcap" ] && [ "$exe" != "$ringcap (deleted)" ]; then
    log "job $job: pid $pid runs ${exe:-?}, not $ringcap: not signalled"
    exit 0
fi

kill -INT "$pid" 2>/dev/null
tenths=0 stopped="stopped by the epilog"
while same; do
    if [ "$tenths" -ge $((wait_s * 10)) ]; then
        log "job $job: ringcap (pid $pid) still running ${wait_s} s after SIGINT; SIGKILL"
        kill -KILL "$pid" 2>/dev/null
        stopped="killed by the epilog ${wait_s} s after SIGINT"
        break
    fi
    sleep 0.1; tenths=$((tenths + 1))
done
finish_json "$stopped"
log "job $job: capture stopped ($dir/job-$job.data, $json)"
exit 0
