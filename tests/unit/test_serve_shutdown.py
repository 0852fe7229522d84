#!/usr/bin/env python3
"""test_serve_shutdown.py: graceful shutdown of `mzcache serve` (issue 20).

A real daemon (the `mzcache` binary from $MZ_BIN, default build/mzcache) on a
free loopback port, the real model (models/SmolLM2-135M-Instruct.Q4_1.gguf),
greedy decoding, --token-delay so that a request is still running when the
signal comes. In each case a reference answer is taken first (its own
session), then the same request runs on a second session and the signal is
sent while it generates:

  T1  `mzcache sessions` lists and deletes; then SIGTERM, non-streamed request in flight: the client receives the whole
      answer (equal to the reference, with finish_reason and usage); a new
      request during the drain gets 503 (or is refused once the port closed);
      exit status 0; the port file and the swap file are gone.
  T2  SIGINT, streamed request in flight: every event arrives, the text equals
      the reference, the last chunk has a finish_reason, then data: [DONE].
  T3  --shutdown-grace 1 and a request that would run far longer: the stream
      still ends properly (a finish_reason chunk and [DONE]) and the process
      exits 0.

Exit 0 pass, 1 fail, 77 skip (no model or binary). Python 3 standard library
only. No wall-clock assertion: timeouts only bound waits.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serveutil import MODEL, ROOT, Checks, test_tmp  # noqa: E402

NAME = "test_serve_shutdown"
T = Checks(NAME)
check = T.check


class Server:
    def __init__(self, binary, tmp, tag, extra=()):
        self.port_file = os.path.join(tmp, f"{tag}.port")
        self.swap_dir = os.path.join(tmp, f"{tag}-swap")
        self.log_path = os.path.join(tmp, f"{tag}.log")
        self.log = open(self.log_path, "w")
        args = [binary, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", "--port-file", self.port_file,
                "--swap-dir", self.swap_dir, "--codec", "raw", "--kv-placement", "storage", "--no-pressure", "--no-store",
                "-t", "2", "-c", "1024", "--temp", "0", *extra]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.port = None

    def wait_ready(self, timeout_s=120):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with open(self.port_file) as f:
                    self.port = int(f.read().strip())
                st, _ = self.request("GET", "/health", timeout=2)
                if st == 200:
                    return True
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        return False

    def request(self, method, path, body=None, headers=None, timeout=300):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            h = {"Content-Type": "application/json"} if data else {}
            h.update(headers or {})
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def busy(self):
        try:
            st, raw = self.request("GET", "/mz/status", timeout=5)
            return st == 200 and json.loads(raw).get("busy") is True
        except (OSError, ValueError):
            return False

    def wait_exit(self, timeout_s=120):
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = None
        self.log.close()
        return rc

    def log_text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()


# Tokens of the answers T1 and T2 compare (the reference and the one in
# flight when the signal comes). Under the sanitizers (MZ_SANITIZED) each
# token costs several times more, so the answers are shorter there: the
# drain still has a request generating when the signal arrives (the signal
# waits until the daemon says busy, and --token-delay keeps each token over
# 40 ms: 8 tokens are over 0.3 s of generating, several seconds under TSan),
# and every check is the same; only the decode loop runs fewer times.
ANSWER_TOKENS = 8 if os.environ.get("MZ_SANITIZED") else 48


def chat_body(max_tokens, stream=False):
    return {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": "Write a short poem about the sea."}],
            "max_tokens": max_tokens, "temperature": 0, "stream": stream}


def read_stream(srv, body, session, out):
    """Reads an SSE answer; fills out with the text, the final chunk, [DONE]."""
    out.update(text="", finish=None, done=False, usage=None, error=None, status=None)
    try:
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
        c.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json", "X-Session-Id": session})
        r = c.getresponse()
        out["status"] = r.status
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                out["done"] = True
                continue
            ev = json.loads(data)
            ch = ev["choices"][0]
            out["text"] += ch.get("delta", {}).get("content") or ""
            if ch.get("finish_reason"):
                out["finish"] = ch["finish_reason"]
                out["usage"] = ev.get("usage")
        c.close()
    except (OSError, http.client.HTTPException, ValueError) as e:
        out["error"] = repr(e)


def plain(srv, body, session, out):
    try:
        st, raw = srv.request("POST", "/v1/chat/completions", body, headers={"X-Session-Id": session})
        out["status"] = st
        out["json"] = json.loads(raw)
    except (OSError, http.client.HTTPException, ValueError) as e:
        out["error"] = repr(e)


def wait_busy(srv, th, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and th.is_alive():
        if srv.busy():
            return True
        time.sleep(0.01)
    return False


def new_request_refused(srv):
    """A new request during the drain: 503, or no connection once closed."""
    try:
        st, raw = srv.request("POST", "/v1/chat/completions", chat_body(4), timeout=30)
        return st == 503, f"HTTP {st}"
    except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected) as e:
        return True, repr(e)


def drain_in_flight(srv, send, body, out, sig, tag, what):
    """send(srv, body, "inflight", out) on a thread; sig while it runs; a new
    request during the drain must be refused; then wait for the thread."""
    th = threading.Thread(target=send, args=(srv, body, "inflight", out), daemon=True)
    th.start()
    check(wait_busy(srv, th), f"{tag}: {what} is running")
    srv.proc.send_signal(sig)
    time.sleep(0.2)
    refused, how = new_request_refused(srv)
    check(refused, f"{tag}: a new request during the drain is refused ({how})")
    th.join(180)


def after_exit(srv, rc, tag):
    check(rc == 0, f"{tag}: exit status 0 (got {rc})")
    check(not os.path.exists(srv.port_file), f"{tag}: port file removed at exit")
    left = [n for n in os.listdir(srv.swap_dir)] if os.path.isdir(srv.swap_dir) else []
    check(not left, f"{tag}: swap directory empty at exit ({left})")


def main():
    binary = T.binary_and_model()
    tmp = test_tmp("serve-shutdown-")

    # ---- T1: SIGTERM with a non-streamed request in flight ----------------------------
    # a grace long enough for sanitizer builds too (the default, 30 s, is in --help)
    s = Server(binary, tmp, "t1", ["--token-delay", "40", "--shutdown-grace", "300"])
    if not check(s.wait_ready(), "T1 starts"):
        print(s.log_text())
        return 1
    ref = {}
    plain(s, chat_body(ANSWER_TOKENS), "ref", ref)
    ref_text = ref.get("json", {}).get("choices", [{}])[0].get("message", {}).get("content")
    check(ref.get("status") == 200 and ref_text, f"T1: reference answer ({ref})")
    # the client command: list, delete, a malformed id refused before any request
    cli = [binary, "sessions", "--port", str(s.port)]
    r = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "\nref " in r.stdout, f"T1: `mzcache sessions` lists ref: {r.stdout!r} {r.stderr!r}")
    r = subprocess.run(cli + ["--json"], capture_output=True, text=True, timeout=60)
    ids = [e["id"] for e in json.loads(r.stdout)["data"]] if r.returncode == 0 else []
    check(ids == ["ref"], f"T1: `mzcache sessions --json` ids {ids}")
    plain(s, chat_body(2), "gone", {})
    r = subprocess.run(cli + ["--delete", "gone"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "deleted" in r.stdout, f"T1: `sessions --delete gone`: {r.stdout!r} {r.stderr!r}")
    r = subprocess.run(cli + ["--delete", "gone"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "404" in r.stderr, f"T1: deleting it again: {r.returncode} {r.stderr!r}")
    r = subprocess.run(cli + ["--delete", "a/../b"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 2, f"T1: a malformed id is refused ({r.returncode})")
    out = {}
    drain_in_flight(s, plain, chat_body(ANSWER_TOKENS), out, signal.SIGTERM, "T1", "the request")
    j = out.get("json") or {}
    ch = (j.get("choices") or [{}])[0]
    check(out.get("status") == 200, f"T1: in-flight request answered 200 ({out.get('status')}, {out.get('error')})")
    check(ch.get("message", {}).get("content") == ref_text,
          f"T1: the whole answer arrived: {ch.get('message', {}).get('content')!r} vs {ref_text!r}")
    check(ch.get("finish_reason") in ("stop", "length"), f"T1: finish_reason {ch.get('finish_reason')!r}")
    check(j.get("usage", {}).get("completion_tokens", 0) >= 1, "T1: usage present")
    rc = s.wait_exit()
    after_exit(s, rc, "T1")
    check("shutdown: waiting up to 300.0 s" in s.log_text(), "T1: the log states the grace period")
    h = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=60)
    at = h.stdout.find("--shutdown-grace S")
    check(at >= 0 and "(default 30)" in h.stdout[at:at + 200], "T1: --help states the default grace")

    # ---- T2: SIGINT with a stream in flight --------------------------------------------
    s = Server(binary, tmp, "t2", ["--token-delay", "40", "--shutdown-grace", "300"])
    if not check(s.wait_ready(), "T2 starts"):
        print(s.log_text())
        return 1
    ref = {}
    read_stream(s, chat_body(ANSWER_TOKENS, True), "ref", ref)
    check(ref.get("done") and ref.get("text"), f"T2: reference stream ({ref})")
    out = {}
    drain_in_flight(s, read_stream, chat_body(ANSWER_TOKENS, True), out, signal.SIGINT, "T2", "the stream")
    check(out.get("error") is None, f"T2: stream read without error ({out.get('error')})")
    check(out.get("text") == ref.get("text"), f"T2: whole stream: {out.get('text')!r} vs {ref.get('text')!r}")
    check(out.get("finish") in ("stop", "length"), f"T2: finish_reason {out.get('finish')!r}")
    check(out.get("done"), "T2: data: [DONE] received")
    rc = s.wait_exit()
    after_exit(s, rc, "T2")

    # ---- T3: the grace period runs out ---------------------------------------------------
    s = Server(binary, tmp, "t3", ["--token-delay", "100", "--shutdown-grace", "1"])
    if not check(s.wait_ready(), "T3 starts"):
        print(s.log_text())
        return 1
    out = {}
    th = threading.Thread(target=read_stream, args=(s, chat_body(400, True), "long", out), daemon=True)
    th.start()
    check(wait_busy(s, th), "T3: the stream is running")
    s.proc.send_signal(signal.SIGTERM)
    th.join(180)
    check(out.get("error") is None, f"T3: stream read without error ({out.get('error')})")
    check(out.get("finish") in ("stop", "length"), f"T3: finish_reason {out.get('finish')!r}")
    check(out.get("done"), "T3: data: [DONE] received after the grace period")
    n = (out.get("usage") or {}).get("completion_tokens")
    print(f"T3: the stream ended with {out.get('finish')!r} after {n} tokens", flush=True)
    if out.get("finish") == "length":
        check(n is not None and n < 400, f"T3: cut short by the grace period ({n} tokens)")
    rc = s.wait_exit()
    after_exit(s, rc, "T3")
    check("grace period over" in s.log_text() or out.get("finish") == "stop", "T3: the log says the grace ran out")

    print(f"{NAME}: {T.passes} passed, {T.failures} failed", flush=True)
    return 1 if T.failures else 0


if __name__ == "__main__":
    sys.exit(main())
