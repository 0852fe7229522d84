#!/usr/bin/env python3
"""pressure_scenario.py — the memory-pressure scenario's driver (run by
scripts/pressure-scenario.sh, which makes the cgroup and cleans up).

Inside a cgroup-v1 memory cgroup with a limit:
  1. start `mzcache serve` in the cgroup (usage thresholds as the signal),
  2. build a multi-turn conversation (greedy),
  3. ask the next question twice without pressure (answer A0; TTFT cold-ish
     and hot),
  4. start a memory hog in the same cgroup that grows in steps past what
     the limit leaves free, so that only mzcache giving memory back avoids
     the OOM killer,
  5. after the hog has peaked and gone, ask the same question again: the
     answer must equal A0; report its TTFT.
Memory over time (daemon RSS, cgroup usage, hog RSS, remaining %) goes to
trace.csv every 200 ms; evictions to events.csv; a summary to summary.txt.
With --no-pressure the daemon runs without its monitor (the control: what a
server that does not give memory back gets). With --mode os-paging and
--no-pressure it is the llama.cpp-like baseline: weights mmap'd from the
GGUF file, KV in anonymous memory, and only the kernel's own reclaim (page
cache, swap where there is one) to answer the pressure.

Only the standard library; talks HTTP to 127.0.0.1 only.
"""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error

import scenario_util
from scenario_util import MiB, hog_answered, hog_ask, join_cgroup, oom_kills, read_int, release_hog, rss_of, start_hog


def log(*a):
    print("scenario:", *a, file=sys.stderr, flush=True)


class Client(scenario_util.Client):
    def chat(self, messages, max_tokens):
        t0 = time.monotonic()
        r = self.call("POST", "/v1/chat/completions",
                      {"messages": messages, "temperature": 0, "max_tokens": max_tokens})
        wall = (time.monotonic() - t0) * 1000
        return r["choices"][0]["message"]["content"], r["usage"], r["timings"], wall


HOG = r"""
import sys
chunks = []
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "grow":
        chunks.append(b"\x01" * (int(cmd[1]) << 20))  # every page written
    elif cmd[0] == "free":
        chunks.clear()
    print("ok", flush=True)
"""


def paragraphs(n_words_min):
    src = "/usr/share/common-licenses/GPL-3"
    text = open(src).read() if os.path.exists(src) else ("The quick brown fox jumps over the lazy dog. " * 400)
    out, cur = [], []
    for para in text.split("\n\n"):
        words = para.split()
        if not words:
            continue
        cur += words
        if len(cur) >= n_words_min:
            out.append(" ".join(cur))
            cur = []
    return out


