"""From a checked request to audio chunks: text front end in worker processes, chunks on the scheduler.

The text is cut into pieces (the first sentence, the rest of its line, each
further line) that are phonemised in a process pool, one piece ahead of the
audio, so the event loop never runs G2P and the first sentence is synthesised
without waiting for the rest. A request's second piece is sent to the pool once
its first is done, so that many requests arriving together have their first
sentences phonemised first (the pool takes tasks in order). Each piece's chunks
(at most 510 phonemes, cut at sentence and clause ends, as
``KokoroTTS.synthesize`` cuts a line) go to the
scheduler at most ``lookahead`` ahead of the one being sent, each with the time
a listener who started at the request would need it as its priority (request
time + the audio before it: earliest deadline first, so first chunks go early
and a stream falling behind catches up; the audio of chunks not yet made is
estimated from their phonemes, so a stream's second chunk does not compete with
other streams' first ones); a chunk whose time has come (a stream's first, or one of a
stream that fell behind) is marked urgent, so that it runs in a model call of
urgent chunks only; chunk ``i`` uses ``seed + i``. The joins
between chunks get a 5 ms raised-cosine fade out and in, so that no chunk
boundary clicks; each chunk's audio is sent without its last 5 ms until the
next chunk (or the end) says whether a join follows.
"""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..api import KokoroTTS
from ..errors import InputError
from ..scheduler import ChunkOutput, ChunkScheduler, ChunkSpec
from ..text.chunking import MAX_PHONEMES, Chunk, piece_chunks, text_pieces
from ..text.timestamps import WordTimestamp, word_timestamps
from ..tokens import phonemes_to_ids
from ..voices import style_for
from .speech import SpeechJob

logger = logging.getLogger("kokoro_gpu.server")

FADE_SAMPLES = 120  # 5 ms at 24 kHz
# Audio per phoneme at speed 1, for the deadlines of chunks not yet made: real Kokoro weights give
# 2 - 3 frames (of 25 ms) per phoneme. Only the order of deadlines depends on it.
SECONDS_PER_PHONEME = 0.06
_FADE_IN = (0.5 - 0.5 * np.cos(np.pi * (np.arange(FADE_SAMPLES) + 0.5) / FADE_SAMPLES)).astype(np.float32)


def phonemize_piece(text: str, lang: str, limit: int) -> list[Chunk]:
    """Runs in a front-end worker process: one piece of text -> its chunks."""
    from ..text.g2p import front_end

    return list(piece_chunks(text, front_end(lang), limit))


def warm_front_end(langs: tuple[str, ...]) -> None:
    """Front-end worker initialiser: load the G2P models once, before the first request."""
    for lang in langs:
        phonemize_piece("Hello.", lang, MAX_PHONEMES)


@dataclass
class AudioPiece:
    """Audio ready to send, with the words whose timestamps it completes (seconds from the start)."""

    audio: np.ndarray
    words: list[WordTimestamp] = field(default_factory=list)
    phonemes: int = 0


