#!/usr/bin/env python3
"""The llama.cpp peer column of `mzcache bench ttft` (issue 7).

llama-cpp-python (scripts/install-peer.sh) on the same GGUF files, for each
model and context length:

  inmem         TTFT of the 8-token query over a cached context, warm, in
                memory (nothing given back).
  state_reload  llama.cpp's answer to "the app was killed": the context's
                state was saved with llama_state_save_file; from a cold page
                cache (model and state file dropped and checked with mincore)
                load the model, llama_state_load_file, evaluate the query.
                TTFT = all three (components in the runs column).
  recompute     cold start without a saved state: load the model from a cold
                page cache and evaluate context + query (real prefill of
                random token ids). Contexts above --recompute-max-ctx are
                skipped (minutes to hours on two cores) and say so.

For inmem and state_reload the context is SYNTHETIC (bench/bench_ttft.py's
trick: a state of exactly llama.cpp's own layout with random F16 K/V, loaded
with llama_state_set_data), as on the mzcache side. The query is the same
token ids as mzcache's ((1000 + 37 i) mod n_vocab).

Writes CSV rows date,model,ctx,metric,median_s,runs_s,context,load to --out
(appending when --append); `mzcache bench ttft --peer FILE` joins them.

usage: python3 bench/peer_llamacpp.py [--models smollm2 qwen3-0.6b ...] [--ctx 8192 ...]
           [--runs 3] [--recompute-runs 1] [--recompute-max-ctx 8192] [--threads 2]
           [--metrics inmem state_reload recompute] [--out bench/results/peer_llamacpp.csv]
"""
import argparse
import ctypes
import datetime
import mmap
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

ALIASES = {
    "smollm2": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen3-0.6b": "models/qwen3-0.6b-F16.gguf",
    "exaone-1.2b": "models/exaone4-1.2b-F16.gguf",
}

