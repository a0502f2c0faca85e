"""What the project writes out: 16-bit PCM samples, and files that appear whole or not at all (also
when SIGTERM or SIGHUP ends the process)."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np


def pcm16(audio: np.ndarray) -> np.ndarray:
    """Float audio in [-1, 1] as little-endian int16 (clipped, rounded to nearest)."""
    return np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2")


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A temporary path beside ``target``, renamed onto it on success and removed on failure.

    Readers of ``target`` never see a half-written file, and a failed or interrupted write
    leaves nothing behind (the temporary name is hidden: ``.NAME.XXXX.part``).
    """
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp makes the file private; give it the mode a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the process is (as SIGINT raises KeyboardInterrupt), so that
    ``finally`` clauses remove temporary files."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


def unwind_on_signals() -> dict[int, Any]:
    """Make SIGTERM and SIGHUP raise ``Terminated``; returns the handlers they had."""
    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        try:
            previous[signum] = signal.signal(signum, _raise_terminated)
        except (TypeError, ValueError):  # not on this platform, or not the main thread
            pass
    return previous


def restore_signals(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@contextmanager
def signals_unwind() -> Iterator[None]:
    """``unwind_on_signals`` for the ``with`` block, the old handlers back after it."""
    previous = unwind_on_signals()
    try:
        yield
    finally:
        restore_signals(previous)