class Synthesizer:
    """Runs speech jobs: front end in ``pool``, chunks through ``scheduler``."""

    def __init__(self, tts: KokoroTTS, scheduler: ChunkScheduler, pool: ProcessPoolExecutor,
                 *, lookahead: int, deterministic: bool,
                 on_g2p: Callable[[float], None] | None = None,
                 on_first_chunk: Callable[[float], None] | None = None) -> None:
        self.tts = tts
        self.scheduler = scheduler
        self.pool = pool
        self.lookahead = lookahead
        self.deterministic = deterministic
        self.limit = min(MAX_PHONEMES, tts.config.max_phonemes)
        self._on_g2p = on_g2p
        self._on_first_chunk = on_first_chunk  # seconds from a job's first chunk submitted to its audio

    async def _chunks(self, job: SpeechJob) -> AsyncIterator[Chunk]:
        """The job's chunks in order; the next piece is phonemised while this one's chunks are used."""
        pieces = text_pieces(job.text)
        pending: deque[tuple[Future[list[Chunk]], float]] = deque()
        try:
            if pieces:
                pending.append((self.pool.submit(phonemize_piece, pieces[0], job.lang, self.limit),
                                time.perf_counter()))
            submitted = len(pending)
            while pending:
                future, started = pending.popleft()
                chunks = await asyncio.wrap_future(future)
                if self._on_g2p is not None:
                    self._on_g2p(time.perf_counter() - started)
                if submitted < len(pieces):
                    pending.append((self.pool.submit(phonemize_piece, pieces[submitted], job.lang,
                                                     self.limit), time.perf_counter()))
                    submitted += 1
                for chunk in chunks:
                    yield chunk
        finally:
            for future, _ in pending:
                future.cancel()

    def _spec(self, job: SpeechJob, chunk: Chunk, index: int, deadline: float, now: float) -> ChunkSpec:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # phoneme characters outside the vocab are dropped
            ids = phonemes_to_ids(chunk.phonemes, self.tts.config.vocab, self.tts.config.max_phonemes)
        return ChunkSpec(
            input_ids=ids,
            ref_s=style_for(job.pack, chunk.phonemes),
            speed=job.speed,
            seed=None if job.seed is None else job.seed + index,
            deterministic=self.deterministic,
            priority=deadline,
            urgent=deadline <= now,
        )

    async def audio(self, job: SpeechJob) -> AsyncIterator[AudioPiece]:
        """The job's audio, piece by piece as chunks finish; closing the iterator cancels the rest.

        Raises ``InputError`` (before any audio) when the text has nothing to speak.
        """
        chunks = self._chunks(job)
        started = time.monotonic()
        inflight: deque[tuple[Chunk, Future[ChunkOutput]]] = deque()
        exhausted = False
        index = 0
        first_submitted = 0.0
        offset = 0.0  # seconds of audio received
        held = np.zeros(0, dtype=np.float32)  # the last chunk's tail, sent once the next is known

        async def fill() -> None:
            nonlocal exhausted, index, first_submitted
            while not exhausted and len(inflight) < self.lookahead:
                chunk = await anext(chunks, None)
                if chunk is None:
                    exhausted = True
                    return
                # The audio before this chunk: what was received, and an estimate of what is in flight.
                pending = sum(len(c.phonemes) for c, _ in inflight) * SECONDS_PER_PHONEME / job.speed
                spec = self._spec(job, chunk, index, started + offset + pending, time.monotonic())
                inflight.append((chunk, self.scheduler.submit(spec)))
                if index == 0:
                    first_submitted = time.perf_counter()
                index += 1

        try:
            await fill()
            if not inflight:
                raise InputError("the text yields no phonemes to speak; pass words")
            first = True
            while inflight:
                chunk, future = inflight.popleft()
                out = await asyncio.wrap_future(future)
                if first and self._on_first_chunk is not None:
                    self._on_first_chunk(time.perf_counter() - first_submitted)
                audio = np.asarray(out.audio, dtype=np.float32)
                if not first and len(held) and len(audio):
                    held = _fade(held, fade_in=False)
                    audio = _fade(audio, fade_in=True)
                words = word_timestamps(chunk.words, chunk.phonemes, out.durations, self.tts.config.vocab,
                                        offset) if job.timestamps else []
                offset += len(audio) / self.tts.sample_rate
                keep = min(FADE_SAMPLES, len(audio))
                send = np.concatenate([held, audio[: len(audio) - keep]])
                held = audio[len(audio) - keep :].copy()
                first = False
                yield AudioPiece(send, words, len(out.durations) - 2)
                await fill()
            yield AudioPiece(held)
        finally:
            for _, future in inflight:
                future.cancel()
            await chunks.aclose()


def _fade(audio: np.ndarray, *, fade_in: bool) -> np.ndarray:
    n = min(FADE_SAMPLES, len(audio))
    out = audio.copy()
    if fade_in:
        out[:n] *= _FADE_IN[:n]
    else:
        out[len(out) - n :] *= _FADE_IN[:n][::-1]
    return out
