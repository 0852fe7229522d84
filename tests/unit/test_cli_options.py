#!/usr/bin/env python3
"""test_cli_options.py: rough edges of the `mzcache` command line (issue 31
items 11 and 12), the real binary and model, stdin not a terminal.

  values     an option missing its value is named (`run -m M -p`), and the
             next option is not taken as one (`run -m -p hi`)
  seed       `-s -1` is a random seed: accepted, and two runs at
             temperature 1 differ
  prompt     `-p -` reads stdin, `-f FILE` reads a file (the same greedy
             answer as -p TEXT); `--system` without `--chat` is refused; a
             prompt that fills the context says so
  ids        `run --show-ids` prints each generated token's id (those of
             the answer's text) and its logit lead over the runner-up
  notice     the context-full notice starts a line of its own
  sessions   `sessions --delete ID --store DIR` with no daemon deletes a
             `chat --session` conversation (manifest, data file, history)
  bench      `bench ttft --modes os-paging` alone runs (its calibration
             context was made in mode mzcache on an os-paging model)

Exit 0 pass, 1 fail, 77 skip (no model or binary). No wall-clock assertion.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serveutil import MODEL, ROOT, Checks, free_port, test_tmp  # noqa: E402

T = Checks("test_cli_options")


def run(binary, args, stdin=None):
    p = subprocess.run([binary, *args], input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=300)
    return p.returncode, p.stdout, p.stderr


def main():
    binary = T.binary_and_model()
    tmp = test_tmp("cli-options-")
    m = ["-m", MODEL, "-t", "2"]

    rc, out, err = run(binary, ["run", *m, "-p"])
    T.check(rc == 2 and "-p needs a value" in err, f"run -p at the end: {rc} {err!r}")
    rc, out, err = run(binary, ["run", "-m", "-p", "hi"])
    T.check(rc == 2 and "-m needs a value" in err and "'-p'" in err, f"run -m -p hi: {rc} {err!r}")
    rc, out, err = run(binary, ["run", *m, "-p", "hi", "--system", "x"])
    T.check(rc == 2 and "--system needs --chat" in err, f"--system without --chat: {rc} {err!r}")
    rc, out, err = run(binary, ["chat", *m, "--system"])
    T.check(rc == 2 and "--system needs a value" in err, f"chat --system at the end: {rc} {err!r}")

    answers = set()
    for _ in range(2):
        rc, out, err = run(binary, ["run", *m, "-s", "-1", "--temp", "1", "-n", "12", "-q", "-p", "Once upon a time"])
        T.check(rc == 0, f"-s -1 accepted: {rc} {err!r}")
        answers.add(out)
    T.check(len(answers) == 2, f"-s -1 draws a random seed: {answers}")

    rc, ref, err = run(binary, ["run", *m, "--greedy", "-n", "8", "-q", "-p", "The sky is"])
    T.check(rc == 0 and ref.strip(), f"run -p TEXT: {rc} {err!r}")
    rc, out, err = run(binary, ["run", *m, "--greedy", "-n", "8", "-q", "-p", "-"], stdin="The sky is")
    T.check(rc == 0 and out == ref, f"-p - reads stdin: {out!r} vs {ref!r} {err!r}")
    pf = os.path.join(tmp, "prompt.txt")
    with open(pf, "w") as f:
        f.write("The sky is")
    rc, out, err = run(binary, ["run", *m, "--greedy", "-n", "8", "-q", "-f", pf])
    T.check(rc == 0 and out == ref, f"-f FILE reads the file: {out!r} vs {ref!r} {err!r}")
    # --show-ids: the answer unchanged; one "token ID lead L" line per generated
    # token, the ids those of the printed text (tokenized again, past the
    # prompt's), each greedy token at or above the runner-up (lead >= 0).
    rc, out, err = run(binary, ["run", *m, "--greedy", "-n", "8", "-q", "--show-ids", "-p", "The sky is"])
    shown = [ln.split() for ln in err.splitlines() if ln.startswith("token ")]
    ok = rc == 0 and out == ref and len(shown) == 8 and all(len(f) == 4 and f[2] == "lead" for f in shown)
    T.check(ok, f"--show-ids: {rc} {out!r} {err!r}")
    if ok:
        _, prompt_ids, _ = run(binary, ["tokenize", *m, "-p", "The sky is"])
        _, all_ids, _ = run(binary, ["tokenize", *m, "-p", ref.rstrip("\n")])
        n_prompt = len(prompt_ids.split())
        T.check([f[1] for f in shown] == all_ids.split()[n_prompt:],
                f"--show-ids ids {[f[1] for f in shown]} vs the answer's {all_ids.split()[n_prompt:]}")
        T.check(all(float(f[3]) >= 0 for f in shown), f"greedy leads are >= 0: {shown}")
    rc, out, err = run(binary, ["run", *m, "-f", os.path.join(tmp, "missing.txt")])
    T.check(rc == 2 and "cannot read" in err, f"-f MISSING: {rc} {err!r}")
    rc, out, err = run(binary, ["run", *m, "-c", "1", "-p", "hi"])
    T.check(rc != 0 and "no room" in err, f"a prompt that fills the context: {rc} {err!r}")

    # The notice on its own line: stdout and stderr into one pipe.
    p = subprocess.run([binary, "run", *m, "--greedy", "-c", "24", "-n", "100", "-q", "-p", "Once upon a time, there was a"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, timeout=300)
    lines = p.stdout.splitlines()
    T.check(any(ln.startswith("mzcache run: stopped: the context") for ln in lines),
            f"the context-full notice starts its own line: {p.stdout!r}")

    # sessions --delete without a daemon: a chat --session conversation.
    store = os.path.join(tmp, "store")
    p = subprocess.run([binary, "chat", *m, "--greedy", "-n", "4", "-q", "--store", store, "--session", "notes"],
                       input="hello\n", capture_output=True, text=True, cwd=ROOT, timeout=300)
    files = sorted(os.listdir(store)) if os.path.isdir(store) else []
    T.check(p.returncode == 0 and "notes.chat" in files and "notes.kv" in files, f"a stored chat: {files}")
    port = str(free_port())
    rc, out, err = run(binary, ["sessions", "--port", port, "--delete", "notes", "--store", store])
    left = [f for f in os.listdir(store) if f.startswith("notes.")]
    T.check(rc == 0 and left == [], f"sessions --delete with no daemon: {rc} {out!r} {err!r}, left {left}")
    rc, out, err = run(binary, ["sessions", "--port", port, "--delete", "notes", "--store", store])
    T.check(rc == 1 and "no stored session" in err, f"deleting it again: {rc} {err!r}")
    rc, out, err = run(binary, ["sessions", "--delete", "../x"])
    T.check(rc == 2 and "not a session id" in err, f"a bad id: {rc} {err!r}")

    # bench ttft with os-paging alone (its model is file-mapped for os-paging only).
    bdir = os.path.join(tmp, "bench")
    rc, out, err = run(binary, ["bench", "ttft", "--models", MODEL, "--ctx", "256", "--levels", "50", "--modes",
                                "os-paging", "--no-plot", "--no-global-drop", "--no-inmem", "--swap-dir",
                                os.path.join(tmp, "bswap"), "-o", bdir])
    csv = open(os.path.join(bdir, "ttft.csv")).read() if os.path.exists(os.path.join(bdir, "ttft.csv")) else ""
    T.check(rc == 0 and "load the model again" not in err and "os-paging" in csv,
            f"bench ttft --modes os-paging alone: {rc} {err[-400:]!r}")

    # bench ttft's default codec is the engine's (auto): the rows name the one
    # chosen (no device profile here: q8), and the summary finds them.
    adir = os.path.join(tmp, "bench-auto")
    rc, out, err = run(binary, ["bench", "ttft", "--models", MODEL, "--ctx", "256", "--levels", "50", "--modes",
                                "mzcache", "--runs", "1", "--no-plot", "--no-global-drop", "--profile",
                                os.path.join(tmp, "no-such-profile.json"), "--swap-dir",
                                os.path.join(tmp, "aswap"), "-o", adir])
    csv = open(os.path.join(adir, "ttft.csv")).read() if os.path.exists(os.path.join(adir, "ttft.csv")) else ""
    md = open(os.path.join(adir, "ttft.md")).read() if os.path.exists(os.path.join(adir, "ttft.md")) else ""
    summary = md.split("## TTFT (s) and speedup", 1)[-1].split("\n## ", 1)[0]
    row50 = [ln for ln in summary.splitlines() if ln.startswith("|") and "| 50 |" in ln]
    T.check(rc == 0 and ",mzcache,auto:q8," in csv, f"bench ttft default codec: {rc} {err[-300:]!r} {csv[-300:]!r}")
    T.check(len(row50) == 1 and row50[0].split("|")[5].strip() not in ("", "-"),
            f"the summary's 50 % row has mzcache's TTFT: {row50!r}")


if __name__ == "__main__":
    main()
    T.finish()
