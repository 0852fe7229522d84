#!/usr/bin/env python3
"""test_cli_crash.py: kill -9 at random moments of `chat --session` (issue 31,
"crash consistency"), through a real pseudo-terminal, greedy decoding, one
store. MZ_CRASH_ITERS iterations (default 12; docs/RELIABILITY.md has a
100-iteration run). Each iteration resumes the session, checks it, then does
one random thing and is killed at a random moment of it:

  answer   a message, killed while it is answered (or just after);
  after    a message, killed as soon as the prompt is back;
  clear    /clear, killed right after it is typed;
  resume   killed while the session is being resumed (before the prompt).

The model: the turns whose answer came back (the prompt returned) are
"completed"; a /clear whose "(conversation cleared)" came back empties them
(one killed before saying so may have emptied them or not).
Every resume must show exactly the completed turns of the conversation, in
order (a turn killed before its prompt returned may be there too, whole, or
be missing: the kill came before or after its commit), never a turn from
before a completed /clear, and never start silently empty when completed
turns exist: a resume either shows them or says what it recomputes or drops.

At the end it prints the actions' counts and what the checked resumes said
about the stored KV (resumed, no stored KV, dropped or recomputed tokens),
so a run shows which paths its kills exercised.

Exit 0 pass, 1 fail, 77 skip (no model or binary). No wall-clock assertion:
the random delays only pick the moment of the kill.
"""
import os
import random
import re
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptyutil import Term  # noqa: E402
from serveutil import MODEL, Checks  # noqa: E402

T = Checks("test_cli_crash")
PROMPT = r"(^|\n)> $"


def shown_turns(out):
    """The user lines the resume printed before the first prompt (print_history)."""
    head = out.split("mzcache chat: type a message", 1)[0]
    return re.findall(r"^> (msg \d+)\r?$", head, re.M)


def resume_notes(out):
    """What the resume said about the stored KV (chat_store.c), by kind."""
    head = out.split("mzcache chat: type a message", 1)[0]
    notes = (("resumed", r"session crash resumed"), ("no stored KV", r"no stored KV"),
             ("dropped tokens", r"dropped \d+ stored tokens"), ("recomputes tokens", r"not in the stored KV"))
    return [what for what, rx in notes if re.search(rx, head)] or ["nothing (new)"]


def main():
    binary = T.binary_and_model()
    iters = int(os.environ.get("MZ_CRASH_ITERS", "12"))
    seed = int(os.environ.get("MZ_CRASH_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    print(f"test_cli_crash: {iters} iterations, seed {seed}", flush=True)
    base = os.environ.get("MZ_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="cli-crash-", dir=base)
    env = dict(os.environ, TERM="xterm", HOME=tmp, XDG_CACHE_HOME=os.path.join(tmp, "cache"), LANG="C.UTF-8",
               LC_ALL="C.UTF-8")
    args = [binary, "chat", "-m", MODEL, "-t", "2", "-c", "2048", "-n", "12", "--greedy", "-q", "--no-progress",
            "--store", os.path.join(tmp, "store"), "--session", "crash"]
    completed = []      # user lines of completed turns, since the last completed /clear
    maybe = None        # a turn whose commit the kill may or may not have preceded
    maybe_clear = False  # a /clear killed before it said so: committed or not
    counts = {}
    said = {}  # what the checked resumes said about the stored KV
    k = 0
    for it in range(iters):
        action = rng.choice(["answer", "after", "clear", "resume"])
        counts[action] = counts.get(action, 0) + 1
        t = Term(args, env)
        if action == "resume":
            time.sleep(rng.uniform(0.0, 1.5))
            os.kill(t.pid, signal.SIGKILL)
            t.wait_exit(30)
            continue  # a killed resume changes nothing: the same expectations hold next time
        if not T.check(t.wait_for(PROMPT, 180) is not None, f"iter {it}: the prompt comes back:\n{t.out[-600:]}"):
            os.kill(t.pid, signal.SIGKILL)
            t.wait_exit(30)
            break
        got = shown_turns(t.out)
        for what in resume_notes(t.out):
            said[what] = said.get(what, 0) + 1
        want = list(completed)
        ok = got == want or (maybe is not None and got == want + [maybe]) or (maybe_clear and got == [])
        T.check(ok, f"iter {it}: the resume shows {got}, the completed turns are {want} (maybe {maybe}):\n"
                    f"{t.out[-800:]}")
        if completed and not got and not maybe_clear:
            T.check(False, f"iter {it}: a silent reset:\n{t.out[-800:]}")
        completed = got  # what the session now holds is the base of what follows
        maybe = None
        maybe_clear = False
        time.sleep(0.3)
        mark = len(t.out)
        if action == "clear":
            t.send("/clear\r")
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0.0, 0.3))
            else:
                t.wait_for(r"conversation cleared", 30, mark)
            cleared = re.search(r"conversation cleared", t.out[mark:]) is not None
            os.kill(t.pid, signal.SIGKILL)
            t.wait_exit(30)
            if cleared:
                completed = []
            else:
                maybe_clear = True
            continue
        k += 1
        line = f"msg {k}"
        t.send(line + "\r")
        if action == "answer":
            time.sleep(rng.uniform(0.05, 2.0))
        else:
            t.wait_for(re.escape(line) + r"\r?\n[\s\S]*?\n> ", 180, mark)
        done = re.search(re.escape(line) + r"\r?\n[\s\S]*?\n> ", t.out[mark:]) is not None
        os.kill(t.pid, signal.SIGKILL)
        t.wait_exit(30)
        if done:
            completed.append(line)
        else:
            maybe = line
    print(f"test_cli_crash: actions {counts}", flush=True)
    print(f"test_cli_crash: resumes said {said}", flush=True)


if __name__ == "__main__":
    main()
    T.finish()
