"""Voice packs: find them by name or path, mix them, pick the style row for an utterance.

A voice pack is a float32 array ``[510, 1, 256]``: row ``n - 1`` is the style
vector for a phoneme string of ``n`` characters. Packs come from a model's
``voices/`` directory (``NAME.pt``, ``NAME.safetensors`` with tensor
``voice``, ``NAME.npy``, or the entries of a ``voices-v1.0.bin`` NumPy
archive), from the Hugging Face repo on demand, from a file path, or as an
array.
"""

from __future__ import annotations

import io
import math
import os
import re
import tokenize
import zipfile
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import VOICES_ARCHIVE, hub_download, read_safetensors
from .errors import CheckpointError, InputError, VoiceError
from .pth import read_member, read_pth

PACK_LENGTH = 510
STYLE_DIM = 256
VOICE_SUFFIXES = (".safetensors", ".pt", ".npy")
SAFETENSORS_KEY = "voice"
# First letter of an official voice name -> the language of the text front end.
LANG_CODES = frozenset("abefhijpz")

_OFFICIAL_LIST = Path(__file__).parent / "data" / "voices.tsv"
_TERM = re.compile(r"\s*([^()]*?)\s*(?:\(\s*([^()]*?)\s*\))?\s*")
_SHOWN = 10  # names listed in an unknown-voice error
# A voice file or archive entry holds one pack: 510 x 256 values, 1 MiB even as
# float64. Anything much larger is not a voice and is refused before it is read.
MAX_VOICE_BYTES = 4 << 20
MAX_BIN_ENTRIES = 10_000
# The largest |value| a voice pack may hold: style vectors of trained voices stay
# within a few units; a larger value only makes noise, silence or NaN audio.
MAX_VOICE_MAGNITUDE = 1e3
MAX_SPEC_CHARS = 4096  # of a voice name, path or mix expression
MAX_MIX_TERMS = 64


@lru_cache(maxsize=1)
def official_voices() -> tuple[str, ...]:
    """The names of the 54 official v1.0 voice packs (bundled list)."""
    with open(_OFFICIAL_LIST, encoding="utf-8") as f:
        return tuple(line.split("\t", 1)[0] for line in f if line.strip() and not line.startswith("#"))


def validate_pack(arr: Any, what: str) -> np.ndarray:
    """A ``[510, 1, 256]`` (or ``[510, 256]``) finite float array -> float32 ``[510, 1, 256]`` copy."""
    if not isinstance(arr, np.ndarray):
        raise VoiceError(f"{what} is a {type(arr).__name__}, not an array; "
                         f"a voice pack is an array of shape [{PACK_LENGTH}, 1, {STYLE_DIM}]")
    if arr.dtype.kind != "f":
        raise VoiceError(f"{what} has dtype {arr.dtype}; a voice pack holds floating-point values")
    if arr.shape not in ((PACK_LENGTH, 1, STYLE_DIM), (PACK_LENGTH, STYLE_DIM)):
        raise VoiceError(f"{what} has shape {tuple(arr.shape)}; a voice pack has shape "
                         f"[{PACK_LENGTH}, 1, {STYLE_DIM}] (or [{PACK_LENGTH}, {STYLE_DIM}])")
    if not np.isfinite(arr).all():
        raise VoiceError(f"{what} contains NaN or infinite values; the voice file is corrupt")
    peak = float(np.abs(arr).max())
    if peak > MAX_VOICE_MAGNITUDE:
        raise VoiceError(f"{what} holds values up to {peak:.3g} in magnitude (a voice stays within "
                         f"{MAX_VOICE_MAGNITUDE:g}); the voice file is corrupt or not a voice")
    return np.array(arr, dtype=np.float32, order="C").reshape(PACK_LENGTH, 1, STYLE_DIM)


def npy_array(data: bytes, what: str) -> np.ndarray:
    """An array from the bytes of a ``.npy`` file, its declared size checked against the bytes there."""
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, TypeError, SyntaxError, OverflowError, KeyError, RecursionError,
            tokenize.TokenError) as e:  # numpy parses the header as a Python literal
        raise VoiceError(f"{what} is not a readable .npy array ({type(e).__name__}: {e})") from None
    if dtype.hasobject:
        raise VoiceError(f"{what} holds Python objects, not numbers; a voice pack is a float array")
    count = math.prod(shape)
    if count * dtype.itemsize != len(data) - f.tell():
        raise VoiceError(f"{what} declares {count * dtype.itemsize} bytes of data but holds "
                         f"{len(data) - f.tell()}; the file is truncated or corrupt")
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=f.tell())
    return arr.reshape(shape, order="F" if fortran else "C")


