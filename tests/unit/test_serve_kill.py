#!/usr/bin/env python3
"""test_serve_kill.py: kill -9 of `mzcache serve` during an eviction and
during a restore, then a restart (issue 10).

A real daemon (the `mzcache` binary from $MZ_BIN, default build/mzcache) on a
free loopback port, the real model (models/SmolLM2-135M-Instruct.Q4_1.gguf),
a private swap directory, greedy decoding, the lossless raw KV codec and
"storage" placement (evicted KV goes to the swap file, so there is a file to
leave behind). Three processes, one conversation replayed in each:

  S1  M1 -> A1, M2 -> A2, M2 again -> A2b: the unpressured reference answers.
      POST /mz/evict {"all": true}; SIGKILL as soon as the swap file has
      data, before the response (kill 1: during an eviction).
  S2  restart on the same port: starts cleanly, the dead process's swap file
      is removed (and never read: a new file always gets a new name), no
      memory state carried over, no descriptor of the old file. M1 == A1,
      M2 == A2; evict all (swap file 0600 in a 0700 directory); M2 == A2b
      (restored from the swap file). Evict all again, send M3 and SIGKILL
      once the process has read from disk, before the response (kill 2:
      during the restore of the next request).
  S3  restart: the same start-up checks; M1 == A1, M2 == A2, evict all,
      M2 == A2b; SIGTERM: exit 0 and the swap directory is empty.
  S4  hardening: a --swap-dir that cannot be created (below a regular file)
      is refused at start, naming it; one made unusable after the start (the
      directory replaced by a file) fails the eviction with 500 and a
      message that names no path; the daemon keeps answering.

Exit 0 pass, 1 fail, 77 skip (no model or binary). Python 3 standard library
only. No wall-clock assertion: timeouts only bound waits.
"""
import http.client
import os
import shutil
import stat
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serveutil  # noqa: E402
from serveutil import MODEL, ROOT, Checks, free_port, test_tmp  # noqa: E402

NAME = "test_serve_kill"
T = Checks(NAME)
check = T.check


class Server(serveutil.Server):
    """--no-store: the swap files under test are the swap directory's (a stored
    session's data file is its swap file, in the store)."""

    def __init__(self, binary, port, swap_dir, log_path, extra=()):
        super().__init__(binary, log_path, ["--swap-dir", swap_dir, "--codec", "raw", "--kv-placement", "storage",
                                            "--no-pressure", "-t", "2", "-c", "2048", "--temp", "0", "-v",
                                            "--no-store", *extra],
                         port)

    def chat(self, messages):
        st, j = self.json("POST", "/v1/chat/completions",
                          {"messages": messages, "max_tokens": 24, "temperature": 0})
        if st != 200 or not j:
            print(f"chat: HTTP {st}: {j}", flush=True)
            return None
        return j["choices"][0]["message"]["content"]


def swap_files(swap_dir):
    try:
        return sorted(n for n in os.listdir(swap_dir) if n.startswith("mzswap-") and n.endswith(".swp"))
    except FileNotFoundError:
        return []


def files_of(swap_dir, pid):
    return [n for n in swap_files(swap_dir) if n.startswith(f"mzswap-{pid}-")]


