"""The public API: KokoroTTS and its results.

``KokoroTTS.from_pretrained`` resolves the model (hub repo id or local
directory), loads the checkpoint into folded float32 weights, and builds the
backend for the requested device; ``synthesize`` turns text (or phonemes) and
a voice into 24 kHz audio with word timestamps, chunking long input at
sentence and clause boundaries; ``stream`` yields the chunks as they are
made; ``synthesize_batch`` runs many phoneme inputs through the model's
continuous-batching scheduler (``KokoroTTS.scheduler``: its chunks spread over the CUDA engine's
lanes as they free). The module-level ``synthesize`` does the same on a cached model.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .backends import Backend, create_backend
from .checkpoint import default_model, load_checkpoint, resolve_model
from .config import SAMPLE_RATE, ModelConfig
from .errors import BackendError, InputError
from .scheduler import DEFAULT_MAX_QUEUE, ChunkScheduler, ChunkSpec
from .text.chunking import (
    MAX_PHONEMES,
    Chunk,
    WordSpan,
    chunk_words,
    piece_chunks,
    speakable,
    text_pieces,
)
from .text.g2p import LANG_NAMES, FrontEnd, Word, front_end, resolve_lang
from .text.normalize import Normalization
from .text.timestamps import WordTimestamp, word_timestamps
from .tokens import phonemes_to_ids
from .voices import VoiceStore, style_for, voice_lang_code

logger = logging.getLogger("kokoro_gpu")

DEFAULT_MODEL = "hexgrad/Kokoro-82M"
DEFAULT_VOICE = "af_heart"
VoiceSpec = str | Path | np.ndarray
# synthesize_batch input: phonemes, or a dict with "phonemes" and optional "voice", "speed", "seed".
BatchInput = str | Mapping[str, Any]
_BATCH_KEYS = frozenset({"phonemes", "voice", "speed", "seed"})
# Official voice names start with the language code, then f/m for the gender: "af_heart".
_OFFICIAL_VOICE_NAME = re.compile(r"[abefhijpz][fm]_")
# Speaking rates accepted: a tenth of normal to ten times normal (a server may narrow it).
MIN_SPEED = 0.1
MAX_SPEED = 10.0
SEED_LIMIT = 2**64
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class SynthesisResult:
    """One synthesis: mono float32 audio at ``sample_rate`` and how it was made.

    ``durations`` are frames (600 samples) per token, boundary tokens included,
    chunk after chunk; ``phonemes`` the chunks' phoneme strings joined by
    spaces; ``words`` when each word is spoken; ``text`` the text synthesised.
    """

    audio: np.ndarray
    sample_rate: int
    durations: np.ndarray
    phonemes: str
    words: list[WordTimestamp] = field(default_factory=list)
    text: str = ""

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate


def _join(results: list[SynthesisResult], sample_rate: int) -> SynthesisResult:
    return SynthesisResult(
        audio=np.concatenate([r.audio for r in results]).astype(np.float32, copy=False),
        sample_rate=sample_rate,
        durations=np.concatenate([r.durations for r in results]),
        phonemes=" ".join(r.phonemes for r in results),
        words=[w for r in results for w in r.words],
        text=" ".join(r.text for r in results if r.text),
    )


def _phoneme_chunks(phonemes: str, limit: int) -> list[Chunk]:
    """Phoneme input as chunks; input that fits is kept exactly as given (its length picks the style)."""
    if len(phonemes) <= limit:
        spans = tuple(WordSpan(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", phonemes))
        return [Chunk(text="", phonemes=phonemes, words=spans)]
    return chunk_words([Word(w, w) for w in phonemes.split()], limit)


def _voice_lang(voice: VoiceSpec) -> str | None:
    """The language of an official voice name (or a file or mix named like one), else None."""
    if isinstance(voice, np.ndarray):
        return None
    spec = str(voice)
    first = re.split(r"[+,(]", spec.strip(), maxsplit=1)[0].strip()
    return voice_lang_code(spec) if _OFFICIAL_VOICE_NAME.match(Path(first).name) else None


def choose_lang(voice: VoiceSpec, lang: str | None) -> str:
    """The front end's language: ``lang`` if given (warning if the voice's differs), else the voice's."""
    voice_code = _voice_lang(voice)
    if lang is None:
        return voice_code or "a"
    code = resolve_lang(lang)
    if voice_code is not None and voice_code != code:
        warnings.warn(
            f"voice {voice!s} is {LANG_NAMES[voice_code]} but the text is read as {LANG_NAMES[code]}; "
            "it will speak with an accent (pick a voice of the same language to avoid it)",
            stacklevel=3,
        )
    return code


