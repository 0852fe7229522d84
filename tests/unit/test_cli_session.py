#!/usr/bin/env python3
"""test_cli_session.py: `mzcache chat --session NAME` keeps the conversation
across crashes (issue 31 items 1-3), through a real pseudo-terminal, the real
model, greedy decoding, a private store.

  reference   session "ref": "My name is Bob. Say hello.", then "What is my
              name?" (answer A2); a fresh session asked only "What is my
              name?" (answer F).
  crash       session "crash": the first turn, kill -9 as soon as the prompt
              is back, and its manifest removed (the window the issue saw:
              the history on disk, NAME.mzs not yet): the resume shows the
              earlier turn, says the stored KV is missing and recomputes it,
              keeps the history on disk (kill -9 at its prompt, and the next
              resume shows the turn again), and answers exactly A2. Then
              the same after kill -9 with the manifest left alone.
  clear       /clear, then Ctrl-D: the next resume shows no earlier turn and
              answers F; /clear then kill -9: the same.
  ids         --session anon-1 (the daemon's prefix) and --session ../evil
              are refused at once (exit 2) with the rule, before any model load.

Exit 0 pass, 1 fail, 77 skip (no model or binary). No wall-clock assertion.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptyutil import ROOT, Term  # noqa: E402
from serveutil import MODEL, Checks  # noqa: E402

T = Checks("test_cli_session")
PROMPT = r"(^|\n)> "


class Chat:
    def __init__(self, binary, store, session, env, extra=()):
        self.t = Term([binary, "chat", "-m", MODEL, "-t", "2", "-c", "1024", "-n", "24", "--greedy", "-q",
                       "--no-progress", "--store", store, "--session", session, *extra], env)
        self.ready = self.t.wait_for(PROMPT, 120) is not None
        # A resumed chat replays its turns ("> question", then the answer)
        # before its own prompt, so the first "> " may be a replayed one:
        # ready is a prompt that ends the output once the output is quiet.
        deadline = time.monotonic() + 120
        while self.ready and time.monotonic() < deadline:
            got = self.t.pump(0.5)
            if got is None:
                break
            if got is False and re.search(r"(^|\n)> $", self.t.out):
                break
        time.sleep(0.4)  # typed only once line editing reads the terminal (see test_cli_chat)

    @property
    def out(self):
        return self.t.out

    def ask(self, text):
        """The answer to TEXT: what is printed between its echo and the next prompt."""
        mark = len(self.t.out)
        self.t.send(text + "\r")
        m = self.t.wait_for(re.escape(text) + r"\r?\n([\s\S]*?)\r?\n> ", 180, mark)
        time.sleep(0.2)
        return m.group(1).strip() if m else None

    def command(self, text):
        mark = len(self.t.out)
        self.t.send(text + "\r")
        self.t.wait_for(PROMPT, 60, mark + len(text))
        time.sleep(0.2)

    def quit(self):
        self.t.send(b"\x04")
        return self.t.wait_exit(60)

    def kill9(self):
        os.kill(self.t.pid, signal.SIGKILL)
        self.t.wait_exit(30)


def main():
    binary = T.binary_and_model()
    base = os.environ.get("MZ_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="cli-session-", dir=base)
    store = os.path.join(tmp, "store")
    env = dict(os.environ, TERM="xterm", HOME=tmp, XDG_CACHE_HOME=os.path.join(tmp, "cache"), LANG="C.UTF-8",
               LC_ALL="C.UTF-8")
    Q1, Q2 = "My name is Bob. Say hello.", "What is my name?"

    # ids: refused before anything is loaded
    for bad, word in (("anon-1", "anon-"), ("../evil", "session id")):
        r = subprocess.run([binary, "chat", "-m", MODEL, "--store", store, "--session", bad], capture_output=True,
                           text=True, cwd=ROOT, timeout=60, stdin=subprocess.DEVNULL)
        T.check(r.returncode == 2 and word in r.stderr and "again" not in r.stderr,
                f"--session {bad}: exit {r.returncode}, {r.stderr.strip()!r}")

    # references
    c = Chat(binary, store, "ref", env)
    a1 = c.ask(Q1)
    a2 = c.ask(Q2)
    c.quit()
    c = Chat(binary, store, "fresh", env)
    f = c.ask(Q2)
    c.quit()
    if not T.check(a1 and a2 and f, f"reference answers: {a1!r} {a2!r} {f!r}"):
        return

    # crash right after the first answer, the manifest not yet written
    for drop_manifest in (True, False):
        sid = "crash-a" if drop_manifest else "crash-b"
        c = Chat(binary, store, sid, env)
        got1 = c.ask(Q1)
        c.kill9()
        T.check(got1 == a1, f"{sid}: first answer {got1!r} vs {a1!r}")
        if drop_manifest and os.path.exists(os.path.join(store, sid + ".mzs")):
            os.unlink(os.path.join(store, sid + ".mzs"))
        c = Chat(binary, store, sid, env)
        if drop_manifest:
            T.check(re.search(r"no stored KV.*recomputed", c.out) is not None,
                    f"{sid}: the resume says the KV is missing and recomputes:\n{c.out[-800:]}")
            # The session stored afresh replaces the lost KV, not the
            # history: killed at this prompt, before a new turn is saved,
            # the next resume must still find the conversation.
            T.check(os.path.exists(os.path.join(store, sid + ".chat")),
                    f"{sid}: the history stays on disk while its KV is recomputed: {sorted(os.listdir(store))}")
            c.kill9()
            c = Chat(binary, store, sid, env)
            T.check(re.search(r"no stored KV.*recomputed", c.out) is not None and "> " + Q1 in c.out,
                    f"{sid}: killed at the prompt of that resume, the next one shows the turn again and "
                    f"recomputes it:\n{c.out[-800:]}")
        else:  # resumed, or (killed before the write-behind) said and recomputed
            T.check(re.search(rf"session {sid} resumed|no stored KV.*recomputed", c.out) is not None,
                    f"{sid}: resumed or recomputed, and said:\n{c.out[-800:]}")
        T.check("> " + Q1 in c.out and a1 in c.out, f"{sid}: the earlier turn is shown:\n{c.out[-800:]}")
        got2 = c.ask(Q2)
        T.check(got2 == a2, f"{sid}: after kill -9 the answer is the uninterrupted one: {got2!r} vs {a2!r}")
        c.quit()

    # /clear persists, after a clean exit and after kill -9
    for how in ("quit", "kill"):
        sid = "clear-" + how
        c = Chat(binary, store, sid, env)
        c.ask(Q1)
        c.command("/clear")
        T.check("conversation cleared" in c.out, f"{sid}: /clear says so")
        if how == "quit":
            c.quit()
        else:
            c.kill9()
        c = Chat(binary, store, sid, env)
        T.check("> " + Q1 not in c.out, f"{sid}: no earlier turn comes back:\n{c.out[-800:]}")
        got = c.ask(Q2)
        T.check(got == f, f"{sid}: after /clear the answer is a fresh session's: {got!r} vs {f!r}")
        c.quit()


if __name__ == "__main__":
    main()
    T.finish()
