#!/usr/bin/env python3
"""Reads rkubelet's read-only API (/pods) and prints the pods like `kubectl get pods -o wide`.

Usage: pods.py [--wait-running SECONDS] [URL]   (default URL http://127.0.0.1:10255/pods)
With --wait-running it first waits until every pod is Running (exit 1 on timeout).
"""
import json
import sys
import time
import urllib.request

args = sys.argv[1:]
wait = 0.0
if args and args[0] == "--wait-running":
    wait = float(args[1])
    args = args[2:]
url = args[0] if args else "http://127.0.0.1:10255/pods"


def fetch():
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.load(r)["items"]
    except Exception:
        return None


deadline = time.time() + wait
pods = fetch()
while wait and not (pods and all(p["status"].get("phase") == "Running" for p in pods)):
    if time.time() > deadline:
        print("timed out waiting for the pods to run", file=sys.stderr)
        sys.exit(1)
    time.sleep(0.2)
    pods = fetch()

print(f"{'NAMESPACE':<10} {'NAME':<30} {'READY':<6} {'STATUS':<10} {'RESTARTS':<9} IP")
for p in pods or []:
    st = p.get("status", {})
    cs = st.get("containerStatuses", [])
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(c.get("restartCount", 0) for c in cs)
    print(f"{p['metadata']['namespace']:<10} {p['metadata']['name']:<30} {ready}/{len(cs):<4} "
          f"{st.get('phase', ''):<10} {restarts:<9} {st.get('podIP', '')}")