def main():
    ap = scenario_util.arg_parser()
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--words", type=int, default=160, help="words of text per user turn")
    ap.add_argument("--answer-tokens", type=int, default=24)
    ap.add_argument("--headroom-mib", type=int, default=48)
    ap.add_argument("--need-pct", type=float, default=55, help="share of evictable memory the hog forces out")
    ap.add_argument("--hog-step-mib", type=int, default=16)
    ap.add_argument("--hog-step-s", type=float, default=1.5)
    ap.add_argument("--no-pressure", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tag", default="mzcache")
    ap.add_argument("--mode", default="mzcache", help="engine mode of the daemon (serve --mode)")
    ap.add_argument("--codec", default="raw", help="KV codec: raw (lossless: the answer must match bit for bit) or q8")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cg = a.cgroup
    port_file = os.path.join(a.out, f"{a.tag}.port")
    daemon_log = open(os.path.join(a.out, f"{a.tag}-daemon.log"), "w")
    summary = {}

    # The limit is set once the conversation is built and the daemon's own
    # footprint is known; until then a generous provisional one. The daemon's
    # usage thresholds are a share of the limit and follow it (re-armed
    # within 2 s of a change).
    with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
        f.write(str(4096 * MiB))

    def start_daemon(extra):
        # Drop the model file from the page cache first: a page cached by an
        # earlier process stays charged to that process's cgroup, and an
        # os-paging daemon mapping it would then not feel its own limit.
        scenario_util.drop_page_cache(a.model, log)
        if os.path.exists(port_file):
            os.unlink(port_file)
        cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "--port-file", port_file, "-t", str(a.threads),
               "-c", "4096", "--codec", a.codec, "--swap-dir", os.path.join(a.out, "swap-" + a.tag), "--mode", a.mode] + extra
        p = subprocess.Popen(cmd, stdout=daemon_log, stderr=subprocess.STDOUT, preexec_fn=join_cgroup(cg))
        c = scenario_util.await_daemon(p, port_file, daemon_log.name, Client, 0.05, 1200, 100)
        return p, c

    if a.no_pressure:
        extra = ["--no-pressure"]
    else:
        extra = ["--usage-threshold", "85%,95%", "--evict-step", "25%", "--pressure-interval", "1000",
                 "--pressure-sources", "cg1-usage,cg1-level,psi"]
    p, c = start_daemon(extra + ["--alias", a.tag])
    t_start = time.time()

    trace = open(os.path.join(a.out, f"{a.tag}-trace.csv"), "w")
    trace.write("t_s,daemon_rss_mib,cgroup_usage_mib,hog_rss_mib,limit_mib,remaining_pct,evictions,phase\n")
    state = {"hog": None, "phase": "build", "stop": False, "limit": 4096 * MiB}

    def sampler():
        while not state["stop"]:
            t = time.time() - t_start
            rem, nev = -1, -1
            if p.poll() is None:
                try:
                    s = c.call("GET", "/mz/status", timeout=5)
                    rem = s["memory"]["remaining_pct"]
                    nev = s["pressure"]["evictions"]
                except Exception:
                    pass
            hog = state["hog"]
            trace.write("%.2f,%.1f,%.1f,%.1f,%.1f,%.1f,%d,%s\n" % (
                t, rss_of(p.pid) / MiB if p.poll() is None else 0,
                max(read_int(os.path.join(cg, "memory.usage_in_bytes")), 0) / MiB,
                rss_of(hog.pid) / MiB if hog and hog.poll() is None else 0,
                state["limit"] / MiB, rem, nev, state["phase"]))
            trace.flush()
            time.sleep(0.2)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()

    # Conversation.
    paras = paragraphs(a.words)
    msgs = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
    prefill_ms, prefill_n = 0.0, 0
    for i in range(a.turns):
        msgs.append({"role": "user", "content": "Here is a passage:\n" + paras[i % len(paras)] +
                     "\nWhat is this passage about?"})
        ans, usage, tm, wall = c.chat(msgs, a.answer_tokens)
        msgs.append({"role": "assistant", "content": ans})
        prefill_ms += tm["prompt_ms"]
        prefill_n += tm["prompt_n"]
        log(f"turn {i + 1}: prompt {usage['prompt_tokens']} tokens ({tm['cached_n']} cached, "
            f"{tm['prompt_n']} computed in {tm['prompt_ms']:.0f} ms)")
    n_ctx_tokens = usage["prompt_tokens"] + usage["completion_tokens"]
    question = msgs + [{"role": "user", "content": "Summarise our whole conversation in one sentence."}]
    a0, u0, tm0, _ = c.chat(question, 32)
    a0b, u0b, tm0b, _ = c.chat(question, 32)
    ok_repeat = a0 == a0b
    log(f"question: {u0['prompt_tokens']} tokens; TTFT {tm0['ttft_ms']:.0f} ms (new turn), "
        f"{tm0b['ttft_ms']:.0f} ms (repeat, all resident); same answer: {ok_repeat}")

    # Limit: the daemon's usage now plus headroom; the hog must push out
    # need-pct of the evictable memory.
    st = c.call("GET", "/mz/status")
    evictable = st["memory"]["weights"]["total_bytes"] + st["memory"]["kv"]["total_bytes"]
    usage_now = read_int(os.path.join(cg, "memory.usage_in_bytes"))
    limit = usage_now + a.headroom_mib * MiB
    hog_max = int((a.headroom_mib * MiB + a.need_pct / 100 * evictable) / MiB)
    state["limit"] = limit
    with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
        f.write(str(limit))
    time.sleep(2.5)  # the monitor re-arms its thresholds for the new limit
    log(f"context {n_ctx_tokens} tokens; evictable {evictable / MiB:.1f} MiB; cgroup usage "
        f"{usage_now / MiB:.1f} MiB; limit set to {limit / MiB:.1f} MiB; hog grows to {hog_max} MiB")

    # Pressure.
    state["phase"] = "pressure"
    oom_before = oom_kills(cg)
    hog = start_hog(HOG, cg)
    state["hog"] = hog
    grown = 0
    hog_killed = False
    while grown < hog_max and p.poll() is None:
        step = min(a.hog_step_mib, hog_max - grown)
        if not (hog_ask(hog, f"grow {step}") and hog_answered(hog)):
            hog_killed = True
            break
        grown += step
        time.sleep(a.hog_step_s)
    time.sleep(2.0)
    daemon_alive = p.poll() is None
    oom_after = oom_kills(cg)
    log(f"hog reached {grown} MiB; daemon alive: {daemon_alive}; OOM kills in the cgroup: "
        f"{oom_after - oom_before if oom_before >= 0 else 'unknown'}")
    release_hog(hog)
    state["phase"] = "after"
    time.sleep(1.0)

    result = {"tag": a.tag, "mode": a.mode, "codec": a.codec, "context_tokens": n_ctx_tokens, "question_tokens": u0["prompt_tokens"],
              "evictable_mib": evictable / MiB, "limit_mib": limit / MiB, "hog_max_mib": hog_max,
              "hog_reached_mib": grown, "hog_killed": hog_killed, "daemon_alive": daemon_alive,
              "oom_kills": (oom_after - oom_before) if oom_before >= 0 else None,
              "ttft_new_turn_ms": tm0["ttft_ms"], "ttft_repeat_resident_ms": tm0b["ttft_ms"],
              "prefill_tok_per_s": prefill_n / prefill_ms * 1000 if prefill_ms else 0,
              "answer_no_pressure": a0, "repeat_same": ok_repeat}
    result["recompute_est_ms"] = (u0["prompt_tokens"] / result["prefill_tok_per_s"] * 1000
                                  if result["prefill_tok_per_s"] else 0)
    if daemon_alive:
        st = c.call("GET", "/mz/status")
        result["remaining_pct_before_request"] = st["memory"]["remaining_pct"]
        result["pressure_evictions"] = st["pressure"]["evictions"]
        result["pressure_evicted_mib"] = st["pressure"]["evicted_bytes"] / MiB
        result["stage"] = st["memory"]["stage"]
        with open(os.path.join(a.out, f"{a.tag}-events.csv"), "w") as f:
            f.write("t_s,trigger,what,freed_mib,remaining_pct,ms\n")
            for e in st["events"]:
                f.write("%.2f,%s,\"%s\",%.2f,%.1f,%.1f\n" % (e["t"] - t_start, e["trigger"], e["what"],
                                                            e["freed_bytes"] / MiB, e["remaining_pct"], e["ms"]))
        a1, u1, tm1, _ = c.chat(question, 32)
        common = 0
        while common < min(len(a0), len(a1)) and a0[common] == a1[common]:
            common += 1
        result.update({"answer_after": a1, "same_answer": a1 == a0, "same_prefix_chars": common, "ttft_after_ms": tm1["ttft_ms"],
                       "prefill_after_ms": tm1["prompt_ms"], "evicted_mib_before_request":
                       tm1["evicted_bytes_before"] / MiB})
        log(f"after pressure: TTFT {tm1['ttft_ms']:.0f} ms (remaining before {tm1['remaining_pct_before']:.1f}%, "
            f"{tm1['evicted_bytes_before'] / MiB:.1f} MiB to restore); same answer: {a1 == a0}")
        time.sleep(0.6)
    state["stop"] = True
    th.join()
    trace.close()
    scenario_util.stop_daemon(p)
    result["daemon_exit"] = p.returncode
    with open(os.path.join(a.out, f"{a.tag}-summary.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
