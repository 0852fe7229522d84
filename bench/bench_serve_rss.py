#!/usr/bin/env python3
"""bench_serve_rss.py: what an idle `mzcache serve` keeps after a weight reload.

Starts real daemons (the `mzcache` binary, the real SmolLM2 model, --no-store,
--no-pressure, --no-restore-ahead, 2 threads) one after another, and per
daemon: a short request (8 tokens), POST /mz/evict {"all": true} (the
weights and KV leave memory), the same request again (it reloads every
weight block from the model file), then 1 s idle. Prints VmRSS, RssAnon and
RssFile of the daemon (/proc/PID/status) at each point and request 2's TTFT
(the reload's), medians over the daemons. No assertion: a measurement.

usage: bench/bench_serve_rss.py [--bin build/mzcache] [--reps 3] [--model PATH]
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss(pid):
    d = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile"):
                d[k] = int(v.split()[0]) / 1024.0
    return d


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.monotonic()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, (time.monotonic() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "mzcache"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    points = {}
    ttft = []
    msg = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 8,
           "temperature": 0}
    for rep in range(a.reps):
        tmp = tempfile.mkdtemp(prefix="bench-serve-rss-")
        port = free_port()
        p = subprocess.Popen([a.bin, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", str(port),
                              "--swap-dir", tmp, "--no-pressure", "--no-store", "--no-restore-ahead",
                              "-t", "2", "-c", "2048", "--temp", "0"],
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "log"), "w"))
        try:
            for _ in range(600):
                try:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                    c.request("GET", "/health")
                    if c.getresponse().status == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.1)
            points.setdefault("ready", []).append(rss(p.pid))
            post(port, "/v1/chat/completions", msg)
            time.sleep(0.5)
            points.setdefault("after request 1", []).append(rss(p.pid))
            post(port, "/mz/evict", {"all": True})
            time.sleep(0.5)
            points.setdefault("after evict all", []).append(rss(p.pid))
            _, ms = post(port, "/v1/chat/completions", msg)
            ttft.append(ms)
            time.sleep(1.0)
            points.setdefault("idle 1 s after request 2 (reload)", []).append(rss(p.pid))
        finally:
            p.terminate()
            p.wait(30)
    for k, v in points.items():
        med = {f: statistics.median(x[f] for x in v) for f in ("VmRSS", "RssAnon", "RssFile")}
        print(f"{k:36s} VmRSS {med['VmRSS']:7.1f} MiB  RssAnon {med['RssAnon']:7.1f} MiB  "
              f"RssFile {med['RssFile']:5.1f} MiB  (median of {len(v)})")
    print(f"request 2 (reload + 8 tokens) {statistics.median(ttft):.0f} ms (median of {len(ttft)})")


if __name__ == "__main__":
    main()