def _read_bounded(path: Path) -> bytes:
    size = path.stat().st_size
    if size > MAX_VOICE_BYTES:
        raise VoiceError(f"voice file {path} is {size} bytes; a voice pack needs about 0.5 MB, "
                         "so this is not a voice file")
    with open(path, "rb") as f:
        return f.read(MAX_VOICE_BYTES + 1)


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name the OS refuses (too long, a NUL byte)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def read_voice_file(path: Path) -> np.ndarray:
    """One voice pack from a ``.pt`` (bare tensor), ``.safetensors`` or ``.npy`` file, validated."""
    if not _is_file(path):
        raise VoiceError(f"voice file not found: {path}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".pt":
            arr: Any = read_pth(path, max_bytes=MAX_VOICE_BYTES)
        elif suffix == ".safetensors":
            tensors = read_safetensors(path, max_bytes=MAX_VOICE_BYTES)
            if SAFETENSORS_KEY in tensors:
                arr = tensors[SAFETENSORS_KEY]
            elif len(tensors) == 1:
                arr = next(iter(tensors.values()))
            else:
                raise VoiceError(f"{path} holds {len(tensors)} tensors but none named "
                                 f"{SAFETENSORS_KEY!r}; convert the voice with kokoro-convert")
        elif suffix == ".npy":
            arr = npy_array(_read_bounded(path), f"voice {path}")
        else:
            raise VoiceError(f"{path}: unknown voice file type {suffix!r}; "
                             f"pass a {', '.join(VOICE_SUFFIXES)} file")
    except CheckpointError as e:
        raise VoiceError(f"cannot read voice file: {e}") from None
    except OSError as e:
        raise VoiceError(f"cannot read voice file {path}: {e.strerror or e}") from None
    return validate_pack(arr, f"voice {path}")


def parse_mix(spec: str) -> list[tuple[str, float]]:
    """``"a(2)+b(1)"`` or ``"a,b"`` -> [(name, weight)]; a missing weight is 1.

    Names are returned as written (the caller decides what a name may be);
    a malformed term, a weight that is not a finite number > 0, or more than
    ``MAX_MIX_TERMS`` terms raise ``VoiceError``.
    """
    parts = re.split(r"[+,]", spec)
    if len(parts) > MAX_MIX_TERMS:
        raise VoiceError(f"voice mix has {len(parts)} terms (at most {MAX_MIX_TERMS})")
    terms: list[tuple[str, float]] = []
    for part in parts:
        m = _TERM.fullmatch(part)
        if m is None or not m.group(1):
            raise VoiceError(f"malformed voice mix {spec!r}: write NAME, or NAME(WEIGHT) terms joined "
                             "by '+' (or ',' for equal weights), e.g. af_bella(2)+af_sky(1)")
        weight = 1.0
        if m.group(2) is not None:
            try:
                weight = float(m.group(2))
            except ValueError:
                weight = math.nan
            if not (math.isfinite(weight) and weight > 0):
                raise VoiceError(f"bad weight {m.group(2)!r} for {m.group(1)!r} in voice mix {spec!r}; "
                                 "weights are finite numbers > 0")
        terms.append((m.group(1), weight))
    return terms


def _looks_like_path(name: str) -> bool:
    return "/" in name or os.sep in name or Path(name).suffix.lower() in VOICE_SUFFIXES


class VoiceStore:
    """Voice packs of one model: a local ``voices/`` directory and/or a hub repo.

    Packs loaded by name are cached and returned read-only; mixes and arrays
    come back as fresh float32 arrays.
    """

    def __init__(self, voices_dir: Path | str | None, repo_id: str | None, *,
                 local_files_only: bool = False, archive: Path | str | None = None) -> None:
        self.voices_dir = Path(voices_dir) if voices_dir is not None else None
        # A voices archive of any name (kokoro-convert --voices voices_ja.npz); else voices_dir's.
        self.archive = Path(archive) if archive is not None else None
        self.repo_id = repo_id
        self.local_files_only = local_files_only
        self._cache: dict[str, np.ndarray] = {}

    def _bin_path(self) -> Path | None:
        if self.archive is not None:
            path = self.archive
        elif self.voices_dir is not None:
            path = self.voices_dir / VOICES_ARCHIVE
        else:
            return None
        return path if _is_file(path) else None

    def _bin_entries(self) -> dict[str, str]:
        """Voice name -> archive member of voices-v1.0.bin (a NumPy .npz zip)."""
        path = self._bin_path()
        if path is None:
            return {}
        try:
            with zipfile.ZipFile(path) as archive:
                members = archive.namelist()
        except (OSError, zipfile.BadZipFile, ValueError, EOFError) as e:
            raise VoiceError(f"cannot read voice archive {path} ({type(e).__name__}: {e}); "
                             "re-download it") from None
        if len(members) > MAX_BIN_ENTRIES:
            raise VoiceError(f"voice archive {path} has {len(members)} entries (at most {MAX_BIN_ENTRIES}); "
                             "it is corrupt or not a voice archive")
        entries = {m.removesuffix(".npy"): m for m in members}
        if len(entries) != len(members):
            raise VoiceError(f"voice archive {path} holds two entries of the same name; re-download it")
        return entries

    def _bin_names(self) -> list[str]:
        return list(self._bin_entries())

    def _bin_pack(self, name: str, member: str) -> np.ndarray:
        """Voice ``name`` from its archive ``member`` (as ``_bin_entries`` maps it)."""
        path = self._bin_path()
        what = f"voice {name} in {path}"
        try:
            with zipfile.ZipFile(path) as archive:
                info = archive.getinfo(member)
                if info.file_size > MAX_VOICE_BYTES:
                    raise VoiceError(f"{what} declares {info.file_size} bytes; a voice pack needs about "
                                     "0.5 MB, so the archive is corrupt")
                data = read_member(archive, info)
        except (OSError, zipfile.BadZipFile, zlib.error, EOFError, KeyError) as e:
            raise VoiceError(f"cannot read {what} ({type(e).__name__}: {e}); "
                             "re-download the archive") from None
        return validate_pack(npy_array(data, what), what)

    def available(self) -> list[str]:
        """Voice names this store can load, sorted."""
        names: set[str] = set()
        if self.voices_dir is not None and self.voices_dir.is_dir():
            names.update(f.stem for f in self.voices_dir.iterdir()
                         if f.suffix.lower() in VOICE_SUFFIXES and f.is_file())
        names.update(self._bin_names())
        if self.repo_id is not None:
            names.update(official_voices())
        return sorted(names)

    def _unknown(self, name: str) -> VoiceError:
        names = self.available()
        if not names:
            return VoiceError(f"unknown voice {name!r} and no voices are available; pass a voice file "
                              "path or give the model a voices/ directory")
        shown = ", ".join(names[:_SHOWN]) + (", ..." if len(names) > _SHOWN else "")
        return VoiceError(f"unknown voice {name!r}; available ({len(names)}): {shown}")

    def _named(self, name: str) -> np.ndarray:
        if self.voices_dir is not None:
            for suffix in VOICE_SUFFIXES:
                path = self.voices_dir / f"{name}{suffix}"
                if _is_file(path):
                    return read_voice_file(path)
        member = self._bin_entries().get(name)
        if member is not None:
            return self._bin_pack(name, member)
        if self.repo_id is not None and name in official_voices():
            path = hub_download(self.repo_id, f"voices/{name}.pt",
                                local_files_only=self.local_files_only, error=VoiceError)
            return read_voice_file(path)
        raise self._unknown(name)

    def _single(self, name: str) -> np.ndarray:
        pack = self._cache.get(name)
        if pack is None:
            pack = read_voice_file(Path(name).expanduser()) if _looks_like_path(name) else self._named(name)
            pack.flags.writeable = False
            self._cache[name] = pack
        return pack

    def load(self, spec: str | os.PathLike[str] | np.ndarray) -> np.ndarray:
        """A voice pack float32 ``[510, 1, 256]`` from a name, path, mix expression or array."""
        if isinstance(spec, np.ndarray):
            return validate_pack(spec, "voice array")
        if isinstance(spec, os.PathLike):
            return self._single(os.fspath(spec))
        if not isinstance(spec, str):
            raise VoiceError(f"voice must be a name, path, mix expression or array, "
                             f"not {type(spec).__name__}")
        spec = spec.strip()
        if not spec:
            raise VoiceError("voice is empty; pass a voice name such as af_heart")
        if len(spec) > MAX_SPEC_CHARS:
            raise VoiceError(f"voice is {len(spec)} characters long (at most {MAX_SPEC_CHARS}); "
                             "pass a voice name, path or mix")
        if _is_file(Path(spec).expanduser()):
            return self._single(spec)
        return self.mix(parse_mix(spec))

    def mix(self, terms: list[tuple[str, float]]) -> np.ndarray:
        """The weighted mean of the packs ``terms`` names (``parse_mix``'s pairs); one term: its pack."""
        if len(terms) == 1:
            return self._single(terms[0][0])
        total = sum(w for _, w in terms)
        mix = sum(self._single(name).astype(np.float64) * (w / total) for name, w in terms)
        return np.asarray(mix, dtype=np.float32)


def style_for(pack: np.ndarray, phonemes: str) -> np.ndarray:
    """The style vector ``[256]`` for a phoneme string: row ``len(phonemes) - 1`` of the pack.

    The official pipeline indexes by the phoneme *string* length, not the token count.
    """
    n = len(phonemes)
    if n == 0:
        raise InputError("the phoneme string is empty; pass text that yields at least one phoneme")
    rows = np.asarray(pack).reshape(pack.shape[0], -1)
    if rows.shape[1] != STYLE_DIM:
        raise VoiceError(f"voice pack has shape {tuple(pack.shape)}; "
                         f"expected [{PACK_LENGTH}, 1, {STYLE_DIM}]")
    if n > rows.shape[0]:
        raise InputError(f"the phoneme string has {n} characters but a voice pack covers at most "
                         f"{rows.shape[0]}; split the text into shorter chunks")
    return np.array(rows[n - 1], dtype=np.float32)


def voice_lang_code(voice: str) -> str:
    """Language code of a voice name (its first letter: a, b, e, f, h, i, j, p, z).

    For a mix the first voice decides; for a path, the file name.
    """
    first = re.split(r"[+,(]", voice.strip(), maxsplit=1)[0].strip()
    code = Path(first).name[:1].lower()
    if code not in LANG_CODES:
        raise VoiceError(f"cannot tell the language of voice {voice!r} from its name (official names start "
                         f"with one of {', '.join(sorted(LANG_CODES))}); pass the language explicitly")
    return code
