"""serveutil.py: what the daemon tests written in Python share (not a test:
ctest runs only test_*.py). A real `mzcache serve` on a free loopback port,
raw HTTP through http.client, pass/fail counting, honest skips.

    t = Checks("test_x")        t.check(cond, what), t.skip(why) (exit 77)
    binary = t.binary_and_model(); tmp = test_tmp("x-")
    srv = Server(binary, log_path, serve_args)
    srv.wait_ready(); srv.request(...); srv.json(...); srv.kill9(); srv.stop()
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


class Checks:
    """out_label: a failed check(cond, what, out) also prints the last
    out_tail characters of out (a command's output, a terminal) under it."""

    def __init__(self, name, out_label=None, out_tail=3000):
        self.name = name
        self.passes = 0
        self.failures = 0
        self.out_label = out_label
        self.out_tail = out_tail

    def check(self, cond, what, out=""):
        if cond:
            self.passes += 1
        elif self.out_label:
            self.failures += 1
            tail = out[-self.out_tail:] if isinstance(out, str) else ""
            print(f"FAIL: {what}\n--- {self.out_label} ---\n{tail}\n---", flush=True)
        else:
            self.failures += 1
            print(f"FAIL: {what}", flush=True)
        return cond

    def skip(self, why):
        print(f"{self.name}: SKIP: {why}", flush=True)
        sys.exit(77)

    def finish(self):
        print(f"{self.name}: {self.passes} passed, {self.failures} failed", flush=True)
        sys.exit(1 if self.failures else 0)

    def binary_and_model(self):
        """The mzcache binary and the model, or a skip saying which is absent."""
        binary = os.environ.get("MZ_BIN", os.path.join(ROOT, "build", "mzcache"))
        if not os.path.exists(MODEL):
            self.skip(f"model {MODEL} absent (make model)")
        if not os.access(binary, os.X_OK):
            self.skip(f"binary {binary} absent")
        return binary


def test_tmp(prefix):
    """A new directory under $MZ_TEST_TMP (the system's temporary directory
    when unset)."""
    base = os.environ.get("MZ_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_files_settle(path_prefix, quiet_s=1.5, timeout_s=60):
    """Until a stored session's files (PREFIX.mzs, PREFIX.kv) exist and stop
    changing for quiet_s: the write-behind has written its chunks."""
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = tuple(os.stat(path_prefix + ext).st_size if os.path.exists(path_prefix + ext) else -1
                    for ext in (".mzs", ".kv"))
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s and -1 not in now:
            return True
        time.sleep(0.1)
    return False


def stop_process(proc, sig=signal.SIGTERM, timeout_s=60):
    """Send sig, wait up to timeout_s, then SIGKILL; the exit status."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


class Server:
    """`mzcache serve -m MODEL --host 127.0.0.1 --port PORT ARGS...`, its
    output in log_path."""

    def __init__(self, binary, log_path, args, port=None):
        self.port = port or free_port()
        self.log_path = log_path
        self.log = open(log_path, "w")
        argv = [binary, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", str(self.port), *args]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.pid = self.proc.pid

    def wait_ready(self, timeout_s=180):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                st, _ = self.request("GET", "/health", timeout=2)
                if st == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def raw(self, method, path, data=None, headers=None, timeout=300):
        """data: bytes sent as they are."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=data, headers=dict(headers or {}))
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def request(self, method, path, body=None, headers=None, timeout=300):
        data = json.dumps(body).encode() if body is not None else None
        h = dict(headers or {})
        if data:
            h["Content-Type"] = "application/json"
        return self.raw(method, path, data, h, timeout)

    def json(self, method, path, body=None, headers=None, timeout=300):
        st, raw = self.request(method, path, body, headers, timeout)
        try:
            return st, json.loads(raw)
        except ValueError:
            return st, None

    def log_text(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def kill9(self):
        """SIGKILL, then reap it as a supervisor would (a zombie still "exists")."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()

    def stop(self):
        """SIGTERM and wait; the exit status."""
        rc = stop_process(self.proc)
        self.log.close()
        return rc
