"""scenario_util.py — what the scenario drivers share (pressure_scenario.py,
multitask_scenario.py; run by scripts/pressure-scenario.sh): reads of
/proc and cgroup-v1 files that tolerate a process or file gone, an HTTP
client for the daemon on 127.0.0.1, the pre-exec step that puts a child
into a cgroup, the common options, a page-cache drop and the daemon's stop. Only the standard library.
"""
import argparse
import json
import os
import signal
import subprocess
import urllib.request

MiB = 1024 * 1024


def read_int(path):
    """The first number in a file; -1 when it cannot be read."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return -1


def rss_of(pid):
    """A process's resident bytes; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def oom_kills(cg):
    """The cgroup's OOM kills so far (memory.oom_control); -1 when unreadable."""
    try:
        with open(os.path.join(cg, "memory.oom_control")) as f:
            for line in f:
                k, v = line.split()
                if k == "oom_kill":
                    return int(v)
    except (OSError, ValueError):
        pass
    return -1


class Client:
    """JSON over HTTP to the daemon; call_timeout bounds each call (s)."""
    call_timeout = 600

    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def call(self, method, path, body=None, timeout=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout or self.call_timeout) as r:
            return json.loads(r.read())


def join_cgroup(cg, oom_adj=None):
    """A preexec_fn: the child joins cgroup cg (and takes oom_score_adj oom_adj)."""
    def f():
        with open(os.path.join(cg, "cgroup.procs"), "w") as fp:
            fp.write(str(os.getpid()))
        if oom_adj is not None:
            with open("/proc/self/oom_score_adj", "w") as fp:
                fp.write(str(oom_adj))
    return f


def arg_parser():
    """The drivers' common options: --bin, --model, --cgroup, --out."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--cgroup", required=True)
    ap.add_argument("--out", required=True)
    return ap


def drop_page_cache(path, log):
    """Drops path from the page cache (a page cached by an earlier process
    stays charged to that process's cgroup); says so through log when it
    cannot."""
    try:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    except OSError as e:
        log(f"cannot drop {path} from the page cache: {e}")


def stop_daemon(p):
    """SIGTERM, 30 s to exit, then SIGKILL."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
