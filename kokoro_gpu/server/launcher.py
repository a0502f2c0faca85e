"""``kokoro-serve`` in a child process on a free port of 127.0.0.1: started, waited for, stopped.

For whatever talks to a real server over HTTP from the outside (the load test,
the server's tests). Standard library only, so it imports without the server's
web stack.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``python -m kokoro_gpu.server ARGS --port PORT``; its output goes to ``log`` (else to this process's).

    ``wait_ready`` returns once ``GET /health`` answers 200; ``stop`` sends
    SIGTERM (graceful shutdown: in-flight streams finish) and kills the server
    if it has not exited in time. ``cpus``: the processors the server (its
    threads and front-end processes) may run on (Linux), e.g. apart from a load
    test's clients; it sizes its front-end pool and CPU threads by them.
    """

    def __init__(self, args: Sequence[str], *, log: Path | None = None,
                 cpus: set[int] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.argv = [sys.executable, "-m", "kokoro_gpu.server", *args, "--port", str(self.port)]
        self._log_file: IO[bytes] | None = open(log, "wb") if log is not None else None  # closed in stop()
        output = {"stdout": self._log_file, "stderr": subprocess.STDOUT} if self._log_file else {}
        self.process = subprocess.Popen(self.argv, env={**os.environ, "PYTHONUNBUFFERED": "1"}, **output)
        if cpus is not None:
            # Set as Python starts in the child (no preexec_fn: unsafe beside threads), before the server
            # makes any thread or process, which then inherit it.
            try:
                os.sched_setaffinity(self.process.pid, cpus)
            except ProcessLookupError:  # exited already: wait_ready reports it
                pass

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log is not None else ""

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Wait for ``GET /health`` to answer 200; ``RuntimeError`` if the server exits first or
        ``timeout`` seconds pass."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"kokoro-serve exited with {self.process.returncode} before it was ready"
                                   f"{': ' + self._log_tail() if self.log else ''}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:  # not listening yet, or not ready (urllib's errors are OSErrors)
                pass
            time.sleep(0.3)
        raise RuntimeError(f"kokoro-serve was not ready after {timeout:g} s"
                           f"{': ' + self._log_tail() if self.log else ''}")

    def health(self) -> dict[str, Any]:
        """``GET /health``'s JSON (a draining server's 503 body too)."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            return json.load(e)

    def pids(self) -> list[int]:
        """The server and its descendants (the text front-end processes), while it runs (Linux)."""
        found, todo = [], [self.process.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            for task in Path(f"/proc/{pid}/task").glob("*/children"):
                try:
                    todo.extend(int(c) for c in task.read_text().split())
                except OSError:  # the thread or process is gone
                    pass
        return found

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return self.process.returncode
