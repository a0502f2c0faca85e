"""What the project writes out: 16-bit PCM samples, and files that appear whole or not at all."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
