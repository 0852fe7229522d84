#!/usr/bin/env python3
"""bench_serve_switch.py: two clients alternating on one `mzcache serve`.

What a new user saw before sessions (issue 16): two conversations sharing one
daemon re-prefilled their whole history at every switch. This starts a real
daemon (the `mzcache` binary, the real model) once with --max-sessions 1 (one
conversation: the behaviour before sessions) and once with the default 4, and
runs the same workload: clients A and B, each with its own long system prompt
(the notes it talks about), alternate ROUNDS turns, greedy, MAX_TOKENS tokens
per answer, as unmodified OpenAI clients (no session id: prefix routing).
Prints per request: prompt tokens, cached tokens, computed tokens, TTFT.

usage: bench/bench_serve_switch.py [--bin build/mzcache] [--rounds 3] [--max-tokens 16]
       [--budget SIZE]   (also run with --mem-budget SIZE and 4 sessions)
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def start(binary, tmp, tag, extra):
    port_file = os.path.join(tmp, tag + ".port")
    log = open(os.path.join(tmp, tag + ".log"), "w")
    p = subprocess.Popen([binary, "serve", "-m", MODEL, "--port", "0", "--port-file", port_file,
                          "--swap-dir", os.path.join(tmp, tag + "-swap"), "--no-pressure", "-t", "2",
                          "-c", "4096", "--temp", "0", *extra], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with open(port_file) as f:
                port = int(f.read().strip())
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p, port
        except (OSError, ValueError):
            time.sleep(0.05)
    p.kill()
    sys.exit("daemon did not start")


def chat(port, messages, max_tokens):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body=json.dumps(
        {"messages": messages, "max_tokens": max_tokens, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"})
    j = json.loads(c.getresponse().read())
    return j


def run(binary, tmp, tag, extra, rounds, max_tokens):
    p, port = start(binary, tmp, tag, extra)
    notes = {
        "A": "Notes about a garden. " + "The garden has tomatoes, beans, basil, mint and two apple trees. " * 30,
        "B": "Notes about a workshop. " + "The workshop has a lathe, two saws, a drill press and a workbench. " * 30,
    }
    qs = {"A": ["Which plants are herbs?", "Which are fruit?", "What grows on trees?"],
          "B": ["Which tools cut?", "Which one drills?", "Where do you assemble things?"]}
    conv = {k: [{"role": "system", "content": v}] for k, v in notes.items()}
    rows = []
    for r in range(rounds):
        for k in ("A", "B"):
            conv[k].append({"role": "user", "content": qs[k][r % len(qs[k])]})
            j = chat(port, conv[k], max_tokens)
            conv[k].append({"role": "assistant", "content": j["choices"][0]["message"]["content"]})
            u, t = j["usage"], j["timings"]
            rows.append((r + 1, k, u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], t["prompt_n"],
                         t["ttft_ms"]))
    st = json.loads(http_get(port, "/mz/sessions"))
    p.terminate()
    p.wait(60)
    return rows, st["budget"]


def http_get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    return c.getresponse().read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "mzcache"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--budget", default=None)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-switch-")
    configs = [("one conversation (--max-sessions 1)", ["--max-sessions", "1"]),
               ("sessions (--max-sessions 4)", ["--max-sessions", "4"])]
    if a.budget:
        configs.append((f"sessions + --mem-budget {a.budget}", ["--max-sessions", "4", "--mem-budget", a.budget]))
    for name, extra in configs:
        rows, budget = run(a.bin, tmp, name.split()[0], extra, a.rounds, a.max_tokens)
        print(f"\n{name}")
        print("round client prompt cached computed  TTFT ms")
        for r in rows:
            print(f"{r[0]:5d} {r[1]:>6} {r[2]:6d} {r[3]:6d} {r[4]:8d} {r[5]:8.1f}")
        later = [r[5] for r in rows if r[0] > 1]
        print(f"median TTFT after the first round: {statistics.median(later):.1f} ms; "
              f"footprint {budget['footprint_bytes'] / 1048576:.1f} MiB, "
              f"budget evictions {budget['budget_evictions']}")


if __name__ == "__main__":
    main()