def check_speed(speed: float) -> float:
    """``speed`` as a float in [MIN_SPEED, MAX_SPEED], else an InputError."""
    try:
        value = float(speed)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"speed must be a number, got {_short(speed)}") from None
    if isinstance(speed, bool) or not math.isfinite(value) or not MIN_SPEED <= value <= MAX_SPEED:
        raise InputError(f"speed must be a finite number from {MIN_SPEED} to {MAX_SPEED:g} "
                         f"(1 is normal), got {_short(speed)}")
    return value


def check_seed(seed: Any) -> int | None:
    """``seed`` as None or an int in [0, 2**64), else an InputError."""
    if seed is None:
        return None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"seed must be a whole number from 0 to 2**64 - 1 or None, got {_short(seed)}")
    if not 0 <= int(seed) < SEED_LIMIT:
        raise InputError(f"seed must be from 0 to 2**64 - 1, got {_short(seed)}")
    return int(seed)


def check_text(text: str, what: str) -> None:
    """Refuse text with lone surrogates: what undecodable (non-UTF-8) bytes become in Python."""
    bad = _SURROGATE.search(text)
    if bad is not None:
        code = ord(bad.group())
        detail = (f"byte 0x{code - 0xDC00:02x}, which is not UTF-8," if 0xDC80 <= code <= 0xDCFF
                  else f"a lone surrogate U+{code:04X}")
        raise InputError(f"{what} has {detail} at character {bad.start()}; pass valid UTF-8 text")


def _short(value: Any) -> str:
    """A value for an error message: its repr, shortened."""
    text = repr(value) if isinstance(value, (str, int, float, bool, type(None), np.generic)) else None
    if text is None or len(text) > 40:
        return f"a {type(value).__name__}" if text is None else text[:37] + "..."
    return text


def _check_audio(audio: np.ndarray) -> np.ndarray:
    if not np.isfinite(audio).all():
        raise BackendError("the model produced non-finite audio (NaN or inf); its checkpoint or voice is "
                           "corrupt or of another model")
    return audio


def _default_voice(voices: VoiceStore) -> str:
    """af_heart where the model has it (or fetches voices from the hub), else its first voice.

    kokoro-onnx-int8 has only Japanese voices: its default voice then reads English (see ``stream``).
    """
    if voices.repo_id is not None:
        return DEFAULT_VOICE
    available = voices.available()
    return DEFAULT_VOICE if DEFAULT_VOICE in available or not available else available[0]


