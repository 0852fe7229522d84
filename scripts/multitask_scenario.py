#!/usr/bin/env python3
"""multitask_scenario.py — the paper's multitasking scenario (Fig. 15), one
daemon per run (scripts/pressure-scenario.sh --multitask runs it for the
three daemons in turn, makes the cgroups and cleans up).

Inside a cgroup-v1 memory cgroup:
  1. start the daemon in the cgroup and give it a real conversation of at
     least --ctx-tokens tokens (passages of the licence texts Debian ships,
     each answered greedily; built turn by turn by the first daemon and saved,
     replayed as one request by the others so that every daemon holds the
     same conversation);
  2. ask a first question with everything resident (the in-memory TTFT);
  3. set the cgroup limit (the same for every daemon: from --plan, written by
     the first run) and run --rounds rounds: a hog grows in steps to its peak
     (it plays the foreground app; every daemon runs with oom_score_adj 1000,
     so when the kernel must kill, it kills the daemon, as Android's
     low-memory killer kills the background LLM service; lowering the hog's
     score instead needs a capability containers often lack), holds,
     releases; then the next question. When the cgroup thrashes instead
     (a hog step stalls --stall-s: with zram's pool full the kernel reclaims
     a little forever and never declares OOM) the daemon is killed as
     Android's lmkd would on the memory stall. A
     daemon that was OOM-killed is restarted and pays the cold start: model
     load + the whole conversation prefilled again (TTFT = restart + that
     request's TTFT).
Per round: survived or killed, TTFT; memory every 200 ms (daemon RSS,
cgroup usage, hog RSS) to TAG-trace.csv; per eviction (mzcache) the need and
what was freed, from the daemon's log, to TAG-evictions.csv; TAG-rounds.csv
and TAG-summary.json.

Only the standard library; talks HTTP to 127.0.0.1 only.
"""
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
import urllib.error

import scenario_util
from scenario_util import MiB, hog_answered, hog_ask, join_cgroup, oom_kills, read_int, release_hog, rss_of, start_hog

LICENSES = ["GPL-3", "Apache-2.0", "GPL-2", "MPL-2.0", "LGPL-2.1", "GFDL-1.3", "Artistic", "CC0-1.0"]
QUESTIONS = [
    "Which of these texts grants a patent licence, in one sentence?",
    "What does the first passage say about distribution of source code?",
    "Name one difference between the GPL and the Apache licence.",
    "Which passage talks about warranties, and what does it say?",
    "What is a 'Contributor' according to the passages above?",
    "Summarise the third passage in one sentence.",
    "Does any passage mention trademarks? Answer briefly.",
    "What must be kept when copying the covered work?",
    "Which text is the shortest one you have read?",
    "What happens to the licence if its terms are violated?",
]


def log(*a):
    print("multitask:", *a, file=sys.stderr, flush=True)


def zram_stat(dev):
    """(original MiB, compressed MiB, memory used MiB) of a zram device, or None."""
    if not dev:
        return None
    try:
        with open(f"/sys/block/{os.path.basename(dev)}/mm_stat") as f:
            v = [int(x) for x in f.read().split()]
        return v[0] / MiB, v[1] / MiB, v[2] / MiB
    except (OSError, ValueError, IndexError):
        return None


class Client(scenario_util.Client):
    call_timeout = 1800

    def chat(self, messages, max_tokens):
        r = self.call("POST", "/v1/chat/completions",
                      {"messages": messages, "temperature": 0, "max_tokens": max_tokens,
                       # one named session: each question shares the conversation and only the
                       # previous question's turn is cut (an anonymous request that cuts into a
                       # session's history starts a new one, with the whole conversation prefilled)
                       "user": "multitask"})
        return r["choices"][0]["message"]["content"], r["usage"], r["timings"]


