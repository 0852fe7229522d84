#!/usr/bin/env python3
"""test_forward_phases.py: MZ_FORWARD_PHASES=1, the forward pass's stage timer.

Runs the real `mzcache run` (from $MZ_BIN, default build/mzcache) with the
real SmolLM2-135M Q4_1 on a prompt of known length, greedy, a fixed number
of tokens, with a prefill step of 16 tokens:
  - with the variable: one prefill line and one decode line on stderr; the
    prefill line counts the prompt's tokens in ceil(tokens / 16) steps, the
    decode line one token a step; every stage is named once, the stages'
    times add up to the line's total, their shares to 100 %, and the matrix
    products (qkv, wo, gate_up, down) take some of the time;
  - without it (and with MZ_FORWARD_PHASES=0): no such line, and the same
    generated text (timing changes nothing computed).

Exit 0 pass, 1 fail, 77 skip (no model or binary). No wall-clock assertion.
"""
import os
import re
import subprocess
import sys

MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
STAGES = ["embed", "acquire", "attn_norm", "qkv", "qkv_post", "attention", "wo", "ffn_norm",
          "gate_up", "ffn_act", "down", "resid", "logits"]
N_PREDICT = 6
BATCH = 16

failures = 0
passes = 0


def check(ok, what):
    global failures, passes
    if ok:
        passes += 1
    else:
        failures += 1
        print(f"FAIL: {what}", flush=True)


def run(env_value):
    env = dict(os.environ)
    env.pop("MZ_FORWARD_PHASES", None)
    if env_value is not None:
        env["MZ_FORWARD_PHASES"] = env_value
    prompt = "The quick brown fox jumps over the lazy dog. " * 6
    p = subprocess.run([os.environ.get("MZ_BIN", "build/mzcache"), "run", "-m", MODEL, "-p", prompt,
                        "-n", str(N_PREDICT), "--temp", "0", "-t", "2", "-b", str(BATCH), "-c", "512"],
                       capture_output=True, text=True, timeout=600, env=env)
    return p.returncode, p.stdout, p.stderr


def parse(line):
    m = re.match(r"forward phases, (prefill|decode): (\d+) steps, (\d+) tokens, ([0-9.]+) ms, threads (\d+):(.*)$",
                 line)
    if not m:
        return None
    stages = re.findall(r" ([a-z_]+)=([0-9.]+)ms\(([0-9.]+)%\)", m.group(6))
    return {"kind": m.group(1), "steps": int(m.group(2)), "tokens": int(m.group(3)), "ms": float(m.group(4)),
            "threads": int(m.group(5)), "stages": stages}


def main():
    binary = os.environ.get("MZ_BIN", "build/mzcache")
    if not os.path.exists(MODEL) or not os.path.exists(binary):
        print(f"test_forward_phases: skipped: needs {MODEL} and {binary}")
        return 77

    rc, out_on, err_on = run("1")
    check(rc == 0, f"mzcache run with MZ_FORWARD_PHASES=1 exits 0 ({rc}): {err_on[-400:]}")
    lines = [parse(l) for l in err_on.splitlines() if l.startswith("forward phases")]
    check(all(lines), f"every phase line parses: {err_on[-800:]}")
    lines = [l for l in lines if l]
    by_kind = {l["kind"]: l for l in lines}
    check(len(lines) == 2 and set(by_kind) == {"prefill", "decode"},
          f"one prefill and one decode line ({[l['kind'] for l in lines]})")
    pre, dec = by_kind.get("prefill"), by_kind.get("decode")
    if pre:
        check(pre["tokens"] > BATCH, f"the prompt is longer than one step ({pre['tokens']} tokens)")
        check(pre["steps"] == (pre["tokens"] + BATCH - 1) // BATCH,
              f"prefill steps of {BATCH}: {pre['steps']} for {pre['tokens']} tokens")
    if dec:
        check(dec["steps"] == dec["tokens"] and 1 <= dec["steps"] <= N_PREDICT,
              f"decode: one token a step, at most {N_PREDICT} ({dec['steps']} steps, {dec['tokens']} tokens)")
    for l in lines:
        names = [s[0] for s in l["stages"]]
        check(names == STAGES, f"{l['kind']}: every stage once, in order ({names})")
        ms = sum(float(s[1]) for s in l["stages"])
        pct = sum(float(s[2]) for s in l["stages"])
        check(abs(ms - l["ms"]) <= 0.05 * len(STAGES) + 1e-3 * l["ms"],
              f"{l['kind']}: stages add up to the total ({ms:.1f} against {l['ms']:.1f} ms)")
        check(abs(pct - 100.0) <= 0.05 * len(STAGES) + 0.01, f"{l['kind']}: shares add up to 100 % ({pct:.2f})")
        mm = sum(float(s[1]) for s in l["stages"] if s[0] in ("qkv", "wo", "gate_up", "down"))
        check(mm > 0, f"{l['kind']}: the matrix products take time ({mm} ms)")
        check(l["threads"] == 2, f"{l['kind']}: the session's 2 threads ({l['threads']})")

    for value in (None, "0"):
        rc, out_off, err_off = run(value)
        check(rc == 0, f"mzcache run with MZ_FORWARD_PHASES={value} exits 0 ({rc})")
        check("forward phases" not in err_off, f"MZ_FORWARD_PHASES={value}: no phase line")
        check(out_off == out_on, f"MZ_FORWARD_PHASES={value}: the same text as with the timer "
                                 f"({out_off!r} against {out_on!r})")

    print(f"test_forward_phases: {passes} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