class KokoroTTS:
    """A loaded Kokoro model on one backend."""

    def __init__(self, config: ModelConfig, backend: Backend, voices: VoiceStore) -> None:
        self.config = config
        self.backend = backend
        self.voices = voices
        self.sample_rate = SAMPLE_RATE
        self.default_voice = _default_voice(voices)
        self._scheduler: ChunkScheduler | None = None
        self._scheduler_lock = threading.Lock()

    @classmethod
    def from_pretrained(
        cls,
        model: str | Path | None = None,
        device: str = "auto",
        precision: str = "fp32",
        *,
        local_files_only: bool = False,
    ) -> KokoroTTS:
        """Load ``model`` onto ``device``: a Hugging Face repo id, a local directory or checkpoint file
        (``.pth``, ``.safetensors``, kokoro-onnx's ``.onnx``), or ``"kokoro-onnx-int8"``.

        Without ``model``: ``hexgrad/Kokoro-82M``, or where the hub is unreachable and it is not
        cached, ``kokoro-onnx-int8`` (with a warning saying so; its voices are Japanese).
        """
        if model is None:
            model, notice = default_model(local_files_only=local_files_only)
            if notice is not None:
                warnings.warn(notice, stacklevel=2)
        files = resolve_model(str(model), local_files_only=local_files_only)
        config = ModelConfig.load(files.config_path)
        weights = load_checkpoint(files.checkpoint_path, config)
        backend = create_backend(device, config, weights, precision)
        logger.info("kokoro_gpu: %s on %s (%s)", files.checkpoint_path, backend.device, backend.precision)
        voices = VoiceStore(files.voices_dir, files.repo_id, local_files_only=local_files_only)
        return cls(config, backend, voices)

    @property
    def device(self) -> str:
        return self.backend.device

    @property
    def precision(self) -> str:
        return self.backend.precision

    def list_voices(self) -> list[str]:
        return self.voices.available()

    @property
    def scheduler(self) -> ChunkScheduler:
        """The continuous-batching scheduler ``synthesize_batch`` submits to (started on first use).

        On CUDA its workers, one per engine lane, take a call's chunks in shares as their lanes
        free; it gathers no companions (a call's chunks are queued together). ``close()`` stops it;
        a later call starts a new one.
        """
        with self._scheduler_lock:
            if self._scheduler is None or self._scheduler.closed:
                scheduler = ChunkScheduler(self.backend, max_queue=DEFAULT_MAX_QUEUE, gather_s=0.0)
                # A model dropped without close() stops its worker, which holds the backend.
                weakref.finalize(self, scheduler.close)
                self._scheduler = scheduler
            return self._scheduler

    def close(self) -> None:
        """Stop the scheduler of ``synthesize_batch`` after its queued chunks finish; safe to repeat."""
        with self._scheduler_lock:
            scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.close()

    def __enter__(self) -> KokoroTTS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def synthesize(
        self,
        text: str | None = None,
        *,
        phonemes: str | None = None,
        voice: VoiceSpec | None = None,
        speed: float = 1.0,
        lang: str | None = None,
        deterministic: bool = False,
        seed: int | None = None,
        normalize: bool | Normalization = True,
    ) -> SynthesisResult:
        """Text (or ``phonemes=``) of any length and a voice -> audio with word timestamps.

        ``lang`` is a language code or alias (``a``, ``en-us``, ``b``, ``es``,
        ``fr``, ``hi``, ``it``, ``pt-br``, ``ja``, ``zh``), by default the
        voice's. Long input is split into chunks of at most 510 phonemes at
        sentence, then clause boundaries; each is synthesised and the audio
        joined. ``deterministic`` zeroes the generator's random phases and
        noise; otherwise ``seed`` (chunk ``i`` uses ``seed + i``) makes them
        reproducible.
        """
        results = list(
            self.stream(
                text,
                phonemes=phonemes,
                voice=voice,
                speed=speed,
                lang=lang,
                deterministic=deterministic,
                seed=seed,
                normalize=normalize,
            )
        )
        return results[0] if len(results) == 1 else _join(results, self.sample_rate)

    def stream(
        self,
        text: str | None = None,
        *,
        phonemes: str | None = None,
        voice: VoiceSpec | None = None,
        speed: float = 1.0,
        lang: str | None = None,
        deterministic: bool = False,
        seed: int | None = None,
        normalize: bool | Normalization = True,
    ) -> Iterator[SynthesisResult]:
        """Like ``synthesize``, but yield each chunk's result as soon as it is made.

        Word timestamps are absolute (seconds from the start of the first
        chunk). Arguments are checked before this returns; the text is
        phonemised line by line as the iteration proceeds. Without ``voice``
        the model's default voice (``default_voice``) reads English unless
        ``lang`` says otherwise. ``normalize`` (English text) spells out URLs,
        e-mail addresses, phone numbers, times, fractions, units and
        abbreviations first (:class:`kokoro_gpu.text.Normalization` picks
        categories; False reads the text as written).
        """
        if voice is None:
            voice, lang = self.default_voice, lang or "a"
        if (text is None) == (phonemes is None):
            raise InputError("pass either text or phonemes=..., not both and not neither")
        source = text if text is not None else phonemes
        if not isinstance(source, str):
            raise InputError(f"{'text' if text is not None else 'phonemes'} must be a str, "
                             f"got {type(source).__name__}")
        if not source.strip():
            raise InputError(f"{'text' if text is not None else 'phonemes'} is empty; pass something to say")
        check_text(source, "text" if text is not None else "phonemes")
        if phonemes is not None and not speakable(phonemes):
            raise InputError("the phonemes are only punctuation: no phonemes to speak")
        speed = check_speed(speed)
        seed = check_seed(seed)
        pack = self.voices.load(voice)
        limit = min(MAX_PHONEMES, self.config.max_phonemes)
        if phonemes is not None:
            chunks: Iterable[Chunk] = _phoneme_chunks(phonemes, limit)
        else:
            chunks = self._text_chunks(text, front_end(choose_lang(voice, lang), normalize=normalize), limit)
        return self._stream(chunks, pack, speed, deterministic, seed)

    @staticmethod
    def _text_chunks(text: str, g2p: FrontEnd, limit: int) -> Iterator[Chunk]:
        # The first sentence is a piece of its own: a stream's first audio waits for it alone.
        for piece in text_pieces(text):
            yield from piece_chunks(piece, g2p, limit)

    def _stream(
        self, chunks: Iterable[Chunk], pack: np.ndarray, speed: float, deterministic: bool, seed: int | None
    ) -> Iterator[SynthesisResult]:
        offset = 0.0
        made = 0
        for chunk in chunks:
            input_ids, ref_s = self._model_inputs(chunk.phonemes, pack)
            chunk_seed = None if seed is None else seed + made
            audio, durations = self.backend.forward(
                input_ids, ref_s, speed, deterministic=deterministic, seed=chunk_seed
            )
            _check_audio(audio)
            result = self._chunk_result(chunk, audio, durations, offset)
            offset += result.seconds
            made += 1
            yield result
        if not made:
            raise InputError("the text yields no phonemes to speak; pass words, or phonemes=...")

    def _model_inputs(self, phonemes: str, pack: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        input_ids = phonemes_to_ids(phonemes, self.config.vocab, self.config.max_phonemes)
        return input_ids, style_for(pack, phonemes)

    def _chunk_result(
        self, chunk: Chunk, audio: np.ndarray, durations: np.ndarray, offset: float
    ) -> SynthesisResult:
        result = SynthesisResult(
            audio=audio, sample_rate=self.sample_rate, durations=durations, phonemes=chunk.phonemes
        )
        result.words = word_timestamps(chunk.words, chunk.phonemes, durations, self.config.vocab, offset)
        result.text = chunk.text
        return result

    def synthesize_batch(
        self,
        inputs: Sequence[BatchInput],
        *,
        voice: VoiceSpec | None = None,
        speed: float = 1.0,
        deterministic: bool = False,
        seed: int | None = None,
    ) -> list[SynthesisResult]:
        """Many phoneme inputs through ``scheduler`` (one backend call on CUDA) -> one result per input.

        Each input is a phoneme string, or a dict with ``"phonemes"`` and
        optionally ``"voice"``, ``"speed"`` and ``"seed"`` overriding the
        call's. Result ``i`` equals ``synthesize(phonemes=..., voice=...,
        speed=..., deterministic=deterministic, seed=seed_i)``, where
        ``seed_i`` is the input's ``"seed"``, else ``seed + i`` when ``seed``
        is given, else fresh; inputs longer than one chunk are split and
        joined as ``synthesize`` does. Chunks of other threads' calls may
        share the backend call.
        """
        if isinstance(inputs, (str, Mapping)):
            raise InputError("synthesize_batch takes a list of inputs; use synthesize for one")
        seed = check_seed(seed)
        voice = self.default_voice if voice is None else voice
        limit = min(MAX_PHONEMES, self.config.max_phonemes)
        packs: dict[str, np.ndarray] = {}
        specs: list[ChunkSpec] = []
        owners: list[tuple[int, Chunk]] = []
        for i, spec in enumerate(inputs):
            phonemes, spec_voice, spec_speed, spec_seed = self._batch_input(spec, i, voice, speed, seed)
            key = str(spec_voice) if isinstance(spec_voice, (str, Path)) else f"array:{id(spec_voice)}"
            if key not in packs:
                packs[key] = self.voices.load(spec_voice)
            pack = packs[key]
            for j, chunk in enumerate(_phoneme_chunks(phonemes, limit)):
                input_ids, ref_s = self._model_inputs(chunk.phonemes, pack)
                chunk_seed = None if spec_seed is None else spec_seed + j
                specs.append(ChunkSpec(input_ids, ref_s, spec_speed, chunk_seed, deterministic))
                owners.append((i, chunk))
        outputs = self._run_chunks(specs)
        per_input: list[list[SynthesisResult]] = [[] for _ in inputs]
        for (i, chunk), (audio, durations) in zip(owners, outputs, strict=True):
            _check_audio(audio)
            offset = sum(r.seconds for r in per_input[i])
            per_input[i].append(self._chunk_result(chunk, audio, durations, offset))
        return [parts[0] if len(parts) == 1 else _join(parts, self.sample_rate) for parts in per_input]

    def _run_chunks(self, specs: list[ChunkSpec]) -> list[tuple[np.ndarray, np.ndarray]]:
        """The chunks through the scheduler, all queued at once (in waves of its queue bound)."""
        scheduler = self.scheduler
        outputs: list[tuple[np.ndarray, np.ndarray]] = []
        for start in range(0, len(specs), scheduler.max_queue):
            futures = []
            try:
                futures.extend(scheduler.submit_many(specs[start : start + scheduler.max_queue]))
                outputs.extend((out.audio, out.durations) for out in (f.result() for f in futures))
            finally:  # on a failure, chunks of this call not yet started are dropped
                for future in futures:
                    future.cancel()
        return outputs

    @staticmethod
    def _batch_input(
        spec: BatchInput, index: int, voice: VoiceSpec, speed: float, seed: int | None
    ) -> tuple[str, VoiceSpec, float, int | None]:
        """One synthesize_batch input as (phonemes, voice, speed, seed), checked."""
        fields: Mapping[str, Any] = {"phonemes": spec} if isinstance(spec, str) else spec
        if not isinstance(fields, Mapping) or "phonemes" not in fields:
            raise InputError(f"batch input {index} must be a phoneme string or a dict with 'phonemes'")
        unknown = set(fields) - _BATCH_KEYS
        if unknown:
            raise InputError(
                f"batch input {index} has unknown keys {sorted(unknown)}; use {sorted(_BATCH_KEYS)}"
            )
        phonemes = fields["phonemes"]
        if not isinstance(phonemes, str) or not phonemes.strip():
            raise InputError(f"batch input {index}: phonemes must be a non-empty str")
        check_text(phonemes, f"batch input {index}: phonemes")
        if not speakable(phonemes):
            raise InputError(f"batch input {index}: the phonemes are only punctuation: no phonemes to speak")
        if "seed" in fields:
            try:
                own_seed = check_seed(fields["seed"])
            except InputError as e:
                raise InputError(f"batch input {index}: {e}") from None
        else:
            own_seed = None if seed is None else (seed + index) % SEED_LIMIT
        return phonemes, fields.get("voice", voice), check_speed(fields.get("speed", speed)), own_seed


@functools.lru_cache(maxsize=1)
def _cached_model(model: str | None, device: str, precision: str) -> KokoroTTS:
    return KokoroTTS.from_pretrained(model, device=device, precision=precision)


def synthesize(
    text: str | None = None,
    *,
    phonemes: str | None = None,
    voice: VoiceSpec | None = None,
    speed: float = 1.0,
    lang: str | None = None,
    model: str | Path | None = None,
    device: str = "auto",
    precision: str = "fp32",
    deterministic: bool = False,
    seed: int | None = None,
    normalize: bool | Normalization = True,
) -> SynthesisResult:
    """``KokoroTTS.synthesize`` on a model loaded once and kept for the next call with the same model.

    ``model`` as in ``KokoroTTS.from_pretrained`` (default: the hub's model, or offline kokoro-onnx-int8).
    """
    tts = _cached_model(None if model is None else str(model), device, precision)
    return tts.synthesize(
        text,
        phonemes=phonemes,
        voice=voice,
        speed=speed,
        lang=lang,
        deterministic=deterministic,
        seed=seed,
        normalize=normalize,
    )
