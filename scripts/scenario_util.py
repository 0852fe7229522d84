"""scenario_util.py — what the scenario drivers share (pressure_scenario.py,
multitask_scenario.py; run by scripts/pressure-scenario.sh): reads of
/proc and cgroup-v1 files that tolerate a process or file gone, an HTTP
client for the daemon on 127.0.0.1 and the wait for its start, the
pre-exec step that puts a child into a cgroup, the memory hog's line
protocol, the common options, a page-cache drop and the daemon's stop.
Only the standard library.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
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


def await_daemon(p, port_file, log_name, client_class, poll_s, port_polls, health_polls):
    """A client_class client of daemon p once it has written its port to
    port_file (up to port_polls polls poll_s apart) and answers /health (up to
    health_polls more); SystemExit, naming log_name, when p exits first."""
    for _ in range(port_polls):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        if p.poll() is not None:
            raise SystemExit(f"daemon exited early ({p.returncode}); see {log_name}")
        time.sleep(poll_s)
    c = client_class(int(open(port_file).read()))
    for _ in range(health_polls):
        try:
            c.call("GET", "/health")
            break
        except (urllib.error.URLError, ConnectionError):
            time.sleep(poll_s)
    return c


def join_cgroup(cg, oom_adj=None):
    """A preexec_fn: the child joins cgroup cg (and takes oom_score_adj oom_adj)."""
    def f():
        with open(os.path.join(cg, "cgroup.procs"), "w") as fp:
            fp.write(str(os.getpid()))
        if oom_adj is not None:
            with open("/proc/self/oom_score_adj", "w") as fp:
                fp.write(str(oom_adj))
    return f


def start_hog(program, cg):
    """The memory hog (a Python program reading "grow MIB" and "free" lines,
    answering "ok" to each) started in cgroup cg."""
    return subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, preexec_fn=join_cgroup(cg))


def hog_ask(hog, command):
    """Sends one command line; False when the hog is gone."""
    try:
        hog.stdin.write(command + "\n")
        hog.stdin.flush()
        return True
    except (BrokenPipeError, OSError):
        return False


def hog_answered(hog):
    """Waits for the answer to the last command; False unless it is "ok"."""
    try:
        return hog.stdout.readline().strip() == "ok"
    except OSError:
        return False


def release_hog(hog):
    """Frees the hog's memory, then ends it."""
    if hog_ask(hog, "free"):
        hog_answered(hog)
    hog.kill()
    hog.wait()


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
