#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2034,SC2317  # check() and wait_for() eval their single-quoted conditions
# The Slurm prolog and epilog with a stand-in for ringcap (a small C program that records its
# arguments and, on SIGINT, writes the --json file and exits): the cgroup path the prolog derives
# (and RINGCAP_JOB_CGROUP overriding it), the wait for the job's cgroup to appear, the pid file,
# the output names, the epilog's SIGINT and its bounded wait (SIGKILL for a capture that ignores
# SIGINT), that the epilog signals only the prolog's own process (pid and start time, and what it
# runs: not a process that reused the pid), and that both always exit 0.
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
    if (f) fputs("{\"version\": 1, \"exit_code\": 0, \"stop_reason\": \"SIGINT\"}\n", f), fclose(f);
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
    snprintf(path, sizeof path, "%s/stub.pid", out);
    FILE* p = fopen(path, "w");
    fprintf(p, "%d", (int)getpid());
    fclose(p);
    signal(SIGINT, getenv("STUB_IGNORE_INT") ? SIG_IGN : stop);
    for (;;) pause();
}
C
cc -o "$tmp/ringcap" "$tmp/stub.c" || { echo "FAIL: cannot build the stand-in"; exit 1; }
export STUB_DIR="$tmp" RINGCAP="$tmp/ringcap" RINGCAP_DIR="$tmp/out" RINGCAP_CGROUP_MOUNT="$tmp/cg"
wait_for() { local i; for i in $(seq 100); do eval "$1" && return 0; sleep 0.1; done; return 1; }

# 1. The job's cgroup appears a second after the prolog (as when slurmstepd creates it later).
SLURM_JOB_ID=42 RINGCAP_CGROUP_WAIT=10 "$prolog"; rc=$?
check "prolog exits 0" '[ "$rc" -eq 0 ]'
check "pid file written" '[ -s "$tmp/out/job-42.pid" ]'
sleep 1
check "no capture before the cgroup exists" '[ ! -f "$tmp/args" ]'
mkdir -p "$tmp/cg/system.slice/slurmstepd.scope/job_42"
wait_for '[ -f "$tmp/args" ]'
args=$(tr '\n' ' ' <"$tmp/args" 2>/dev/null)
echo "ringcap $args"
check "ringcap record -a -G <Slurm's cgroup/v2 job path>" '[[ "$args" == "record -a -G system.slice/slurmstepd.scope/job_42 -F 999 -g "* ]]'
check "-o job-42.data --json job-42.json -q" '[[ "$args" == *" -o $tmp/out/job-42.data --json $tmp/out/job-42.json -q " ]]'
check "the pid file names the capture (the shell exec'd it)" '[ "$(cut -d" " -f1 "$tmp/out/job-42.pid")" = "$(cat "$tmp/stub.pid")" ]'
check "and its start time" '[ "$(cut -d" " -f2 "$tmp/out/job-42.pid")" = "$(cut -d")" -f2- "/proc/$(cat "$tmp/stub.pid")/stat" | cut -d" " -f21)" ]'
SLURM_JOB_ID=42 "$epilog"; rc=$?
check "epilog exits 0" '[ "$rc" -eq 0 ]'
check "capture stopped by the epilog" '! kill -0 "$(cat "$tmp/stub.pid")" 2>/dev/null'
check "JSON summary left" 'grep -q SIGINT "$tmp/out/job-42.json"'
check "pid file removed" '[ ! -e "$tmp/out/job-42.pid" ]'
rm -f "$tmp/args" "$tmp/stub.pid"

# 2. RINGCAP_JOB_CGROUP overrides the path; a capture that ignores SIGINT is killed after RINGCAP_STOP_WAIT.
mkdir -p "$tmp/cg/custom/job7"
SLURM_JOB_ID=7 RINGCAP_JOB_CGROUP=custom/job7 RINGCAP_OPTS="-F 99" STUB_IGNORE_INT=1 "$prolog"
wait_for '[ -f "$tmp/args" ]'
check "RINGCAP_JOB_CGROUP and RINGCAP_OPTS" 'grep -qx custom/job7 "$tmp/args" && [ "$(sed -n 5,6p "$tmp/args" | tr "\n" " ")" = "-F 99 " ]'
start=$(date +%s%N)
SLURM_JOB_ID=7 RINGCAP_STOP_WAIT=1 "$epilog"; rc=$?
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "epilog took $took_ms ms"
check "the epilog's wait is bounded (RINGCAP_STOP_WAIT=1)" '[ "$took_ms" -lt 5000 ]'
check "epilog exits 0 after SIGKILL" '[ "$rc" -eq 0 ]'
check "capture that ignored SIGINT is gone" 'wait_for "! kill -0 $(cat "$tmp/stub.pid") 2>/dev/null"'
rm -f "$tmp/args" "$tmp/stub.pid"

# 3. The cgroup never appears: no capture, the prolog still exits 0, the epilog has nothing to stop.
SLURM_JOB_ID=9 RINGCAP_CGROUP_WAIT=1 "$prolog"; rc=$?
check "prolog exits 0 (cgroup missing)" '[ "$rc" -eq 0 ]'
sleep 2.5
check "no capture without the cgroup; the reason in the log" '[ ! -f "$tmp/args" ] && grep -q "did not appear" "$tmp/out/job-9.log"'
SLURM_JOB_ID=9 "$epilog"; rc=$?
check "epilog exits 0 with nothing to stop" '[ "$rc" -eq 0 ]'

# 4. No or a bad SLURM_JOB_ID: nothing started, exit 0.
SLURM_JOB_ID='1;x' "$prolog"; rc=$?
check "bad SLURM_JOB_ID: exit 0, nothing started" '[ "$rc" -eq 0 ] && [ ! -e "$tmp/out/job-1;x.pid" ]'

# 5. The pid file names a process that is not the capture (its pid reused since): never signalled,
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

[ "$fail" -eq 0 ] && echo "OK"
exit "$fail"
