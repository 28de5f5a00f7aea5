#!/usr/bin/env python3
"""The host's checks of what the guest test brought back (tests/guest/run.sh calls it with the
results directory): every capture read with the host's perf, against the JSON summaries and
against what the guest knew of each job. Also counts the guest's own checks (checks.txt).
Prints ok/FAIL lines and "N passed, N failed"; exits 1 on any failure."""
import collections
import json
import os
import re
import subprocess
import sys

out = sys.argv[1]
results = []


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(("ok: " if cond else "FAIL: ") + name + (f" ({detail})" if detail and not cond else ""))


def perf(*args):
    r = subprocess.run(["perf", *args], capture_output=True, text=True)
    return r.returncode, r.stdout


def perf_samples(path):
    """SAMPLE events that perf report --stats counts, or None if perf cannot read the file."""
    rc, text = perf("report", "-i", path, "--stats")
    if rc != 0:
        return None
    m = re.search(r"SAMPLE events:\s+(\d+)", text)
    return int(m.group(1)) if m else 0


def samples_by(path):
    """(pid, comm) -> samples, from perf script."""
    _, text = perf("script", "-i", path, "-F", "comm,pid")
    c = collections.Counter()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-1].isdigit():
            c[(int(parts[-1]), " ".join(parts[:-1]))] += 1
    return c


def execs(path):
    """comm -> [(time, pid)] of the exec records (PERF_RECORD_COMM exec) and samples' first times."""
    _, text = perf("script", "-i", path, "-F", "comm,pid,time", "--show-task-events")
    ex, first = collections.defaultdict(list), {}
    for line in text.splitlines():
        m = re.match(r"\s*(.+?)\s+(\d+)\s+([\d.]+):\s*(.*)$", line)
        if not m:
            continue
        comm, pid, t, rest = m.group(1), int(m.group(2)), float(m.group(3)), m.group(4)
        if rest.startswith("PERF_RECORD_COMM exec"):
            ex[comm].append((t, pid))
        elif not rest.startswith("PERF_RECORD"):
            first.setdefault(comm, t)
    return ex, first


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


facts = {}
with open(os.path.join(out, "facts.txt")) as f:
    for line in f:
        k, _, v = line.rstrip("\n").partition("=")
        facts[k] = v

# The guest's own checks.
with open(os.path.join(out, "checks.txt")) as f:
    guest = f.read().splitlines()
failed = [line for line in guest if line.startswith("FAIL")]
check(f"the guest's {len(guest)} checks passed", guest and not failed, "; ".join(failed))

sl = os.path.join(out, "slurm")
workload = {"known": {"job-first", "job-main"}, "seq-a": {"job-a"}, "seq-b": {"job-b"},
            "par-c": {"job-c"}, "par-d": {"job-d"}, "fail": {"job-main"}, "cancel": {"job-main"},
            "timelimit": {"job-main"}}
others = {"job-first", "job-main", "job-a", "job-b", "job-c", "job-d", "outside-spin", "ringcap",
          "slurmd", "slurmctld", "systemd", "munged", "systemd-journal"}
why = {"known": ("COMPLETED", "0:0", "None"), "fail": ("FAILED", "3:0", "NonZeroExitCode"),
       "cancel": ("CANCELLED", "0:15", "None"), "timelimit": ("TIMEOUT", "0:15", "TimeLimit")}
