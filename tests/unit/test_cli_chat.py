#!/usr/bin/env python3
"""test_cli_chat.py: `mzcache chat` on a terminal (issue 20), through a real
pseudo-terminal (pty.fork: the chat process is a session leader with the pty
as its controlling terminal, so the Ctrl-C byte makes the kernel's line
discipline send SIGINT, as a user's keyboard would).

Session 1 (-n 200, greedy, swap directory private, KV evicted to storage):
  - a help line at start; a first answer; /evict all puts the KV into the
    swap file (there is a file now);
  - a long answer is interrupted with Ctrl-C once it has started: the
    process lives, says the answer stopped, and shows the prompt again;
  - the next message reuses the earlier turns' tokens and the interrupted
    answer's (--timings: "reused N cached tokens"): the conversation was
    kept, with what the answer had said;
  - Ctrl-C at the prompt quits: exit 0, and no swap file is left behind.
Session 2: Ctrl-C during a long prefill drops that message and the prompt
  comes back; /help lists the commands; /foo is refused with that list, not
  sent to the model; the up arrow brings /foo back (libedit history);
  Ctrl-D at the prompt quits: exit 0.

Exit 0 pass, 1 fail, 77 skip (no model or binary). Python 3
standard library only; timeouts only bound waits.
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptyutil import Term  # noqa: E402
from serveutil import MODEL, ROOT, Checks, test_tmp  # noqa: E402

BIN = os.environ.get("MZ_BIN", os.path.join(ROOT, "build", "mzcache"))
NAME = "test_cli_chat"
T = Checks(NAME, out_label="terminal", out_tail=2500)
check = T.check


def main():
    T.binary_and_model()
    tmp = test_tmp("cli-chat-")
    swap = os.path.join(tmp, "swap")
    env = dict(os.environ, TERM="xterm", HOME=tmp, XDG_CACHE_HOME="", LANG="C.UTF-8", LC_ALL="C.UTF-8")
    args = [BIN, "chat", "-m", MODEL, "-t", "2", "-c", "1024", "-n", "200", "--greedy", "--timings",
            "--swap-dir", swap, "--kv-placement", "storage", "--codec", "raw", "--no-progress"]
    PROMPT = r"(^|\n)> "

    # ---- session 1: Ctrl-C during an answer, the swap file, Ctrl-C at the prompt ----
    t = Term(args, env)
    check(t.wait_for(r"/help") is not None, "a help line at start", t.out)
    check(t.wait_for(PROMPT) is not None, "the prompt", t.out)
    # Typed only once line editing reads the terminal: a line typed earlier
    # is echoed twice (by the terminal, then by libedit).
    time.sleep(0.5)
    mark = len(t.out)
    t.send("What is the capital of France? One word.\r")
    first = t.wait_for(r"reused (\d+) cached tokens", 180, mark)
    check(first is not None, "a first answer", t.out)
    t.wait_for(PROMPT, 30, first.end() if first else mark)
    # Evicted KV goes to the swap file (--kv-placement storage).
    mark = len(t.out)
    t.send("/evict all\r")
    check(t.wait_for(r"freed [\d.]+ MiB", 60, mark) is not None, "/evict all", t.out)
    t.wait_for(PROMPT, 30, mark)
    check(os.path.isdir(swap) and len(os.listdir(swap)) > 0, "the swap file exists after /evict all", t.out)

    time.sleep(0.3)
    mark = len(t.out)
    t.send("Write a very long story about a dragon who learns to bake bread.\r")
    # The answer has started once the model has written a few characters
    # after the last echo of the line.
    started = t.wait_for(r"bread\.\r?\n(?:(?!bread\.)[\s\S]){3,}$", 120, mark)
    check(started is not None, "the answer starts", t.out)
    t.send(b"\x03")
    stopped = t.wait_for(r"answer stopped", 60, mark)
    check(stopped is not None, "Ctrl-C during the answer stops it and says so", t.out)
    check(t.wait_for(PROMPT, 30, stopped.end() if stopped else mark) is not None,
          "the prompt comes back after Ctrl-C", t.out)
    time.sleep(0.2)
    t.pump(0.2)
    pid, st = os.waitpid(t.pid, os.WNOHANG)
    alive = check(pid == 0, f"the process lives after Ctrl-C during an answer (wait status {st:#x})", t.out)
    if alive:
        # The next message reuses the earlier turns' tokens, the interrupted
        # answer's included: the conversation was kept.
        m2 = re.search(r"reused (\d+) cached tokens", t.out[mark:])
        mark = len(t.out)
        t.send("Thank you. What was the dragon's name?\r")
        m = t.wait_for(r"reused (\d+) cached tokens", 180, mark)
        floor = int(m2.group(1)) if m2 else 0
        check(m is not None and int(m.group(1)) > floor + 20,
              "the next turn reuses the earlier turns and the interrupted answer", t.out)
        t.wait_for(PROMPT, 60, m.end() if m else mark)
        time.sleep(0.2)
        t.send(b"\x03")  # Ctrl-C at the prompt quits
        rc = t.wait_exit(60)
        check(rc == 0, f"Ctrl-C at the prompt: exit 0 (got {rc})", t.out)
    left = os.listdir(swap) if os.path.isdir(swap) else []
    check(left == [], f"no swap file left behind (found {left})", t.out)

    # ---- session 2: /help, /foo, history, Ctrl-D ----
    t = Term([BIN, "chat", "-m", MODEL, "-t", "2", "-c", "2048", "-n", "8", "--greedy", "--timings",
              "--swap-dir", swap], env)
    check(t.wait_for(PROMPT, 120) is not None, "session 2: the prompt", t.out)
    time.sleep(0.5)
    # Ctrl-C during a long prefill (about 1300 tokens, a few seconds here):
    # the message is dropped and the prompt comes back. On a fast machine
    # the prefill may be over before the Ctrl-C lands; then it stops the
    # answer instead. Either way the process lives.
    mark = len(t.out)
    t.send("Count these: " + "ab " * 1300 + "\r")
    t.wait_for(r"\r?\n", 30, len(t.out) - 1)
    time.sleep(0.5)
    t.send(b"\x03")
    how = t.wait_for(r"interrupted before the answer started|answer stopped", 120, mark)
    check(how is not None, "Ctrl-C during a long prefill stops it and says so", t.out)
    if how is not None and how.group(0) == "answer stopped":
        print(f"{NAME}: the prefill was over before Ctrl-C; it stopped the answer")
    check(t.wait_for(PROMPT, 30, how.end() if how else mark) is not None, "the prompt after Ctrl-C in a prefill",
          t.out)
    time.sleep(0.3)
    mark = help_mark = len(t.out)
    t.send("/help\r")
    check(t.wait_for(r"commands:.*/clear.*/quit", 30, mark) is not None, "/help lists the commands", t.out)
    t.wait_for(PROMPT, 30, mark)
    mark = len(t.out)
    t.send("/foo\r")
    check(t.wait_for(r"unknown command /foo.*\n.*commands:", 30, mark) is not None,
          "/foo is refused with the command list", t.out)
    t.wait_for(PROMPT, 30, mark)
    check("reused" not in t.out[help_mark:], "/help and /foo were not sent to the model", t.out)
    if "built without libedit" in t.out:
        print(f"{NAME}: the binary was built without libedit: history not checked")
    else:
        mark = len(t.out)
        t.send("\x1b[A")  # up arrow: the last line again
        time.sleep(0.3)
        t.send("\r")
        check(t.wait_for(r"unknown command /foo", 30, mark) is not None,
              "the up arrow brings /foo back (libedit history)", t.out)
        t.wait_for(PROMPT, 30, mark)
    time.sleep(0.2)
    t.send(b"\x04")
    rc = t.wait_exit(60)
    check(rc == 0, f"Ctrl-D at the prompt: exit 0 (got {rc})", t.out)

    print(f"{NAME}: {T.passes} checks passed, {T.failures} failed")
    return 1 if T.failures else 0


if __name__ == "__main__":
    sys.exit(main())