# The hog's pages are random bytes (one random MiB repeated: zram compresses
# each 4 KiB page on its own and does not deduplicate), as incompressible as
# real KV. A hog of same-filled pages is free for zram to store, and then
# zram saves os-paging by swapping the hog out instead (measured: 353 MiB of
# swapped pages held in 236 MiB, the daemon survived every round).
HOG = r"""
import os, sys
blk = os.urandom(1 << 20)
chunks = []
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "grow":
        n = int(cmd[1])
        b = bytearray(n << 20)
        for i in range(n):
            b[i << 20:(i + 1) << 20] = blk  # every page written
        chunks.append(b)
    elif cmd[0] == "free":
        chunks.clear()
    print("ok", flush=True)
"""


def passages(words):
    out = []
    for name in LICENSES:
        p = os.path.join("/usr/share/common-licenses", name)
        if not os.path.exists(p):
            continue
        w = open(p, errors="replace").read().split()
        for i in range(0, len(w), words):
            part = w[i:i + words]
            if len(part) >= words // 2:
                out.append((name, " ".join(part)))
    return out


def main():
    ap = scenario_util.arg_parser()
    ap.add_argument("--tag", required=True)
    ap.add_argument("--mode", default="mzcache", help="serve --mode")
    ap.add_argument("--pressure", action="store_true", help="the daemon's pressure monitor on (mzcache)")
    ap.add_argument("--codec", default="q8")
    ap.add_argument("--ctx-tokens", type=int, default=8192)
    ap.add_argument("--words", type=int, default=900, help="words per passage (one user turn)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--answer-tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plan", required=True, help="JSON with the limit and hog sizes; written by the first run")
    ap.add_argument("--headroom-mib", type=int, default=96, help="limit = first daemon's usage + this")
    ap.add_argument("--need-pct", type=float, default=65,
                    help="share of the daemon's weights + KV that the hog's peak forces out")
    ap.add_argument("--hog-step-mib", type=int, default=24)
    ap.add_argument("--hog-step-s", type=float, default=0.5)
    ap.add_argument("--hold-s", type=float, default=2.0)
    ap.add_argument("--stall-s", type=float, default=10.0,
                    help="a hog step stalled this long = thrashing: the daemon is killed (lmkd emulation)")
    ap.add_argument("--headroom", default="64M",
                    help="serve --pressure-headroom: the eviction target below the limit (mzcache)")
    ap.add_argument("--usage-threshold", default="83%,88%,93%,97%",
                    help="serve --usage-threshold (mzcache): the lowest at or below the target")
    ap.add_argument("--no-restore-ahead", action="store_true",
                    help="serve --no-restore-ahead: evicted parts wait for the question")
    ap.add_argument("--zram", default="",
                    help="the zram device the daemon swaps to: its pool is RAM of the same budget, so the "
                         "cgroup limit follows budget - pool and the pool's cap budget - usage (every 100 ms)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cg = a.cgroup
    port_file = os.path.join(a.out, f"{a.tag}.port")
    daemon_log_path = os.path.join(a.out, f"{a.tag}-daemon.log")
    daemon_log = open(daemon_log_path, "w")
    n_ctx = a.ctx_tokens + 2048
    with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
        f.write(str(8192 * MiB))

    env = dict(os.environ)

    def start_daemon():
        # A page the page cache kept from an earlier process stays charged to
        # that process's cgroup: drop the model file first, so that the
        # daemon's mapping of it (os-paging) counts here.
        scenario_util.drop_page_cache(a.model, log)
        if os.path.exists(port_file):
            os.unlink(port_file)
        cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "--port-file", port_file, "-t", str(a.threads),
               "-c", str(n_ctx), "--codec", a.codec, "--swap-dir", os.path.join(a.out, "swap-" + a.tag),
               "--mode", a.mode, "--alias", a.tag, "--no-store"]
        if a.pressure:
            cmd += ["--usage-threshold", a.usage_threshold, "--pressure-sources", "cg1-usage,cg1-level,psi",
                    "--pressure-headroom", a.headroom]
            if a.no_restore_ahead:
                cmd += ["--no-restore-ahead"]
        else:
            cmd += ["--no-pressure"]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=daemon_log, stderr=subprocess.STDOUT, env=env,
                             preexec_fn=join_cgroup(cg, 1000))
        c = scenario_util.await_daemon(p, port_file, daemon_log_path, Client, 0.02, 6000, 500)
        return p, c, (time.monotonic() - t0) * 1000

    p, c, start_ms = start_daemon()
    t_start = time.time()
    state = {"hog": None, "round": 0, "phase": "build", "stop": False, "limit": 8192 * MiB, "p": p, "t0": 0.0}
    trace = open(os.path.join(a.out, f"{a.tag}-trace.csv"), "w")
    trace.write("t_s,daemon_rss_mib,cgroup_usage_mib,hog_rss_mib,limit_mib,round,phase,t_rounds_s\n")

    def sampler():
        while not state["stop"]:
            d, hog = state["p"], state["hog"]
            now = time.time()
            trace.write("%.2f,%.1f,%.1f,%.1f,%.1f,%d,%s,%.2f\n" % (
                now - t_start, rss_of(d.pid) / MiB if d.poll() is None else 0,
                max(read_int(os.path.join(cg, "memory.usage_in_bytes")), 0) / MiB,
                rss_of(hog.pid) / MiB if hog and hog.poll() is None else 0,
                state["limit"] / MiB, state["round"], state["phase"],
                now - state["t0"] if state["t0"] else -1.0))
            trace.flush()
            time.sleep(0.2)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()

    def zram_budget(budget):
        # zram keeps what it is given in RAM (compressed), beside the cgroup:
        # every 100 ms the cgroup's limit becomes the budget less the pool, and
        # the pool's own cap (zram mem_limit) the budget less the cgroup's
        # usage, so usage + pool stays within the budget (to within what the
        # hog allocates in 100 ms). A swap-out to a full pool fails, and then
        # the kernel must kill. Writing a limit below the usage makes the
        # kernel reclaim, or refuse (EBUSY): the next tick tries again.
        lim_path = os.path.join(cg, "memory.limit_in_bytes")
        cap_path = f"/sys/block/{os.path.basename(a.zram)}/mem_limit"
        floor = 16 * MiB
        while not state["stop"]:
            zs = zram_stat(a.zram)
            pool = int(zs[2] * MiB) if zs else 0
            usage = max(read_int(os.path.join(cg, "memory.usage_in_bytes")), 0)
            try:
                with open(cap_path, "w") as f:
                    f.write(str(max(budget - usage, 4 * MiB)))
            except OSError:
                pass
            want = max(budget - pool, floor)
            if abs(want - state["limit"]) >= MiB:
                try:
                    with open(lim_path, "w") as f:
                        f.write(str(want))
                    state["limit"] = want
                except OSError:
                    pass
            time.sleep(0.1)

    # 1. The conversation: built once (greedy answers), then replayed.
    conv_path = os.path.join(a.out, f"conversation-{a.ctx_tokens}.json")
    if os.path.exists(conv_path):
        msgs = json.load(open(conv_path))
        ans, usage, tm = c.chat(msgs + [{"role": "user", "content": "Thank you."}], 1)
        log(f"conversation replayed: {usage['prompt_tokens']} tokens prefilled in {tm['prompt_ms']:.0f} ms")
    else:
        msgs = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
        n_tok = 0
        for i, (name, text) in enumerate(passages(a.words)):
            msgs.append({"role": "user", "content": f"Here is part of the {name} licence:\n{text}\n"
                                                    "Say in one short sentence what it is about."})
            ans, usage, tm = c.chat(msgs, 16)
            msgs.append({"role": "assistant", "content": ans})
            n_tok = usage["prompt_tokens"] + usage["completion_tokens"]
            log(f"turn {i + 1}: {n_tok} tokens ({tm['prompt_n']} computed in {tm['prompt_ms']:.0f} ms)")
            if n_tok >= a.ctx_tokens:
                break
        json.dump(msgs, open(conv_path, "w"))
        log(f"conversation built: {n_tok} tokens")

    def ask(k):
        q = msgs + [{"role": "user", "content": QUESTIONS[k % len(QUESTIONS)]}]
        return c.chat(q, a.answer_tokens), q

    (ans0, u0, tm0), _ = ask(0)  # the new question, all resident: the in-memory TTFT
    (ans0b, u0b, tm0b), _ = ask(0)
    ttft_mem = tm0["ttft_ms"]
    log(f"question 0 over {u0['prompt_tokens']} tokens: TTFT {tm0['ttft_ms']:.0f} ms (new), "
        f"{tm0b['ttft_ms']:.0f} ms (repeat)")
    try:
        st = c.call("GET", "/mz/status")
        kv_total = st["memory"]["kv"]["total_bytes"]
        w_total = st["memory"]["weights"]["total_bytes"]
    except (urllib.error.URLError, KeyError, ValueError) as e:
        log(f"/mz/status: {e}")
        kv_total = w_total = 0

    # 2. The plan: the first run fixes the limit and the hog's peak for all.
    # The model file's unmapped page cache (mzcache copies the weights out of
    # it) is the kernel's to drop: drop it now, so that the usage is the
    # daemon's own footprint.
    scenario_util.drop_page_cache(a.model, log)
    time.sleep(0.5)
    usage_now = read_int(os.path.join(cg, "memory.usage_in_bytes"))
    if os.path.exists(a.plan):
        plan = json.load(open(a.plan))
    else:
        plan = {"limit_mib": usage_now / MiB + a.headroom_mib,
                "hog_max_mib": int(a.headroom_mib + a.need_pct / 100 * (kv_total + w_total) / MiB),
                "planned_by": a.tag, "usage_mib": usage_now / MiB, "kv_mib": kv_total / MiB,
                "weights_mib": w_total / MiB}
        json.dump(plan, open(a.plan, "w"), indent=1)
    limit = int(plan["limit_mib"] * MiB)
    state["limit"] = limit
    with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
        f.write(str(limit))
    if a.zram:
        threading.Thread(target=zram_budget, args=(limit,), daemon=True).start()
    log(f"context {u0['prompt_tokens']} tokens: KV {kv_total / MiB:.1f} MiB, weights {w_total / MiB:.1f} MiB; "
        f"cgroup usage {usage_now / MiB:.1f} MiB; limit {limit / MiB:.1f} MiB{' minus the zram pool' if a.zram else ''}; "
        f"hog peak {plan['hog_max_mib']} MiB")
    time.sleep(2.5)  # the monitor re-arms its percent thresholds for the new limit

    # 3. Rounds.
    rounds = []
    oom0 = oom_kills(cg)
    state["t0"] = time.time()
    for r in range(1, a.rounds + 1):
        state["round"], state["phase"] = r, "hog"
        hog = start_hog(HOG, cg)
        state["hog"] = hog
        grown, hog_failed, lmk = 0, False, False
        while grown < plan["hog_max_mib"]:
            step = min(a.hog_step_mib, plan["hog_max_mib"] - grown)
            if not hog_ask(hog, f"grow {step}"):
                hog_failed = True
                break
            # A step takes ~0.1 s. When the cgroup thrashes (every page
            # wants to go to a zram pool that is full: the kernel keeps
            # reclaiming a little and never declares OOM), Android's lmkd
            # would act on the memory stall: after --stall-s the daemon
            # (the background process) is killed as lmkd would.
            ready, _, _ = select.select([hog.stdout], [], [], a.stall_s)
            if not ready and p.poll() is None:
                log(f"round {r}: the hog stalled {a.stall_s:.0f} s (thrashing): killing the daemon, as lmkd would")
                p.kill()
                p.wait()
                lmk = True
            if not hog_answered(hog):
                hog_failed = True
                break
            grown += step
            time.sleep(a.hog_step_s)
        time.sleep(a.hold_s)
        peak_usage = read_int(os.path.join(cg, "memory.usage_in_bytes"))
        zs = zram_stat(a.zram)
        alive = p.poll() is None
        state["phase"] = "release"
        release_hog(hog)
        state["hog"] = None
        time.sleep(1.0)
        state["phase"] = "question"
        restart_ms = 0.0
        if not alive:
            log(f"round {r}: daemon killed (exit {p.returncode}); restarting (cold start)")
            p, c, restart_ms = start_daemon()
            state["p"] = p
        t_q = time.time() - state["t0"]
        (ans, u, tm), q = ask(r)
        ttft = restart_ms + tm["ttft_ms"]
        try:  # what the question's own restore spent (all zero when nothing was left to restore)
            lr = c.call("GET", "/mz/status").get("last_restore", {})
        except (urllib.error.URLError, ValueError):
            lr = {}
        row = {"round": r, "t_rounds_s": round(t_q, 2), "survived": int(alive), "lmk_kill": int(lmk), "hog_reached_mib": grown, "hog_failed": hog_failed,
               "peak_usage_mib": peak_usage / MiB, "restart_ms": restart_ms, "ttft_ms": ttft,
               "server_ttft_ms": tm["ttft_ms"], "prompt_n": tm["prompt_n"], "cached_n": tm["cached_n"],
               "evicted_mib_before": tm.get("evicted_bytes_before", 0) / MiB,
               "queue_ms": tm.get("queue_ms", 0),
               "restore_wall_ms": lr.get("all_ready_ms", 0) if tm.get("evicted_bytes_before", 0) else 0,
               "restore_storage_ms": lr.get("storage_ms", 0) if tm.get("evicted_bytes_before", 0) else 0,
               "restore_memory_ms": lr.get("memory_ms", 0) if tm.get("evicted_bytes_before", 0) else 0,
               "restore_alloc_ms": lr.get("alloc_ms", 0) if tm.get("evicted_bytes_before", 0) else 0,
               "restore_units_storage": lr.get("storage_units", 0) if tm.get("evicted_bytes_before", 0) else 0,
               "restore_units_memory": lr.get("memory_units", 0) if tm.get("evicted_bytes_before", 0) else 0,
               "remaining_pct_before": tm.get("remaining_pct_before", 100.0),
               "oom_kills_total": oom_kills(cg) - oom0 if oom0 >= 0 else None,
               "zram_orig_mib": zs[0] if zs else None, "zram_compr_mib": zs[1] if zs else None,
               "zram_used_mib": zs[2] if zs else None}
        rounds.append(row)
        with open(os.path.join(a.out, f"{a.tag}-rounds.csv"), "w") as f:  # kept up to date: a cut-short run keeps its rounds
            f.write(",".join(rounds[0].keys()) + "\n")
            for x in rounds:
                f.write(",".join("" if v is None else str(v) for v in x.values()) + "\n")
        log(f"round {r}: {'survived' if alive else 'KILLED' + (' (stall)' if lmk else '')}; hog {grown} MiB; TTFT {ttft:.0f} ms "
            f"({tm['prompt_n']} tokens computed, {row['evicted_mib_before']:.0f} MiB evicted before)"
            + (f"; zram {zs[0]:.0f} -> {zs[1]:.0f} MiB" if zs else ""))
        msgs = q + [{"role": "assistant", "content": ans}]
        # A control on the same machine at the same moment: one more new
        # question with everything as the round's question left it (nothing
        # evicted since), not kept in the conversation (the next question
        # cuts it). The machine is shared: its load moves every TTFT, and the
        # ratio to this one is what the daemon's own pressure handling costs.
        (_, _, tmc), _ = ask(r + 5)
        row["ttft_control_ms"] = tmc["ttft_ms"]
        row["ttft_over_control"] = ttft / tmc["ttft_ms"] if tmc["ttft_ms"] > 0 else None
        log(f"round {r}: control TTFT {tmc['ttft_ms']:.0f} ms (x{row['ttft_over_control']:.2f})")
        with open(os.path.join(a.out, f"{a.tag}-rounds.csv"), "w") as f:
            f.write(",".join(rounds[0].keys()) + "\n")
            for x in rounds:
                f.write(",".join("" if v is None else str(v) for v in x.values()) + "\n")
        state["phase"] = "idle"
        time.sleep(1.0)

    # 4. Evictions (need vs freed), from the daemon log.
    daemon_log.flush()
    evs = []
    pat = re.compile(r"need ([0-9.]+) MiB \[(\w+)\] -> evict ([0-9.]+) MiB[^>]*-> freed ([0-9.]+) MiB "
                     r"\(([0-9.]+)x the need\) in ([0-9.]+) ms")
    for line in open(daemon_log_path, errors="replace"):
        m = pat.search(line)
        if m:
            evs.append({"need_mib": float(m.group(1)), "basis": m.group(2), "asked_mib": float(m.group(3)),
                        "freed_mib": float(m.group(4)), "ratio": float(m.group(5)), "ms": float(m.group(6))})
    rel_pat = re.compile(r"relief: usage ([0-9.]+) MiB, target ([0-9.]+) MiB.* -> restored ([0-9.]+) MiB ahead "
                         r"in ([0-9.]+) ms")
    reliefs = []
    for line in open(daemon_log_path, errors="replace"):
        m = rel_pat.search(line)
        if m:
            reliefs.append({"usage_mib": float(m.group(1)), "target_mib": float(m.group(2)),
                            "restored_mib": float(m.group(3)), "ms": float(m.group(4))})
    with open(os.path.join(a.out, f"{a.tag}-reliefs.csv"), "w") as f:
        f.write("usage_mib,target_mib,restored_mib,ms\n")
        for e in reliefs:
            f.write("%.1f,%.1f,%.1f,%.1f\n" % (e["usage_mib"], e["target_mib"], e["restored_mib"], e["ms"]))
    with open(os.path.join(a.out, f"{a.tag}-evictions.csv"), "w") as f:
        f.write("need_mib,basis,asked_mib,freed_mib,freed_over_need,ms\n")
        for e in evs:
            f.write("%.2f,%s,%.2f,%.2f,%.2f,%.1f\n" % (e["need_mib"], e["basis"], e["asked_mib"], e["freed_mib"],
                                                       e["ratio"], e["ms"]))
    with open(os.path.join(a.out, f"{a.tag}-rounds.csv"), "w") as f:
        keys = list(rounds[0].keys()) if rounds else []
        f.write(",".join(keys) + "\n")
        for row in rounds:
            f.write(",".join("" if row[k] is None else str(row[k]) for k in keys) + "\n")
    state["stop"] = True
    th.join()
    trace.close()
    scenario_util.stop_daemon(p)
    big = [e for e in evs if e["need_mib"] >= 2.0]  # needs of at least one weight block
    result = {"tag": a.tag, "mode": a.mode, "codec": a.codec, "context_tokens": u0["prompt_tokens"],
              "kv_mib": kv_total / MiB, "weights_mib": w_total / MiB, "plan": plan,
              "zram": a.zram, "ttft_in_memory_ms": ttft_mem, "start_ms": start_ms,
              "survived": sum(1 for x in rounds if x["survived"]), "rounds": len(rounds),
              "ttft_ms": [x["ttft_ms"] for x in rounds], "round_rows": rounds, "evictions": len(evs),
              "ratio_max": max((e["ratio"] for e in evs), default=None),
              "ratio_max_need_ge_2mib": max((e["ratio"] for e in big), default=None),
              "ratio_mean": sum(e["ratio"] for e in evs) / len(evs) if evs else None,
              "need_ge_2mib_within_1_5x": sum(1 for e in big if e["ratio"] <= 1.5), "need_ge_2mib": len(big),
              "restores_ahead": len(reliefs),
              "restore_ahead_ms": [e["ms"] for e in reliefs],
              "headroom": a.headroom, "usage_threshold": a.usage_threshold,
              "restore_ahead": not a.no_restore_ahead}
    with open(os.path.join(a.out, f"{a.tag}-summary.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "round_rows"}))


if __name__ == "__main__":
    main()
