#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2034,SC2317  # check() and wait_for() eval their single-quoted conditions
# The Slurm prolog and epilog with a stand-in for ringcap (a small C program that records its
# arguments, says "events enabled" as ringcap -v does, and on SIGINT writes the --json file and
# exits): the job's cgroup the prolog makes where Slurm's cgroup/v2 plugin puts the job (and
# RINGCAP_JOB_CGROUP overriding it), that the prolog returns only once the capture records (or has
# failed, or RINGCAP_START_WAIT passed), the pid file, the output names, the epilog's SIGINT and its
# bounded wait (SIGKILL for a capture that ignores SIGINT), the "slurm" object it adds to the JSON,
# that the epilog signals only the prolog's own process (pid and start time, and what it runs: not
# a process that reused the pid; a capture whose binary a package upgrade replaced still is), and
# that both always exit 0. (tests/guest/ runs them under a
# real slurmd.)
set -u
src="$1"
prolog="$src/deploy/slurm/prolog.sh" epilog="$src/deploy/slurm/epilog.sh"
tmp=$(mktemp -d)
cleanup() { [ -f "$tmp/stub.pid" ] && kill -KILL "$(cat "$tmp/stub.pid")" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

# A compiled stand-in, so that /proc/PID/exe names it as it names ringcap (the epilog checks that).
command -v cc >/dev/null || { echo "SKIPPED: no C compiler (cc) for the stand-in ringcap"; exit 77; }
cat >"$tmp/stub.c" <<'C'
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static const char* json;
static void stop(int sig) {
    (void)sig;
    FILE* f = fopen(json, "w");
    if (f) fputs("{\"version\": 2, \"exit_code\": 0, \"stop_reason\": \"SIGINT\"}\n", f), fclose(f);
    _exit(0);
}
int main(int argc, char** argv) {
    const char* out = getenv("STUB_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/args", out);
    FILE* a = fopen(path, "w");
    for (int i = 1; i < argc; ++i) {
        fprintf(a, "%s\n", argv[i]);
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[i + 1];
    }
    fclose(a);
    if (getenv("STUB_REFUSED")) {  /* as ringcap when the kernel refuses: the reason, exit 2 */
        fputs("ringcap: -F 999 is above kernel.perf_event_max_sample_rate=500\n", stderr);
        return 2;
    }
    snprintf(path, sizeof path, "%s/stub.pid", out);
    FILE* p = fopen(path, "w");
    fprintf(p, "%d", (int)getpid());
    fclose(p);
    signal(SIGINT, getenv("STUB_IGNORE_INT") ? SIG_IGN : stop);
    if (!getenv("STUB_SILENT")) fputs("ringcap: events enabled in 0.1 ms\n", stderr);
    for (;;) pause();
}
C
cc -o "$tmp/ringcap" "$tmp/stub.c" || { echo "FAIL: cannot build the stand-in"; exit 1; }
export STUB_DIR="$tmp" RINGCAP="$tmp/ringcap" RINGCAP_DIR="$tmp/out" RINGCAP_CGROUP_MOUNT="$tmp/cg"
wait_for() { local i; for i in $(seq 100); do eval "$1" && return 0; sleep 0.1; done; return 1; }

scope="$tmp/cg/system.slice/slurmstepd.scope"
mkdir -p "$scope"
export RINGCAP_ASK_SLURM=0  # no squeue here

# 1. The prolog makes the job's cgroup and returns once the capture records.
SLURM_JOB_ID=42 "$prolog"; rc=$?
check "prolog exits 0" '[ "$rc" -eq 0 ]'
check "the job's cgroup made where Slurm puts it" '[ -d "$scope/job_42" ]'
check "the capture records when the prolog returns" '[ -f "$tmp/args" ] && grep -q "events enabled" "$tmp/out/job-42.log"'
args=$(tr '\n' ' ' <"$tmp/args" 2>/dev/null)
echo "ringcap $args"
check "ringcap record -a -G <Slurm's cgroup/v2 job path>" '[[ "$args" == "record -a -G system.slice/slurmstepd.scope/job_42 -F 999 -g "* ]]'
check "-o job-42.data --json job-42.json -v" '[[ "$args" == *" -o $tmp/out/job-42.data --json $tmp/out/job-42.json -v " ]]'
check "the pid file names the capture" '[ "$(cut -d" " -f1 "$tmp/out/job-42.pid")" = "$(cat "$tmp/stub.pid")" ]'
check "and its start time" '[ "$(cut -d" " -f2 "$tmp/out/job-42.pid")" = "$(cut -d")" -f2- "/proc/$(cat "$tmp/stub.pid")/stat" | cut -d" " -f21)" ]'
check "files 0600 in a 0700 directory" '[ "$(stat -c %a "$tmp/out")" = 700 ] && [ "$(stat -c %a "$tmp/out/job-42.pid")" = 600 ]'
SLURM_JOB_ID=42 SLURM_JOB_EXIT_CODE2=3:0 "$epilog"; rc=$?
check "epilog exits 0" '[ "$rc" -eq 0 ]'
check "capture stopped by the epilog" '! kill -0 "$(cat "$tmp/stub.pid")" 2>/dev/null'
json=$(cat "$tmp/out/job-42.json" 2>/dev/null)
echo "$json"
check "JSON: ringcap's, with the slurm object" \
    '[ "$json" = "{\"version\": 2, \"exit_code\": 0, \"stop_reason\": \"SIGINT\", \"slurm\": {\"job_id\": 42, \"exit_code\": \"3:0\", \"reason\": null, \"capture\": \"stopped by the epilog\"}}" ]'
check "pid file removed" '[ ! -e "$tmp/out/job-42.pid" ]'
rm -f "$tmp/args" "$tmp/stub.pid"

# 2. slurmd built with --enable-multiple-slurmd: <node>_slurmstepd.scope.
mkdir -p "$tmp/cg/system.slice/n1_slurmstepd.scope"
SLURM_JOB_ID=43 SLURMD_NODENAME=n1 "$prolog"
check "SLURMD_NODENAME's scope" 'grep -qx system.slice/n1_slurmstepd.scope/job_43 "$tmp/args"'
SLURM_JOB_ID=43 "$epilog"
rm -f "$tmp/args" "$tmp/stub.pid"

# 3. RINGCAP_JOB_CGROUP overrides the path; a capture that ignores SIGINT is killed after
#    RINGCAP_STOP_WAIT, and the JSON is the epilog's.
mkdir -p "$tmp/cg/custom"
SLURM_JOB_ID=7 RINGCAP_JOB_CGROUP=custom/job7 RINGCAP_OPTS="-F 99" STUB_IGNORE_INT=1 "$prolog"
check "RINGCAP_JOB_CGROUP and RINGCAP_OPTS" 'grep -qx custom/job7 "$tmp/args" && [ -d "$tmp/cg/custom/job7" ] && [ "$(sed -n 5,6p "$tmp/args" | tr "\n" " ")" = "-F 99 " ]'
SLURM_JOB_ID=7 RINGCAP_STOP_WAIT=1 "$epilog"; rc=$?
check "epilog exits 0 after SIGKILL" '[ "$rc" -eq 0 ]'
check "capture that ignored SIGINT is gone" 'wait_for "! kill -0 $(cat "$tmp/stub.pid") 2>/dev/null"'
check "the epilog's JSON says it killed it" 'grep -q "\"capture\": \"killed by the epilog 1 s after SIGINT\"" "$tmp/out/job-7.json"'
rm -f "$tmp/args" "$tmp/stub.pid"

# 4. Refused at start: the prolog returns at once (not after RINGCAP_START_WAIT), no pid file;
#    a capture that never says it records: the prolog gives up waiting, the capture goes on.
SLURM_JOB_ID=8 STUB_REFUSED=1 RINGCAP_START_WAIT=600 timeout 60 "$prolog"; rc=$?
check "refused: prolog exits 0 without waiting" '[ "$rc" -eq 0 ] && [ ! -e "$tmp/out/job-8.pid" ]'
check "refused: the reason in the log" 'grep -q perf_event_max_sample_rate "$tmp/out/job-8.log"'
echo '{"version":2,"exit_code":2,"stop_reason":null,"error":"-F 999 is above"}' >"$tmp/out/job-8.json"  # as ringcap leaves it
SLURM_JOB_ID=8 SLURM_JOB_EXIT_CODE2=0:0 "$epilog"; rc=$?
check "epilog exits 0 with nothing to stop" '[ "$rc" -eq 0 ]'
check "the JSON says the capture did not start" 'grep -q "\"capture\": \"did not start\"" "$tmp/out/job-8.json"'
rm -f "$tmp/args"
SLURM_JOB_ID=10 STUB_SILENT=1 RINGCAP_START_WAIT=1 "$prolog"; rc=$?
check "silent capture: prolog exits 0, the capture left running" '[ "$rc" -eq 0 ] && [ -s "$tmp/out/job-10.pid" ] && kill -0 "$(cat "$tmp/stub.pid")"'
SLURM_JOB_ID=10 "$epilog"
check "and stopped by the epilog" '! kill -0 "$(cat "$tmp/stub.pid")" 2>/dev/null'
rm -f "$tmp/args" "$tmp/stub.pid"

# 5. No slurmstepd scope (slurmd not on cgroup/v2 with proctrack/cgroup): no capture, no cgroup made.
SLURM_JOB_ID=9 RINGCAP_STEPD_SCOPE=missing.scope "$prolog"; rc=$?
check "prolog exits 0 (no scope)" '[ "$rc" -eq 0 ]'
check "no capture, nothing made" '[ ! -f "$tmp/args" ] && [ ! -e "$tmp/cg/system.slice/missing.scope" ] && [ ! -e "$tmp/out/job-9.pid" ]'

# 4. No or a bad SLURM_JOB_ID: nothing started, exit 0.
SLURM_JOB_ID='1;x' "$prolog"; rc=$?
check "bad SLURM_JOB_ID: exit 0, nothing started" '[ "$rc" -eq 0 ] && [ ! -e "$tmp/out/job-1;x.pid" ]'

# 6. The pid file names a process that is not the capture (its pid reused since): never signalled,
#    whatever its command line says; a pid file naming no process is removed.
mkdir -p "$tmp/out"
bash -c 'exec -a ringcap sleep 30' & other=$!
wait_for '[ "$(readlink /proc/$other/exe)" != "$(readlink -f "$(command -v bash)")" ]'
real_start=$(cut -d")" -f2- "/proc/$other/stat" | cut -d" " -f21)
echo "$other $((real_start + 1))" >"$tmp/out/job-50.pid"
SLURM_JOB_ID=50 "$epilog"; rc=$?
check "epilog exits 0 (pid reused)" '[ "$rc" -eq 0 ]'
check "another process with the pid (start time differs) is not signalled" 'kill -0 "$other" 2>/dev/null'
check "its stale pid file is removed" '[ ! -e "$tmp/out/job-50.pid" ]'
echo "$other $real_start" >"$tmp/out/job-51.pid"
SLURM_JOB_ID=51 "$epilog"
check "the same process, running something else than ringcap, is not signalled" 'kill -0 "$other" 2>/dev/null'
kill "$other"; wait "$other" 2>/dev/null
echo "$other $real_start" >"$tmp/out/job-52.pid"
SLURM_JOB_ID=52 "$epilog"; rc=$?
check "a pid file naming no process: exit 0, removed" '[ "$rc" -eq 0 ] && [ ! -e "$tmp/out/job-52.pid" ]'

# 7. The package upgraded while the job runs (dpkg renames the new binary over the old one): the
#    capture's /proc/PID/exe reads "PATH (deleted)", and the epilog still stops it; a deleted binary
#    of another path is still not ringcap.
cp "$tmp/ringcap" "$tmp/ringcap-up"
RINGCAP="$tmp/ringcap-up" SLURM_JOB_ID=60 "$prolog"
check "upgrade: the capture runs" 'kill -0 "$(cat "$tmp/stub.pid")"'
cp "$tmp/ringcap" "$tmp/ringcap-up.new" && mv -f "$tmp/ringcap-up.new" "$tmp/ringcap-up"
check "upgrade: its exe reads (deleted)" '[ "$(readlink "/proc/$(cat "$tmp/stub.pid")/exe")" = "$tmp/ringcap-up (deleted)" ]'
cp "$tmp/out/job-60.pid" "$tmp/job-60.pid"  # the epilog removes it whatever it finds
RINGCAP="$tmp/ringcap-other" SLURM_JOB_ID=60 "$epilog"
check "upgrade: a deleted binary of another path is not signalled" 'kill -0 "$(cat "$tmp/stub.pid")"'
cp "$tmp/job-60.pid" "$tmp/out/job-60.pid"
RINGCAP="$tmp/ringcap-up" SLURM_JOB_ID=60 "$epilog"; rc=$?
check "upgrade: epilog exits 0" '[ "$rc" -eq 0 ]'
check "upgrade: the capture is stopped by the epilog" '! kill -0 "$(cat "$tmp/stub.pid")" 2>/dev/null'
check "upgrade: the JSON says so" 'grep -q "\"capture\": \"stopped by the epilog\"" "$tmp/out/job-60.json"'

[ "$fail" -eq 0 ] && echo "OK"
exit "$fail"
