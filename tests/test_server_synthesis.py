"""The server's Synthesizer: the order in which a request's text reaches the front-end pool, and
its chunks' deadlines (each chunk's priority is the request time plus the audio before it, the audio
of chunks not yet made estimated from their phonemes, so a stream's second chunk does not compete
with other streams' first chunks).

A recording scheduler stands in for the engine (it answers at once with silence of a given length);
the text front end is the real one, in a thread pool that records what it is given.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from concurrent.futures import Future, ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

from kokoro_gpu.config import ModelConfig
from kokoro_gpu.scheduler import ChunkOutput, ChunkSpec
from kokoro_gpu.server.speech import SpeechJob
from kokoro_gpu.server.synthesis import SECONDS_PER_PHONEME, AudioPiece, Synthesizer, warm_front_end

pytest.importorskip("misaki")

TEXT = (
    "The first sentence is short. The rest of the first line follows it, somewhat longer than "
    "the first sentence was.\nA second line of text, read after the first.\nAnd a third line."
)


class RecordingScheduler:
    """Records each spec with its submission time; its result is audio `audio_s(spec)` seconds long."""

    def __init__(self, audio_s) -> None:
        self.specs: list[ChunkSpec] = []
        self.audio_s = audio_s

    def submit(self, spec: ChunkSpec) -> Future[ChunkOutput]:
        self.specs.append(spec)
        future: Future[ChunkOutput] = Future()
        samples = round(self.audio_s(spec) * 24000)
        future.set_result(ChunkOutput(np.zeros(samples, np.float32), np.ones(spec.input_ids.size, np.int64)))
        return future


class RecordingPool(ThreadPoolExecutor):
    """A one-thread pool that logs ("submit", piece) and ("done", piece) in order."""

    def __init__(self) -> None:
        super().__init__(1)
        self.log: list[tuple[str, str]] = []

    def submit(self, fn, /, *args, **kwargs):
        piece = args[0]
        self.log.append(("submit", piece))
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(lambda _: self.log.append(("done", piece)))
        return future


def _run(scheduler: RecordingScheduler, speed: float, pool: ThreadPoolExecutor | None = None,
         pieces: list[AudioPiece] | None = None, timestamps: bool = False) -> float:
    """The job's audio through `scheduler` (its pieces appended to `pieces`); the time it started."""
    config = ModelConfig.load()
    tts = SimpleNamespace(config=config, sample_rate=24000)
    job = SpeechJob(TEXT, "af_heart", np.zeros((510, 1, 256), np.float32), "en-us", speed, "pcm", "audio",
                    None, True, timestamps)
    with pool or ThreadPoolExecutor(1) as pool:
        synthesizer = Synthesizer(tts, scheduler, pool, lookahead=2, deterministic=True)

        async def consume() -> float:
            started = time.monotonic()
            async for piece in synthesizer.audio(job):
                if pieces is not None:
                    pieces.append(piece)
            return started

        return asyncio.run(consume())


def _phonemes(spec: ChunkSpec) -> int:
    return spec.input_ids.size - 2  # the boundary zeros


@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_chunk_deadlines_add_the_audio_before_each_chunk(speed: float) -> None:
    # The engine's audio twice the estimate: deadlines then use the audio received where it is known.
    scheduler = RecordingScheduler(lambda spec: 2 * _phonemes(spec) * SECONDS_PER_PHONEME / speed)
    # A server's pool is warmed first: a cold front end may take longer than the first chunk's audio.
    warm_front_end(("en-us",))
    started = _run(scheduler, speed)
    specs = scheduler.specs
    assert len(specs) >= 4, "the text makes at least four chunks"
    assert abs(specs[0].priority - started) < 0.5, "the first chunk is due at the request"
    # Due at once: the first chunk is urgent; the others, due after the audio before them, are not.
    assert [s.urgent for s in specs] == [True] + [False] * (len(specs) - 1)
    estimate = [_phonemes(s) * SECONDS_PER_PHONEME / speed for s in specs]
    received = [2 * e for e in estimate]
    # Lookahead 2: chunk i is submitted once chunk i - 2 has been received, so the audio before it is
    # chunks 0 .. i - 2 as received plus chunk i - 1 as estimated (chunk 1: chunk 0 estimated).
    for i in range(1, len(specs)):
        before = sum(received[: i - 1]) + estimate[i - 1]
        assert specs[i].priority - specs[0].priority == pytest.approx(before, rel=0.02, abs=0.05), i


def test_each_piece_goes_to_the_pool_once_the_one_before_is_done():
    """One piece ahead, from the first: the first sentence goes alone (many requests arriving
    together get their first sentences phonemised before anyone's second piece)."""
    pool = RecordingPool()
    _run(RecordingScheduler(lambda spec: 0.5), 1.0, pool)
    submitted = [piece for event, piece in pool.log if event == "submit"]
    assert submitted[0] == "The first sentence is short."
    assert len(submitted) == 4, submitted
    for before, after in itertools.pairwise(submitted):
        assert pool.log.index(("done", before)) < pool.log.index(("submit", after)), pool.log


def test_word_timestamps_only_for_jobs_that_ask_for_them():
    """The captioned routes' jobs get each piece's words (every word of the text, in order); a plain
    speech job's pieces carry none (the work is skipped)."""
    def frames_s(spec: ChunkSpec) -> float:  # the recording scheduler's durations: a frame per token
        return spec.input_ids.size * 0.025

    plain: list[AudioPiece] = []
    _run(RecordingScheduler(frames_s), 1.0, pieces=plain)
    captioned: list[AudioPiece] = []
    _run(RecordingScheduler(frames_s), 1.0, pieces=captioned, timestamps=True)
    assert [len(p.audio) for p in plain] == [len(p.audio) for p in captioned]
    assert all(not p.words for p in plain)
    words = [w for p in captioned for w in p.words]
    spoken = [w.word for w in words if any(c.isalpha() for c in w.word)]
    assert spoken == [w.strip(".,") for w in TEXT.split()], spoken
    assert all(0 <= w.start <= w.end for w in words)
    assert all(a.start <= b.start for a, b in itertools.pairwise(words))
