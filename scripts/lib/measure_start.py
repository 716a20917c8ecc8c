#!/usr/bin/env python3
"""Measures static pod start latency on a running rkubelet (standalone config, read-only API on 10255).

Usage: measure_start.py MANIFEST_DIR RKUBELET_LOG [RUNS]
For each run: writes a one-container manifest, times until /pods reports it Running (polled every 5 ms), sums
the CRI call times rkubelet logged (--v=3) for that pod's RunPodSandbox/CreateContainer/StartContainer, removes
the manifest and waits until the pod is gone. Prints each run and the medians.
"""
import json
import os
import re
import statistics
import sys
import time
import urllib.request

mdir, logf = sys.argv[1], sys.argv[2]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 10
URL = "http://127.0.0.1:10255/pods"
POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
"""
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def pods():
    with urllib.request.urlopen(URL, timeout=2) as r:
        return json.load(r)["items"]


def running(name):
    for p in pods():
        if p["metadata"]["name"].startswith(name + "-"):
            cs = p["status"].get("containerStatuses", [])
            return p["status"].get("phase") == "Running" and cs and all("running" in c["state"] for c in cs)
    return False


def gone(name):
    return not any(p["metadata"]["name"].startswith(name + "-") for p in pods())


def cri_time(offset, ops=("RunPodSandbox", "CreateContainer", "StartContainer")):
    total = 0
    with open(logf, errors="replace") as f:
        f.seek(offset)
        for line in f:
            line = ANSI.sub("", line)
            if "cri call" in line:
                m = re.search(r"op=\"?(\w+)\"? elapsed_us=(\d+)", line)
                if m and m.group(1) in ops:
                    total += int(m.group(2))
    return total / 1000.0


results = []
for i in range(runs):
    name = f"lat{i}"
    offset = os.path.getsize(logf)
    tmp = os.path.join(mdir, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(POD.format(name=name))
    t0 = time.monotonic()
    os.rename(tmp, os.path.join(mdir, f"{name}.yaml"))
    while not running(name):
        time.sleep(0.005)
    e2e = (time.monotonic() - t0) * 1000
    cri = cri_time(offset)
    results.append((e2e, cri))
    print(f"run {i}: manifest->Running {e2e:.0f} ms, CRI sandbox+create+start {cri:.0f} ms, rkubelet {e2e - cri:.0f} ms")
    os.remove(os.path.join(mdir, f"{name}.yaml"))
    while not gone(name):
        time.sleep(0.05)

e2e = statistics.median(r[0] for r in results)
cri = statistics.median(r[1] for r in results)
over = statistics.median(r[0] - r[1] for r in results)
print(f"median of {runs}: manifest->Running {e2e:.0f} ms, CRI calls {cri:.0f} ms, rkubelet's own share {over:.0f} ms")
