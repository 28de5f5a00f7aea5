# shellcheck shell=bash
# shellcheck disable=SC2016  # check() and wait_for() eval their single-quoted conditions
# Sourced by guest.sh (its say, check, wait_for, fact, OUT): Slurm 22.05 on this node, configured as
# docs/batch-jobs.md tells a site (its slurm.conf lines and cgroup.conf, taken from the document
# itself), and real jobs submitted by a user with sbatch and srun. Each job's files and Slurm's
# account of it go to OUT/slurm; the host checks the captures with perf (check.sh).

doc=/run/payload/docs/batch-jobs.md
# The lines of the document's block marked <!-- guest-test: NAME --> (the fenced block after it).
doc_block() {
    awk -v name="$1" '$0 == "<!-- guest-test: " name " -->" {f = 1; next}
        f && /^```/ {if (inside) exit; inside = 1; next}
        f && inside {print}' "$doc"
}
mkdir -p "$OUT/slurm"

# A one-node cluster (what any site has; not ringcap's business), then the site's additions.
mkdir -p /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
chown slurm: /var/lib/slurm/slurmctld /var/log/slurm
{
    echo "ClusterName=guest"
    echo "SlurmctldHost=$(hostname -s)"
    echo "SlurmUser=slurm"
    echo "AuthType=auth/munge"
    echo "StateSaveLocation=/var/lib/slurm/slurmctld"
    echo "SlurmdSpoolDir=/var/lib/slurm/slurmd"
    echo "SlurmctldLogFile=/var/log/slurm/slurmctld.log"
    echo "SlurmdLogFile=/var/log/slurm/slurmd.log"
    echo "SlurmctldPidFile=/run/slurmctld.pid"
    echo "SlurmdPidFile=/run/slurmd.pid"
    echo "ReturnToService=2"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "JobCompType=jobcomp/filetxt"
    echo "JobCompLoc=/var/log/slurm/jobcomp.log"
    echo "$(slurmd -C | head -1) State=UNKNOWN"
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    echo "# ringcap (docs/batch-jobs.md)"
    doc_block slurm.conf
} >/etc/slurm/slurm.conf
doc_block cgroup.conf >/etc/slurm/cgroup.conf
cp /etc/slurm/slurm.conf /etc/slurm/cgroup.conf "$OUT/slurm/"
check "docs/batch-jobs.md has the slurm.conf and cgroup.conf blocks" \
    'grep -q "^Prolog=" /etc/slurm/slurm.conf && [ -s /etc/slurm/cgroup.conf ]'

say "starting munge, slurmctld, slurmd"
systemctl restart munge
systemctl enable -q --now slurmctld slurmd
say "waiting for the node to be idle"
node=$(hostname -s)
node_state() { sinfo -h -n "$node" -o %t 2>/dev/null; }
wait_for 180 '[ "$(node_state)" = idle ]' || bail "slurmctld and slurmd up, the node idle: node '$(node_state)'"
{ systemctl cat slurmd slurmctld; find /sys/fs/cgroup/system.slice -maxdepth 2 -name '*slurm*'; } >"$OUT/slurm/units.txt" 2>&1

# The jobs' user and their workloads: copies of yes(1) (busy in user and kernel space) whose
# names say where they run.
id alice >/dev/null 2>&1 || useradd -m alice
for w in job-first job-main job-a job-b job-c job-d; do cp /usr/bin/yes "/usr/local/bin/$w"; done
as_alice() { runuser -u alice -- "$@"; }
# job_script NAME BODY: /home/alice/NAME.sh
job_script() { printf '#!/bin/bash\n%s\n' "$2" >"/home/alice/$1.sh"; chown alice: "/home/alice/$1.sh"; }
submit() {  # submit NAME [SBATCH OPTIONS]: prints the job id
    local name=$1; shift
    (cd /home/alice && as_alice sbatch --parsable -J "$name" -o "/home/alice/$name.out" "$@" "/home/alice/$name.sh")
}
running() { [ "$(squeue -h -j "$1" -o %t 2>/dev/null)" = R ]; }
gone() { [ -z "$(squeue -h -j "$1" -o %i 2>/dev/null)" ]; }  # ended, epilog included
# done_job NAME ID [STATE]: waits for the job's end and the node's return to idle; keeps the files.
done_job() {
    local name=$1 id=$2 want=${3:-}
    wait_for 300 "gone $id" || say "job $name ($id) still listed after 300 s"
    if ! wait_for 60 '[ "$(node_state)" = idle ]'; then
        { date; sinfo -a; squeue -a; scontrol show node; scontrol show job "$id"; } >"$OUT/slurm/$name.not-idle" 2>&1
    fi
    check "after $name (job $id) the node is idle" '[ "$(node_state)" = idle ]'
    scontrol show job -o "$id" >"$OUT/slurm/$name.scontrol" 2>&1
    # No slurmdbd here: sacct reads the job completion log (JobCompType=jobcomp/filetxt).
    sacct -c -j "$id" -o JobID,JobName,User,State,ExitCode,Start,End >"$OUT/slurm/$name.sacct" 2>&1
    local state
    state=$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' "$OUT/slurm/$name.scontrol")
    fact "job_$name" "$id"
    fact "state_$name" "$state"
    [ -z "$want" ] || check "job $name ended $want" '[ "$state" = "$want" ]'
    local f
    for f in data json log pid; do
        [ -e "/var/lib/ringcap/job-$id.$f" ] && cp "/var/lib/ringcap/job-$id.$f" "$OUT/slurm/$name.$f"
    done
    cp "/home/alice/$name.out" "$OUT/slurm/$name.out" 2>/dev/null
    check "no capture of job $id still running" '! pgrep -f "job-$id.data" >/dev/null'
    check "job $id's pid file removed" '[ ! -e /var/lib/ringcap/job-$id.pid ]'
    say "job $name ($id): $state, node $(node_state)"
}

# 1. A known workload, with the busy loop outside running: job-first is the first thing the job
#    runs (for 1 s), then job-main for 3 s.
job_script known 'timeout 1 job-first >/dev/null
timeout 3 job-main >/dev/null
echo done'
id=$(submit known)
done_job known "$id" COMPLETED

# 2. Two jobs one after the other (sbatch, then srun), then two at once: each waits for the
#    other to have started (a file each) before its workload, so that their workloads overlap.
job_script seq-a 'timeout 2 job-a >/dev/null; exit 0'
id=$(submit seq-a)
done_job seq-a "$id" COMPLETED
(cd /home/alice && as_alice srun -J seq-b -o /home/alice/seq-b.out bash -c 'echo "$SLURM_JOB_ID" >/home/alice/seq-b.id; timeout 2 job-b >/dev/null; exit 0')
done_job seq-b "$(cat /home/alice/seq-b.id 2>/dev/null)" COMPLETED
rm -f /tmp/par-c /tmp/par-d
job_script par-c 'touch /tmp/par-c; i=0; while [ ! -e /tmp/par-d ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
[ -e /tmp/par-d ] && echo overlapped; timeout 3 job-c >/dev/null; exit 0'
job_script par-d 'touch /tmp/par-d; i=0; while [ ! -e /tmp/par-c ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
[ -e /tmp/par-c ] && echo overlapped; timeout 3 job-d >/dev/null; exit 0'
idc=$(submit par-c)
idd=$(submit par-d)
wait_for 300 "gone $idc && gone $idd"
done_job par-c "$idc" COMPLETED
done_job par-d "$idd" COMPLETED
check "par-c and par-d ran at the same time" 'grep -q overlapped "$OUT/slurm/par-c.out" && grep -q overlapped "$OUT/slurm/par-d.out"'

# 3. A job that fails, one cancelled with scancel, one that hits its time limit (this one runs
#    beside the systemd test; slurm_finish collects it).
job_script fail 'timeout 2 job-main >/dev/null; exit 3'
id=$(submit fail)
done_job fail "$id" FAILED
job_script cancel 'job-main >/dev/null'
id=$(submit cancel)
wait_for 300 "running $id && pgrep -u alice -x job-main >/dev/null"
scancel "$id"
done_job cancel "$id" CANCELLED
job_script timelimit 'timeout 3 job-main >/dev/null; sleep 600'
timelimit_id=$(submit timelimit --time=0:20)
wait_for 300 "running $timelimit_id"
slurm_finish() {
    done_job timelimit "$timelimit_id" TIMEOUT
    # 4. ringcap missing, then refused by the kernel (-F 999 above kernel.perf_event_max_sample_rate):
    #    the jobs run without a capture, the node stays idle, the reason is in the journal.
    mv /usr/bin/ringcap /usr/bin/ringcap.away
    job_script missing 'timeout 1 job-main >/dev/null; exit 0'
    local id
    id=$(submit missing)
    done_job missing "$id" COMPLETED
    mv /usr/bin/ringcap.away /usr/bin/ringcap
    check "missing ringcap: the reason in the journal (ringcap-prolog)" \
        'journalctl -q -t ringcap-prolog | grep -q "job $id: /usr/bin/ringcap not found"'
    sample_rate 500
    job_script refused 'timeout 1 job-main >/dev/null; exit 0'
    id=$(submit refused)
    done_job refused "$id" COMPLETED
    sample_rate 100000
    check "refused by the kernel: the reason in the journal (ringcap-prolog)" \
        'journalctl -q -t ringcap-prolog | grep "job $id: ringcap did not start" | grep -q perf_event_max_sample_rate'
    journalctl -q -t ringcap-prolog -t ringcap-epilog >"$OUT/slurm/recipe-journal.txt" 2>&1
    check "the node was never drained" '! grep -qi "drain" /var/log/slurm/slurmctld.log'
    sinfo >"$OUT/slurm/sinfo.txt" 2>&1
}
