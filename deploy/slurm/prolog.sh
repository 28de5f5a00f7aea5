#!/bin/bash
# Slurm Prolog: starts a ringcap capture of this job's cgroup on this node, before the job's first
# task. slurm.conf (docs/batch-jobs.md has the whole recipe):
#   Prolog=/usr/share/ringcap/slurm/prolog.sh   Epilog=/usr/share/ringcap/slurm/epilog.sh
# (or call both from the prolog/epilog scripts you already have; they run as root under slurmd).
#
# Writes, in RINGCAP_DIR (/var/lib/ringcap, mode 0700; files 0600):
#   job-$SLURM_JOB_ID.data  the perf.data file (every CPU, only the job's cgroup: -a -G)
#   job-$SLURM_JOB_ID.json  ringcap's JSON summary, written when the capture ends (epilog: SIGINT),
#                           with the epilog's "slurm" object (what Slurm said of the job's end)
#   job-$SLURM_JOB_ID.pid   the capture's pid and start time (/proc/PID/stat field 22), for the epilog
#   job-$SLURM_JOB_ID.log   ringcap's messages (-v: its setup, then its summary at the end)
#
# Slurm 22.05 runs the Prolog before it creates the job's cgroup (the extern step of
# PrologFlags=Contain, or the first step, makes it afterwards), and starts the job's first task only
# once the Prolog has exited. So this prolog makes the job's cgroup itself, where Slurm's cgroup/v2
# plugin puts the job (Slurm accepts a directory that is already there):
# system.slice/slurmstepd.scope/job_$SLURM_JOB_ID under the cgroup2 mount
# (<nodename>_slurmstepd.scope when slurmd was built with --enable-multiple-slurmd), starts ringcap
# in a session of its own (setsid: slurmd kills the prolog's process group when it ends), and waits
# until ringcap says its events are enabled (at most RINGCAP_START_WAIT seconds). The capture so
# covers the job from its first instruction.
#
# Settings (environment, e.g. from a wrapper prolog):
#   RINGCAP              the binary (/usr/bin/ringcap)
#   RINGCAP_DIR          output directory (/var/lib/ringcap)
#   RINGCAP_JOB_CGROUP   the job's cgroup, relative to the cgroup2 mount
#                        (system.slice/${RINGCAP_STEPD_SCOPE}/job_$SLURM_JOB_ID)
#   RINGCAP_STEPD_SCOPE  slurmstepd.scope ($SLURMD_NODENAME_slurmstepd.scope if that one exists)
#   RINGCAP_CGROUP_MOUNT the cgroup2 mount (from /proc/self/mountinfo; /sys/fs/cgroup on Debian 12)
#   RINGCAP_START_WAIT   seconds to wait for the capture to start (30)
#   RINGCAP_OPTS         other record flags ("-F 999 -g"); word-split
#
# A prolog that fails drains the node, so this one always exits 0: a job whose capture could not
# start runs without one. Problems go to syslog (tag ringcap-prolog: journalctl -t ringcap-prolog)
# and to the job's .log file.
set -u
# Slurm builds the prolog's environment from scratch, without a PATH.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 077

log() { logger -t ringcap-prolog -- "$*" 2>/dev/null || true; }

job=${SLURM_JOB_ID:-}
case "$job" in
    "" | *[!0-9]*) log "SLURM_JOB_ID missing or not a number: '$job'"; exit 0 ;;
esac

ringcap=${RINGCAP:-/usr/bin/ringcap}
dir=${RINGCAP_DIR:-/var/lib/ringcap}
wait_s=${RINGCAP_START_WAIT:-30}
read -r -a opts <<<"${RINGCAP_OPTS:--F 999 -g}"
mount=${RINGCAP_CGROUP_MOUNT:-$(awk '{for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") { print $5; exit } break }}' /proc/self/mountinfo)}
scope=${RINGCAP_STEPD_SCOPE:-}
if [ -z "$scope" ]; then
    scope=slurmstepd.scope
    node=${SLURMD_NODENAME:-}
    if [[ "$node" =~ ^[A-Za-z0-9._-]+$ && -d "$mount/system.slice/${node}_slurmstepd.scope" ]]; then
        scope=${node}_slurmstepd.scope
    fi
fi
cgroup=${RINGCAP_JOB_CGROUP:-system.slice/$scope/job_$job}

if [ ! -x "$ringcap" ]; then log "job $job: $ringcap not found; no capture"; exit 0; fi
if [ -z "$mount" ]; then log "job $job: no cgroup2 mount in /proc/self/mountinfo; no capture"; exit 0; fi
if [ ! -d "$mount/${cgroup%/*}" ]; then
    log "job $job: $mount/${cgroup%/*} does not exist (slurmd with CgroupPlugin=cgroup/v2 and ProctrackType=proctrack/cgroup makes it); no capture"
    exit 0
fi
# 0700: umask
if ! mkdir -p "$dir"; then log "job $job: cannot create $dir; no capture"; exit 0; fi
base="$dir/job-$job"
# The start time of process $1 in clock ticks since boot (/proc/PID/stat field 22; the fields after
# the command name, which may itself hold spaces and parentheses), or nothing if it is gone.
start_time() {
    local stat rest f
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    rest=${stat##*) }
    read -r -a f <<<"$rest"
    echo "${f[19]:-}"
}
if [ -e "$base.pid" ]; then
    old_pid="" old_start=""
    read -r old_pid old_start _ <"$base.pid" 2>/dev/null
    if [ -n "${old_pid:-}" ] && [ -n "${old_start:-}" ] && [ "$(start_time "$old_pid")" = "$old_start" ]; then
        log "job $job: a capture is already running (pid $old_pid)"
        exit 0
    fi
fi

# The job's cgroup, made now so that the capture can start before the job's first task. Slurm
# moves the job's steps (and their slurmstepd) into it and removes it at the end.
if ! mkdir -p "$mount/$cgroup"; then log "job $job: cannot create $mount/$cgroup; no capture"; exit 0; fi

# A new session (setsid; the prolog's shell is no process group leader, so setsid execs in place and
# $! is ringcap), no terminal, stdin from /dev/null: slurmd does not wait for it, and it does not
# get the job's signals. -v: ringcap logs "events enabled" once it records.
setsid "$ringcap" record -a -G "$cgroup" "${opts[@]}" -o "$base.data" --json "$base.json" -v \
    </dev/null >"$base.log" 2>&1 &
pid=$!
echo "$pid $(start_time "$pid")" >"$base.pid"

# Until ringcap records, or gives up (it exits 2 with the reason when the kernel refuses). An exited
# ringcap stays a zombie of this shell until it is reaped, so its state is what counts.
running() {
    local stat
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}
tenths=0
while ! grep -q '^ringcap: events enabled' "$base.log" 2>/dev/null; do
    if ! running; then
        rm -f "$base.pid"
        why=$(tail -n 1 "$base.log" 2>/dev/null)
        log "job $job: ringcap did not start: ${why:-see $base.log}; no capture"
        exit 0
    fi
    if [ "$tenths" -ge $((wait_s * 10)) ]; then
        log "job $job: ringcap (pid $pid) not recording after ${wait_s} s; the job starts anyway"
        exit 0
    fi
    sleep 0.1; tenths=$((tenths + 1))
done
log "job $job: recording cgroup $cgroup (pid $pid, $base.data)"
exit 0
