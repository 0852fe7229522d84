"""ptyutil.py: a program on a pseudo-terminal, for the CLI tests written in
Python (not a test: ctest runs only test_*.py). pty.fork makes the program a
session leader with the pty as its controlling terminal, so a Ctrl-C byte
makes the kernel's line discipline send SIGINT, as a user's keyboard would.
"""
import os
import pty
import re
import select
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Term:
    """A program on a pseudo-terminal; everything it writes is kept in .out."""

    def __init__(self, args, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(ROOT)
            os.execve(args[0], args, env)
        self.out = ""
        self.status = None

    def pump(self, timeout):
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the other side closed
            data = b""
        if not data:
            return None
        self.out += data.decode("utf-8", "replace")
        return True

    def wait_for(self, pattern, timeout_s=120, start=0):
        """Waits until PATTERN (a regex) appears in the output after START."""
        deadline = time.monotonic() + timeout_s
        rx = re.compile(pattern)
        while True:
            m = rx.search(self.out, start)
            if m:
                return m
            left = deadline - time.monotonic()
            if left <= 0 or self.pump(min(left, 0.5)) is None:
                return rx.search(self.out, start)

    def send(self, data):
        os.write(self.fd, data.encode() if isinstance(data, str) else data)

    def wait_exit(self, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                while self.pump(0.1):
                    pass
                self.status = st
                return os.waitstatus_to_exitcode(st)
            self.pump(0.1)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        return None