pids = {}
for name, comms in workload.items():
    data, js = os.path.join(sl, name + ".data"), load_json(os.path.join(sl, name + ".json"))
    job = facts.get("job_" + name, "?")
    if not os.path.exists(data):
        check(f"{name} (job {job}): a capture file", False, "none")
        continue
    n = perf_samples(data)
    check(f"{name}: perf reads job-{job}.data", n is not None)
    check(f"{name}: JSON job-{job}.json, exit_code 0, stopped by SIGINT",
          js and js.get("exit_code") == 0 and js.get("stop_reason") == "SIGINT", js)
    check(f"{name}: perf report --stats counts the JSON's samples ({n})", js and js.get("samples") == n,
          f"JSON {js and js.get('samples')}")
    s = samples_by(data)
    seen = {c for (_, c) in s}
    pids[name] = {p for (p, _) in s}
    check(f"{name}: samples of its workload {sorted(comms)}", comms <= seen, f"comms {sorted(seen)}")
    check(f"{name}: no samples of other processes {sorted(others - comms)}", not (seen & (others - comms)),
          f"comms {sorted(seen)}")
    sj = (js or {}).get("slurm") or {}
    check(f"{name}: the JSON's slurm object names job {job}", str(sj.get("job_id")) == job, sj)
    if name in why:
        state, code, reason = why[name]
        check(f"{name}: Slurm says {state}", facts.get("state_" + name) == state, facts.get("state_" + name))
        check(f"{name}: the JSON says why: exit code {code}, reason {reason}",
              sj.get("exit_code") == code and sj.get("reason") == reason, sj)
    if name == "known":
        ex, first = execs(data)
        check("known: the job's first task's exec (slurm_script) is in the file: the capture started before it",
              "slurm_script" in ex, sorted(ex))
        t_exec = min((t for t, _ in ex.get("job-first", [])), default=None)
        t_first = first.get("job-first")
        check("known: job-first (the job's first second) sampled from its exec on",
              t_exec is not None and t_first is not None and t_first - t_exec < 1.0,
              f"exec {t_exec}, first sample {t_first}")
names = sorted(pids)
for i, a in enumerate(names):
    for b in names[i + 1:]:
        check(f"files of {a} and {b} share no process", not (pids[a] & pids[b]), sorted(pids[a] & pids[b]))

for name in ("missing", "refused"):
    check(f"{name}: the job ran ({facts.get('state_' + name)}), without a capture file",
          facts.get("state_" + name) == "COMPLETED" and not os.path.exists(os.path.join(sl, name + ".data")))
js = load_json(os.path.join(sl, "refused.json"))
check("refused: its JSON has exit_code 2, the reason, and the epilog's \"did not start\"",
      js and js.get("exit_code") == 2 and "perf_event_max_sample_rate" in str(js.get("error"))
      and (js.get("slurm") or {}).get("capture") == "did not start", js)

sd = os.path.join(out, "systemd")
js = load_json(os.path.join(sd, "last.json"))
check("systemd: last.json exit_code 0, stopped by SIGINT", js and js.get("exit_code") == 0 and js.get("stop_reason") == "SIGINT", js)
files = [os.path.join(sd, os.path.basename(p)) for p in (js or {}).get("files", [])]
check("systemd: last.json lists 2 files, perf.data.<16 digits>, both on disk",
      len(files) == 2 and all(re.fullmatch(r"perf\.data\.\d{16}", os.path.basename(p)) and os.path.exists(p) for p in files),
      (js or {}).get("files"))
counts = [perf_samples(p) for p in files if os.path.exists(p)]
check(f"systemd: perf reads each file, and their samples {counts} add up to the JSON's",
      counts and None not in counts and sum(counts) == js.get("samples"), js and js.get("samples"))
seen = set()
for p in files:
    if os.path.exists(p):
        seen |= {c for (_, c) in samples_by(p)}
check("systemd: a system-wide capture (the busy loop outside the jobs sampled)", "outside-spin" in seen, sorted(seen))
for p in files[:1]:
    _, text = perf("report", "-i", p, "--stdio", "-q", "--sort", "dso")
    check("systemd: kernel samples in [kernel.kallsyms] (the unit keeps CAP_SYSLOG: real addresses in /proc/kallsyms)",
          "[kernel.kallsyms]" in text, text[:300])
js = load_json(os.path.join(sd, "failed.json"))
check("systemd: the refused run's JSON: exit_code 2, the reason names CAP_SYS_ADMIN",
      js and js.get("exit_code") == 2 and "CAP_SYS_ADMIN" in str(js.get("error")), js)

passed = sum(results)
print(f"guest: {passed} passed, {len(results) - passed} failed")
sys.exit(0 if passed == len(results) else 1)
