#!/usr/bin/env python3
"""Prefill/decode throughput of mzcache vs llama.cpp on the same GGUF files.

Runs build/bench_throughput (ours) and llama-cpp-python (the peer) in the same
session, same thread count, same token counts, medians of --reps runs, and
prints a markdown table with ratios ours/theirs (> 1: we are faster).

usage: python3 bench/bench_throughput.py [--threads 2] [--reps 5] [--models a.gguf b.gguf]
The peer is installed by scripts/install-peer.sh (called from `make bench`).
"""
import argparse
import datetime
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ours(binary, model, threads, n_prompt, n_gen):
    """One measured run (after the program's own warm-up run)."""
    out = subprocess.run([binary, "-m", model, "-t", str(threads), "-p", str(n_prompt),
                          "-n", str(n_gen), "-r", "1"], check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r"median pp\d+=([\d.]+) tg\d+=([\d.]+)", out)
    return float(m.group(1)), float(m.group(2))


class Peer:
    def __init__(self, model, threads, n_prompt, n_gen):
        from llama_cpp import Llama
        self.llm = Llama(model_path=model, n_ctx=n_prompt + n_gen + 16, n_batch=512,
                         n_threads=threads, n_threads_batch=threads, logits_all=False,
                         verbose=False)
        rng = random.Random(42)
        self.toks = [rng.randrange(self.llm.n_vocab()) for _ in range(n_prompt)]
        self.n_prompt, self.n_gen = n_prompt, n_gen
        self.run()  # warm-up

    def run(self):
        llm, toks, n_prompt, n_gen = self.llm, self.toks, self.n_prompt, self.n_gen
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(toks)
        t1 = time.perf_counter()
        llm.reset()
        t2 = time.perf_counter()
        for i in range(n_gen):
            llm.eval([toks[i % n_prompt]])
        t3 = time.perf_counter()
        return n_prompt / (t1 - t0), n_gen / (t3 - t2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bench_throughput"))
    ap.add_argument("--models", nargs="+",
                    default=[os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")])
    a = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# throughput, {datetime.date.today()}, {cpu}, {a.threads} threads, median of {a.reps}\n")
    print(f"| model | ours pp{a.prompt} tok/s | llama.cpp pp{a.prompt} | ratio | ours tg{a.gen} tok/s | llama.cpp tg{a.gen} | ratio |")
    print("|---|---|---|---|---|---|---|")
    for model in a.models:
        # Alternate ours and theirs run by run, so load from other programs on
        # this shared machine falls on both sides alike.
        peer = Peer(model, a.threads, a.prompt, a.gen)
        o, t = [], []
        for _ in range(a.reps):
            o.append(ours(a.binary, model, a.threads, a.prompt, a.gen))
            t.append(peer.run())
        del peer
        opp, otg = statistics.median(x[0] for x in o), statistics.median(x[1] for x in o)
        tpp, ttg = statistics.median(x[0] for x in t), statistics.median(x[1] for x in t)
        print(f"| {os.path.basename(model)} | {opp:.1f} | {tpp:.1f} | {opp / tpp:.2f} | {otg:.1f} | {ttg:.1f} | {otg / ttg:.2f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
