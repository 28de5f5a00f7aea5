#!/bin/bash
# Slurm Prolog: starts a ringcap capture of this job's cgroup on this node, in the background.
# slurm.conf:  Prolog=/usr/share/ringcap/slurm/prolog.sh   Epilog=/usr/share/ringcap/slurm/epilog.sh
# (or call both from the prolog/epilog scripts you already have; they run as root under slurmd).
#
# Writes, in RINGCAP_DIR (/var/lib/ringcap):
#   job-$SLURM_JOB_ID.data  the perf.data file (every CPU, only the job's cgroup: -a -G)
#   job-$SLURM_JOB_ID.json  ringcap's JSON summary, written when the capture ends (epilog: SIGINT)
#   job-$SLURM_JOB_ID.pid   the capture's pid and start time (/proc/PID/stat field 22), for the epilog
#   job-$SLURM_JOB_ID.log   ringcap's errors (-q prints nothing else)
#
# The job's cgroup is where Slurm's cgroup/v2 plugin puts it: under the scope slurmd creates,
# /sys/fs/cgroup/system.slice/slurmstepd.scope/job_$SLURM_JOB_ID (slurmd built with
# --enable-multiple-slurmd: <nodename>_slurmstepd.scope). slurmstepd creates it when the job's first
# step starts (with PrologFlags=Contain, the extern step, at allocation), which can be after the
# prolog, so the capture waits for it (RINGCAP_CGROUP_WAIT seconds) before it starts.
#
# Settings (environment, e.g. from a wrapper prolog):
#   RINGCAP              the binary (/usr/bin/ringcap)
#   RINGCAP_DIR          output directory (/var/lib/ringcap)
#   RINGCAP_JOB_CGROUP   the job's cgroup, relative to the cgroup2 mount
#                        (system.slice/${RINGCAP_STEPD_SCOPE}/job_$SLURM_JOB_ID)
#   RINGCAP_STEPD_SCOPE  slurmstepd.scope
#   RINGCAP_CGROUP_MOUNT /sys/fs/cgroup
#   RINGCAP_CGROUP_WAIT  seconds to wait for the job's cgroup (120)
#   RINGCAP_OPTS         other record flags ("-F 999 -g"); word-split
#
# A prolog that fails drains the node, so this one always exits 0; problems go to syslog (logger)
# and to the job's .log file.
set -u

log() { logger -t ringcap-prolog -- "$*" 2>/dev/null || true; }

job=${SLURM_JOB_ID:-}
case "$job" in
    "" | *[!0-9]*) log "SLURM_JOB_ID missing or not a number: '$job'"; exit 0 ;;
esac

ringcap=${RINGCAP:-/usr/bin/ringcap}
dir=${RINGCAP_DIR:-/var/lib/ringcap}
cgroup=${RINGCAP_JOB_CGROUP:-system.slice/${RINGCAP_STEPD_SCOPE:-slurmstepd.scope}/job_$job}
mount=${RINGCAP_CGROUP_MOUNT:-/sys/fs/cgroup}
wait_s=${RINGCAP_CGROUP_WAIT:-120}
read -r -a opts <<<"${RINGCAP_OPTS:--F 999 -g}"

if [ ! -x "$ringcap" ]; then log "job $job: $ringcap not found"; exit 0; fi
if ! mkdir -p "$dir"; then log "job $job: cannot create $dir"; exit 0; fi
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

# A new session (setsid), no terminal, stdin from /dev/null: slurmd does not wait for it, and it
# does not get the job's signals. The waiting shell execs ringcap, so the pid file names ringcap.
# shellcheck disable=SC2016  # $1.. expand in the inner shell
setsid nohup bash -c '
    cg=$1 mount=$2 wait_s=$3 ringcap=$4 base=$5; shift 5
    waited=0
    while [ ! -d "$mount/$cg" ]; do
        if [ "$waited" -ge "$wait_s" ]; then
            echo "ringcap-prolog: $mount/$cg did not appear in ${wait_s} s; no capture" >&2
            exit 0
        fi
        sleep 1; waited=$((waited + 1))
    done
    exec "$ringcap" record -a -G "$cg" "$@" -o "$base.data" --json "$base.json" -q
' ringcap-prolog "$cgroup" "$mount" "$wait_s" "$ringcap" "$base" "${opts[@]}" \
    </dev/null >"$base.log" 2>&1 &
pid=$!
echo "$pid $(start_time "$pid")" >"$base.pid"
log "job $job: capture of cgroup $cgroup started (pid $pid, $base.data)"
exit 0
