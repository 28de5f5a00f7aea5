#!/usr/bin/env python3
"""Parses deploy/k8s/*.yaml (PyYAML) and checks the keys a capture needs: privileged, hostPID, the
tracefs and output hostPaths, tolerations for every node, resources, and ringcap's flags (rotation
with a file cap in the DaemonSet, --duration and --json in the Job). Exit 77 without python3-yaml."""
import sys

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml not installed (apt-get install python3-yaml; scripts/bootstrap --tests does)")
    sys.exit(77)

d = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def pod_checks(name, pod, need):
    check(pod.get("hostPID") is True, f"{name}: hostPID: true")
    check(any(t.get("operator") == "Exists" and "key" not in t for t in pod.get("tolerations", [])),
          f"{name}: a toleration of every taint")
    c = pod["containers"][0]
    check(c.get("securityContext", {}).get("privileged") is True, f"{name}: privileged")
    check("limits" in c.get("resources", {}) and "requests" in c.get("resources", {}), f"{name}: resources")
    check("image" in c, f"{name}: image")
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    paths = {v.get("hostPath", {}).get("path") for v in vols.values()}
    check("/sys/kernel/tracing" in paths, f"{name}: tracefs hostPath")
    check("/var/lib/ringcap" in paths, f"{name}: output hostPath /var/lib/ringcap")
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    check(set(mounts) <= set(vols), f"{name}: every volumeMount has a volume")
    check("/sys/kernel/tracing" in mounts.values() and "/var/lib/ringcap" in mounts.values(), f"{name}: mounts")
    cmd = " ".join(c.get("command", []) + c.get("args", []))
    check("ringcap record -a " in cmd, f"{name}: runs ringcap record -a")
    for flag in need:
        check(flag in cmd, f"{name}: {flag} in the command")
    return cmd


docs = {}
for f in ("daemonset.yaml", "job.yaml"):
    with open(f"{d}/{f}") as fh:
        for doc in yaml.safe_load_all(fh):
            check(isinstance(doc, dict) and {"apiVersion", "kind", "metadata"} <= set(doc), f"{f}: a Kubernetes object")
            docs[doc["kind"]] = doc
            print(f"{f}: {doc['apiVersion']} {doc['kind']} {doc['metadata']['name']}")

ds, job = docs.get("DaemonSet"), docs.get("Job")
check(ds is not None and job is not None and "Namespace" in docs, "a Namespace, a DaemonSet and a Job")
if ds:
    check(ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items(),
          "DaemonSet: selector matches the template's labels")
    print("DaemonSet:", pod_checks("DaemonSet", ds["spec"]["template"]["spec"],
                                   ["--switch-output=5m", "--switch-max-files=12", "-o /var/lib/ringcap/", "--json "]))
if job:
    pod = job["spec"]["template"]["spec"]
    check(pod.get("restartPolicy") == "Never", "Job: restartPolicy Never")
    print("Job:", pod_checks("Job", pod, ["--duration ", "--json /var/lib/ringcap/", "-o /var/lib/ringcap/"]))

for f in failures:
    print("FAIL:", f)
print("OK" if not failures else f"{len(failures)} failed")
sys.exit(1 if failures else 0)