libc = ctypes.CDLL(None, use_errno=True)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cached_bytes(path):
    """Bytes of the file in the page cache (mincore over a read-only map)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    page = os.sysconf("SC_PAGE_SIZE")
    vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
    with open(path, "rb") as f:
        p = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
    if p is None or p == ctypes.c_void_p(-1).value:
        return -1
    rc = libc.mincore(ctypes.c_void_p(p), ctypes.c_size_t(size), vec)
    libc.munmap(ctypes.c_void_p(p), ctypes.c_size_t(size))
    return -1 if rc != 0 else sum(v & 1 for v in vec) * page


def drop_caches(paths):
    """posix_fadvise(DONTNEED) each file, plus drop_caches as root; returns
    the bytes of them still cached (mincore)."""
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        except OSError:
            pass
    if os.geteuid() == 0:
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError:
            pass
    return sum(max(cached_bytes(p), 0) for p in paths if os.path.exists(p))


def load1():
    return os.getloadavg()[0]


def new_llama(model, n_ctx, threads):
    from llama_cpp import Llama
    return Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads,
                 logits_all=False, verbose=False)


def measure_inmem_and_save(model, n, q, threads, runs, state_path):
    """In-memory TTFT on a synthetic state; then saves that state to a file."""
    from bench_ttft import Peer
    import llama_cpp
    peer = Peer(model, n, q, threads)  # synthetic state + one warm-up query
    ts = []
    for r in range(runs):
        l = load1()
        t = peer.run()
        ts.append(t)
        log(f"  inmem run {r + 1}/{runs}: {t:.3f} s (load {l:.2f})")
    saved = False
    if state_path:
        nv = peer.llm.n_vocab()
        toks = (llama_cpp.llama_token * n)(*[(i % nv) for i in range(n)])
        t0 = time.perf_counter()
        ok = llama_cpp.llama_state_save_file(peer.llm.ctx, state_path.encode(), toks, n)
        log(f"  state saved: {os.path.getsize(state_path) >> 20} MiB in {time.perf_counter() - t0:.1f} s")
        saved = bool(ok)
    del peer
    return ts, saved


def measure_state_reload(model, n, q, threads, state_path):
    import llama_cpp
    left = drop_caches([model, state_path])
    l = load1()
    t0 = time.perf_counter()
    llm = new_llama(model, n + q + 16, threads)
    t1 = time.perf_counter()
    toks = (llama_cpp.llama_token * (n + q + 16))()
    n_out = ctypes.c_size_t(0)
    ok = llama_cpp.llama_state_load_file(llm.ctx, state_path.encode(), toks, n + q + 16, ctypes.byref(n_out))
    if not ok or n_out.value != n:
        raise RuntimeError(f"llama_state_load_file failed ({ok}, {n_out.value} tokens)")
    llm.n_tokens = n
    t2 = time.perf_counter()
    query = [(1000 + 37 * i) % llm.n_vocab() for i in range(q)]
    llm.eval(query)
    t3 = time.perf_counter()
    del llm
    log(f"  state_reload: {t3 - t0:.3f} s = model {t1 - t0:.3f} + state {t2 - t1:.3f} + query {t3 - t2:.3f} "
        f"(cached before: {left >> 10} KiB, load {l:.2f})")
    return t3 - t0, (t1 - t0, t2 - t1, t3 - t2), left, l


def measure_recompute(model, n, q, threads):
    left = drop_caches([model])
    l = load1()
    t0 = time.perf_counter()
    llm = new_llama(model, n + q + 16, threads)
    t1 = time.perf_counter()
    nv = llm.n_vocab()
    toks = [(i * 7919 + 13) % nv for i in range(n)] + [(1000 + 37 * i) % nv for i in range(q)]
    llm.eval(toks)
    t2 = time.perf_counter()
    del llm
    log(f"  recompute: {t2 - t0:.1f} s = model {t1 - t0:.2f} + prefill {n + q} tokens {t2 - t1:.1f} "
        f"(cached before: {left >> 10} KiB, load {l:.2f})")
    return t2 - t0, left, l


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["smollm2", "qwen3-0.6b", "exaone-1.2b"])
    ap.add_argument("--ctx", type=int, nargs="+", default=[8192, 16384, 32768])
    ap.add_argument("--query", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--recompute-runs", type=int, default=1)
    ap.add_argument("--recompute-max-ctx", type=int, default=8192,
                    help="longer contexts recompute only this many tokens, reported as a lower bound "
                         "(0 = always the whole context)")
    ap.add_argument("--recompute-models", nargs="+", default=None,
                    help="run recompute only for these models (default: every model)")
    ap.add_argument("--omp-passive", action="store_true",
                    help="OMP_WAIT_POLICY=passive: llama.cpp threads sleep instead of spinning at barriers")
    ap.add_argument("--metrics", nargs="+", default=["inmem", "state_reload", "recompute"])
    ap.add_argument("--state-dir", default=os.path.join(ROOT, "build", "bench-swap"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "peer_llamacpp.csv"))
    ap.add_argument("--append", action="store_true")
    a = ap.parse_args()
    if a.omp_passive:
        os.environ["OMP_WAIT_POLICY"] = "passive"  # read when llama.cpp's OpenMP starts
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    os.makedirs(a.state_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    new = not (a.append and os.path.exists(a.out))
    out = open(a.out, "w" if new else "a")
    if new:
        out.write("date,model,ctx,metric,median_s,runs_s,context,load\n")

    def row(model, n, metric, ts, context, loads):
        med = statistics.median(ts)
        out.write(f"{stamp},{os.path.basename(model)},{n},{metric},{med:.4f},"
                  f"{' '.join('%.3f' % t for t in ts)},{context},{min(loads):.2f}-{max(loads):.2f}\n")
        out.flush()

    for m in a.models:
        model = os.path.join(ROOT, ALIASES.get(m, m))
        if not os.path.exists(model):
            log(f"peer: {model} missing (mzcache bench ttft generates it); skipped")
            continue
        for n in a.ctx:
            log(f"{os.path.basename(model)}, {n} tokens")
            state = os.path.join(a.state_dir, f"peer-{os.path.basename(model)}-{n}.state")
            need_state = "state_reload" in a.metrics
            if "inmem" in a.metrics or need_state:
                ts, saved = measure_inmem_and_save(model, n, a.query, a.threads, a.runs,
                                                   state if need_state else None)
                if "inmem" in a.metrics:
                    row(model, n, "inmem", ts, "synthetic state", [load1()])
                if need_state and saved:
                    tr, loads, parts = [], [], []
                    for r in range(a.runs):
                        t, p, _, l = measure_state_reload(model, n, a.query, a.threads, state)
                        tr.append(t)
                        loads.append(l)
                        parts.append(p)
                    pm = [statistics.median(x[i] for x in parts) for i in range(3)]
                    row(model, n, "state_reload", tr,
                        f"synthetic state: model {pm[0]:.2f} + state {pm[1]:.2f} + query {pm[2]:.2f} s", loads)
                if os.path.exists(state):
                    os.unlink(state)
            if "recompute" in a.metrics and (a.recompute_models is None or m in a.recompute_models):
                # Above the cap only a prefix is recomputed: a LOWER BOUND of the
                # real recompute time (prefill cost grows with the context).
                nr = min(n, a.recompute_max_ctx) if a.recompute_max_ctx else n
                tr, loads = [], []
                for r in range(a.recompute_runs):
                    t, _, l = measure_recompute(model, nr, a.query, a.threads)
                    tr.append(t)
                    loads.append(l)
                what = ("real prefill of random tokens + model load" if nr == n else
                        f"LOWER BOUND: prefill of only {nr} of {n} tokens + model load")
                row(model, n, "recompute", tr, what, loads)
    out.close()
    log(f"wrote {a.out}")


if __name__ == "__main__":
    main()
