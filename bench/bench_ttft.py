#!/usr/bin/env python3
"""TTFT of a short query over a long cached context: mzcache vs llama.cpp.

Both sides get a SYNTHETIC context of N positions — deterministic random F16
K/V — instead of a real prefill (recomputing 32k tokens takes hours on two
cores): ours writes it straight into the KV chunks (build/bench_ttft), and
llama.cpp loads a state of exactly the layout and size its own
llama_state_get_data produces (llama_state_set_data), built here from a small
real state's header. Attention cost does not depend on the values, so the
8-token query does the same work on both sides. TTFT = wall time to evaluate
the query and produce its last logits, warm (after one warm-up query; the
query's positions are removed again between runs).

Ours and theirs alternate run by run (a fresh process of ours per run), so
load from other programs falls on both alike. Median of --reps; ratio =
ours / llama.cpp (< 1: we are faster).

usage: python3 bench/bench_ttft.py [--model models/qwen3-0.6b-Q8_0.gguf]
           [--ctx 8192 16384 32768] [--query 8] [--threads 2] [--reps 5]
"""
import argparse
import ctypes
import datetime
import os
import re
import statistics
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ours(binary, model, n, q, threads):
    out = subprocess.run([binary, "-m", model, "-c", str(n), "-q", str(q), "-t", str(threads), "-r", "1"],
                         check=True, capture_output=True, text=True).stdout
    return float(re.search(r"median ttft_s=([\d.]+)", out).group(1))


class Peer:
    """llama.cpp with a synthetic state of n cached positions."""

    def __init__(self, model, n, q, threads):
        import llama_cpp
        from llama_cpp import Llama
        self.lc = llama_cpp
        self.llm = Llama(model_path=model, n_ctx=n + q + 16, n_batch=512, n_threads=threads,
                         n_threads_batch=threads, logits_all=False, verbose=False)
        self.n, self.q = n, q
        state = self._synthetic_state(n)
        buf = (ctypes.c_uint8 * len(state)).from_buffer(state)
        got = self.lc.llama_state_set_data(self.llm.ctx, buf, len(state))
        if got != len(state):
            raise RuntimeError(f"llama_state_set_data read {got} of {len(state)} bytes")
        del buf, state
        self.llm.n_tokens = n
        self.query = [(1000 + 37 * i) % self.llm.n_vocab() for i in range(q)]
        self.run()  # warm-up

    def _synthetic_state(self, n):
        """Parses a real 2-token state (its header, cells and per-layer K and
        transposed V records) and writes the same records for n cells."""
        llm = self.llm
        llm.reset()
        llm.eval([1, 2])
        small = bytes(llm.save_state().llama_state)
        llm.reset()
        o = 0

        def take(fmt):
            nonlocal o
            v = struct.unpack_from(fmt, small, o)
            o += struct.calcsize(fmt)
            return v

        (alen,) = take("<I")
        arch = small[o:o + alen]
        o += alen
        n_stream, cells = take("<II")
        assert n_stream == 1 and cells == 2, (n_stream, cells)
        for _ in range(cells):
            pos, nseq = take("<iI")
            take("<%di" % nseq)
        v_trans, n_layer = take("<II")
        k_rec = []
        for _ in range(n_layer):
            t, row = take("<iQ")
            k_rec.append((t, row))
            o += row * cells
        v_rec = []
        for _ in range(n_layer):
            if v_trans:
                t, el, ne = take("<iII")
                v_rec.append((t, el, ne))
                o += el * ne * cells
            else:
                t, row = take("<iQ")
                v_rec.append((t, row))
                o += row * cells
        assert o == len(small), (o, len(small))
        # Random F16 values in [-1, 1]: one 1 MiB block, repeated.
        import random
        rnd = random.Random(7)
        block = bytearray(struct.pack("<%de" % (1 << 19), *[rnd.uniform(-1, 1) for _ in range(1 << 19)]))
        out = bytearray()
        out += struct.pack("<I", alen) + arch + struct.pack("<II", 1, n)
        cell = bytearray()
        for p in range(n):
            cell += struct.pack("<iIi", p, 1, 0)
        out += cell
        out += struct.pack("<II", v_trans, n_layer)

        def fill(nbytes):
            nonlocal out
            full, rest = divmod(nbytes, len(block))
            out += block * full
            out += block[:rest]

        for t, row in k_rec:
            out += struct.pack("<iQ", t, row)
            fill(row * n)
        for rec in v_rec:
            if v_trans:
                t, el, ne = rec
                out += struct.pack("<iII", t, el, ne)
                fill(el * ne * n)
            else:
                t, row = rec
                out += struct.pack("<iQ", t, row)
                fill(row * n)
        return out

    def run(self):
        llm = self.llm
        t0 = time.perf_counter()
        llm.eval(self.query)
        t1 = time.perf_counter()
        mem = self.lc.llama_get_memory(llm.ctx)
        self.lc.llama_memory_seq_rm(mem, 0, self.n, -1)
        llm.n_tokens = self.n
        return t1 - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "qwen3-0.6b-Q8_0.gguf"))
    ap.add_argument("--ctx", type=int, nargs="+", default=[8192, 16384, 32768])
    ap.add_argument("--query", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bench_ttft"))
    a = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# TTFT of a {a.query}-token query over a synthetic cached context, {datetime.date.today()}, {cpu}, "
          f"{a.threads} threads, median of {a.reps}, {os.path.basename(a.model)}\n")
    print("| cached tokens | ours TTFT s | llama.cpp TTFT s | ratio ours/llama.cpp | ours runs | llama.cpp runs |")
    print("|---|---|---|---|---|---|")
    for n in a.ctx:
        peer = Peer(a.model, n, a.query, a.threads)
        o, t = [], []
        for _ in range(a.reps):
            o.append(ours(a.binary, a.model, n, a.query, a.threads))
            t.append(peer.run())
        del peer
        mo, mt = statistics.median(o), statistics.median(t)
        print(f"| {n} | {mo:.3f} | {mt:.3f} | {mo / mt:.2f} | {' '.join('%.2f' % x for x in o)} | "
              f"{' '.join('%.2f' % x for x in t)} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