def proc_io(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                k, v = line.split(":")
                out[k.strip()] = int(v)
    except OSError:
        pass
    return out


class Pending:
    """One request on its own thread; records whether a response arrived."""

    def __init__(self, srv, method, path, body):
        self.status = None
        self.error = None
        self.t = threading.Thread(target=self._run, args=(srv, method, path, body), daemon=True)
        self.t.start()

    def _run(self, srv, method, path, body):
        try:
            self.status, _ = srv.request(method, path, body, timeout=120)
        except (OSError, http.client.HTTPException) as e:
            self.error = e

    def done(self):
        return not self.t.is_alive()


def startup_checks(srv, swap_dir, dead_pid, tag):
    log = srv.log_text()
    check(not files_of(swap_dir, dead_pid), f"{tag}: the dead process's swap file is gone")
    check("removed 1 stale swap file" in log, f"{tag}: the restart logged the stale file's removal")
    st, j = srv.json("GET", "/mz/status")
    check(st == 200 and j is not None, f"{tag}: /mz/status answers")
    if j:
        m = j["memory"]
        check(m["context_tokens"] == 0, f"{tag}: empty conversation at start ({m['context_tokens']} tokens)")
        check(m["remaining_pct"] == 100.0, f"{tag}: everything resident at start ({m['remaining_pct']}%)")
        check(m["kv"]["stored_bytes"] == 0 and m["swap_file_bytes"] == 0, f"{tag}: nothing in storage at start")
        check(j["events_total"] == 0, f"{tag}: no eviction events carried over")
    fds = []
    for fd in os.listdir(f"/proc/{srv.pid}/fd"):
        try:
            fds.append(os.readlink(f"/proc/{srv.pid}/fd/{fd}"))
        except OSError:
            pass
    check(not any(f"mzswap-{dead_pid}-" in t for t in fds), f"{tag}: no descriptor of the old swap file")
    check(not any("(deleted)" in t and "mzswap" in t for t in fds), f"{tag}: no deleted swap file held open")


def main():
    binary = T.binary_and_model()
    tmp = test_tmp("serve-kill-")
    swap_dir = os.path.join(tmp, "swap", "private")  # created by the daemon
    port = free_port()

    u1 = ("Here are some notes about a small garden. " +
          "The garden has tomatoes, beans, basil, mint and two apple trees. " * 12 +
          "Summarize the notes in one sentence.")
    m1 = [{"role": "system", "content": "You are a concise assistant."}, {"role": "user", "content": u1}]
    servers = []

    def restart(tag, after, dead_pid):
        """A new server on the same port after a kill: its start-up checks and
        the reference answers; None when it does not start."""
        srv = Server(binary, port, swap_dir, os.path.join(tmp, f"{tag.lower()}.log"))
        servers.append(srv)
        if not check(srv.wait_ready(), f"{tag} starts on the same port after {after}"):
            print(srv.log_text())
            return None
        startup_checks(srv, swap_dir, dead_pid, tag)
        check(srv.chat(m1) == a1, f"{tag}: M1 answer equals the unpressured one")
        check(srv.chat(m2) == a2, f"{tag}: M2 answer equals the unpressured one")
        return srv

    try:
        # ---- S1: reference answers, then kill -9 during an eviction ----------------------
        s1 = Server(binary, port, swap_dir, os.path.join(tmp, "s1.log"))
        servers.append(s1)
        if not check(s1.wait_ready(), "S1 starts"):
            print(s1.log_text())
            return 1
        a1 = s1.chat(m1)
        check(bool(a1), "S1: M1 answered")
        m2 = m1 + [{"role": "assistant", "content": a1 or ""}, {"role": "user", "content": "Which plants are herbs?"}]
        a2 = s1.chat(m2)
        a2b = s1.chat(m2)
        check(bool(a2) and bool(a2b), "S1: M2 answered twice")
        print(f"S1 reference: A1={a1!r} A2={a2!r} A2b={a2b!r}", flush=True)
        m3 = m2 + [{"role": "assistant", "content": a2 or ""}, {"role": "user", "content": "And the fruit?"}]

        io0 = proc_io(s1.pid)
        ev = Pending(s1, "POST", "/mz/evict", {"all": True})
        seen = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not ev.done():
            fs = files_of(swap_dir, s1.pid)
            if fs:
                try:
                    seen = os.stat(os.path.join(swap_dir, fs[0])).st_size
                except FileNotFoundError:
                    seen = 0
                if seen > 0:
                    break
        s1.kill9()
        ev.t.join(10)
        io1 = proc_io(s1.pid)  # gone: empty
        during = ev.status is None
        check(during, f"kill 1 landed before the eviction finished (response: {ev.status})")
        stale = files_of(swap_dir, s1.pid)
        check(len(stale) == 1, f"kill 1 left the dead process's swap file behind ({stale})")
        print(f"kill 1: swap file {seen} bytes at the kill; left behind: {stale}", flush=True)
        del io0, io1

        # ---- S2: restart, correct answers, restore works; kill -9 during a restore ----------
        s2 = restart("S2", "kill 1", s1.pid)
        if not s2:
            return 1
        st, j = s2.json("POST", "/mz/evict", {"all": True})
        check(st == 200 and j and j["memory"]["remaining_pct"] == 0.0, f"S2: evict all ({st})")
        fs = files_of(swap_dir, s2.pid)
        check(len(fs) == 1, f"S2: one swap file of its own ({swap_files(swap_dir)})")
        if fs:
            mode = stat.S_IMODE(os.stat(os.path.join(swap_dir, fs[0])).st_mode)
            check(mode == 0o600, f"S2: swap file mode {oct(mode)} is 0600")
        dmode = stat.S_IMODE(os.stat(swap_dir).st_mode)
        pmode = stat.S_IMODE(os.stat(os.path.dirname(swap_dir)).st_mode)
        check(dmode == 0o700 and pmode == 0o700, f"S2: swap directories {oct(pmode)}/{oct(dmode)} are 0700")
        check(s2.chat(m2) == a2b, "S2: M2 after evict all (restored from the swap file) equals the unpressured one")
        st, j = s2.json("POST", "/mz/evict", {"all": True})
        check(st == 200, f"S2: evict all again ({st})")

        before = proc_io(s2.pid).get("read_bytes", 0)
        rq = Pending(s2, "POST", "/v1/chat/completions", {"messages": m3, "max_tokens": 24, "temperature": 0})
        grew = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not rq.done():
            grew = proc_io(s2.pid).get("read_bytes", 0) - before
            if grew >= 1 << 20:
                break
        s2.kill9()
        rq.t.join(10)
        check(rq.status is None, f"kill 2 landed before the response (response: {rq.status})")
        check(grew >= 1 << 20, f"kill 2 landed during the restore (read {grew} bytes from disk first)")
        stale = files_of(swap_dir, s2.pid)
        check(len(stale) == 1, f"kill 2 left the dead process's swap file behind ({stale})")
        print(f"kill 2: {grew} bytes read from disk at the kill; left behind: {stale}", flush=True)

        # ---- S3: restart again; correct answers; clean exit removes the swap file --------------
        s3 = restart("S3", "kill 2", s2.pid)
        if not s3:
            return 1
        st, _ = s3.json("POST", "/mz/evict", {"all": True})
        check(st == 200, f"S3: evict all ({st})")
        check(s3.chat(m2) == a2b, "S3: M2 after evict all equals the unpressured one")
        rc = s3.stop()
        check(rc == 0, f"S3: SIGTERM exit status {rc}")
        check(swap_files(swap_dir) == [], f"S3: swap file removed on exit ({swap_files(swap_dir)})")

        # ---- S4: an unusable swap directory ------------------------------------------------
        # Given at start: refused then, naming it (issue 20).
        blocker = os.path.join(tmp, "not-a-dir")
        with open(blocker, "w") as f:
            f.write("x")
        bad_dir = os.path.join(blocker, "swap")
        p = subprocess.run([binary, "serve", "-m", MODEL, "--port", str(free_port()), "--swap-dir", bad_dir,
                            "--no-pressure"], capture_output=True, text=True, cwd=ROOT, timeout=120)
        check(p.returncode == 2 and bad_dir in p.stderr,
              f"S4: an unusable --swap-dir is refused at start, naming it ({p.returncode}: {p.stderr.strip()})")
        # Made unusable after the start: a clean 500 that names no path.
        late_dir = os.path.join(tmp, "late-swap")
        s4 = Server(binary, free_port(), late_dir, os.path.join(tmp, "s4.log"))
        servers.append(s4)
        if check(s4.wait_ready(), "S4 starts"):
            check(s4.chat(m1[:1] + [{"role": "user", "content": "Say hi."}]) is not None, "S4: chat before")
            shutil.rmtree(late_dir)
            with open(late_dir, "w") as f:
                f.write("x")
            st, raw = s4.request("POST", "/mz/evict", {"all": True})
            body = raw.decode(errors="replace")
            check(st == 500, f"S4: eviction into an unusable swap directory fails with 500 ({st}: {body})")
            check(tmp not in body and "late-swap" not in body and "mzswap" not in body and "/tmp" not in body,
                  f"S4: the error names no path ({body})")
            check("late-swap" in s4.log_text(), "S4: the log (not the client) gets the details")
            check(s4.chat(m1[:1] + [{"role": "user", "content": "Say hi."}]) is not None,
                  "S4: still answers after the failed eviction")
            check(s4.stop() == 0, "S4: clean exit")
    finally:
        for s in servers:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
            if not s.log.closed:
                s.log.close()
    if T.failures:
        print(f"{NAME}: {T.passes} passed, {T.failures} failed; logs in {tmp}")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{NAME}: {T.passes} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
