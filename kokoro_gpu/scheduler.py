"""Continuous batching: chunks from many callers, run together on the backend as they arrive.

``ChunkScheduler.submit(ChunkSpec)`` is thread-safe and returns a
``concurrent.futures.Future`` of a ``ChunkOutput``; ``submit_async`` is the
asyncio form. One worker thread takes whatever chunks are pending (up to
``max_batch``; lower ``priority`` first, then arrival order) and runs them in
one ``backend.forward_batch`` call, so a chunk submitted while a batch runs
joins the next batch rather than waiting for a whole request to drain. When
the backend is idle, the first chunk waits at most ``gather_s`` for companions.
Scheduling is per chunk: a caller with a long text submits its chunks one (or
a few) at a time, so other callers' chunks interleave with them.

A future not yet started can be cancelled (``Future.cancel()``); the queue is
bounded (``QueueFullError`` when full); ``close()`` stops intake and either
finishes or cancels what is queued. The interface (spec in, future out) is what
a native scheduler with lanes pulling chunks as they free would also offer.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from .backends import Backend
from .errors import KokoroError, QueueFullError

logger = logging.getLogger("kokoro_gpu")

# The CUDA engine runs a batch's utterances concurrently on its lanes; the CPU
# backend runs them one after another, so batching there only delays the first.
DEFAULT_MAX_BATCH = {"cuda": 64, "cpu": 1}
DEFAULT_MAX_QUEUE = 4096
DEFAULT_GATHER_S = 0.002


class SchedulerClosedError(KokoroError):
    """The scheduler is shut down and takes no more chunks."""


@dataclass(frozen=True)
class ChunkSpec:
    """One chunk to synthesise: token ids int64 [T] (boundary zeros included) and style [256].

    ``seed`` makes a non-deterministic chunk reproducible (None: fresh);
    ``priority`` orders the queue, lower first (a server passes the time by which
    a listener needs the chunk, so a new stream's first chunk is not queued
    behind a long stream's tenth, nor a stream that is falling behind behind both).
    """

    input_ids: np.ndarray
    ref_s: np.ndarray
    speed: float = 1.0
    seed: int | None = None
    deterministic: bool = False
    priority: float = 0.0


@dataclass(frozen=True)
class ChunkOutput:
    """A chunk's audio (float32, 24 kHz) and durations (frames per token)."""

    audio: np.ndarray
    durations: np.ndarray


@dataclass(order=True)
class _Entry:
    priority: float
    order: int
    spec: ChunkSpec
    future: Future[ChunkOutput]
    arrived: float


# Called after each batch with (chunks in the batch, seconds the backend took).
BatchObserver = Callable[[int, float], None]


class ChunkScheduler:
    """Thread-safe submission of chunks; one worker thread batching them onto ``backend``."""

    def __init__(
        self,
        backend: Backend,
        *,
        max_batch: int | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        gather_s: float = DEFAULT_GATHER_S,
        on_batch: BatchObserver | None = None,
    ) -> None:
        batch = max_batch if max_batch is not None else DEFAULT_MAX_BATCH.get(backend.device, 1)
        if batch < 1 or max_queue < 1 or gather_s < 0:
            raise ValueError("max_batch and max_queue must be >= 1 and gather_s >= 0")
        self.backend = backend
        self.max_batch = batch
        self.max_queue = max_queue
        self.gather_s = gather_s
        self._on_batch = on_batch
        self._heap: list[_Entry] = []
        self._queued = 0  # entries in the heap not cancelled
        self._running = 0
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._closing = False
        self._worker = threading.Thread(target=self._run, name="kokoro-scheduler", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------ submission

    def submit(self, spec: ChunkSpec) -> Future[ChunkOutput]:
        """Queue one chunk; its future resolves to a ``ChunkOutput`` (or the backend's error)."""
        future: Future[ChunkOutput] = Future()
        with self._cond:
            if self._closing:
                raise SchedulerClosedError("the synthesis scheduler is shut down; no more chunks are taken")
            if self._queued >= self.max_queue:
                raise QueueFullError(
                    f"the synthesis queue is full ({self.max_queue} chunks waiting); retry in a moment"
                )
            entry = _Entry(spec.priority, next(self._order), spec, future, time.monotonic())
            heapq.heappush(self._heap, entry)
            self._queued += 1
            self._cond.notify_all()
        future.add_done_callback(self._forget_if_cancelled)
        return future

    async def submit_async(self, spec: ChunkSpec) -> ChunkOutput:
        """``submit`` for asyncio: awaiting gives the output; cancelling the task cancels the chunk."""
        return await asyncio.wrap_future(self.submit(spec))

    def _forget_if_cancelled(self, future: Future[ChunkOutput]) -> None:
        if future.cancelled():
            with self._cond:
                self._queued -= 1
                # Cancelled entries stay in the heap until popped; prune when they dominate it.
                if len(self._heap) > 2 * self._queued + 64:
                    self._heap = [e for e in self._heap if not e.future.cancelled()]
                    heapq.heapify(self._heap)

    # ----------------------------------------------------------------- state

    @property
    def queue_depth(self) -> int:
        """Chunks waiting (not cancelled, not yet started)."""
        with self._cond:
            return self._queued

    @property
    def running(self) -> int:
        """Chunks in the batch on the backend now."""
        with self._cond:
            return self._running

    @property
    def closed(self) -> bool:
        return self._closing

    # ---------------------------------------------------------------- worker

    def _take_batch(self) -> list[_Entry] | None:
        """Wait for chunks and pop up to ``max_batch`` of them (marked running); None when done."""
        with self._cond:
            while True:
                while not self._heap and not self._closing:
                    self._cond.wait()
                if not self._heap:
                    return None
                # An idle backend waits a little for companions of the first chunk; a chunk that
                # waited through the previous batch has used its window up and goes at once.
                oldest = min(e.arrived for e in self._heap[: self.max_batch])
                while self._queued < self.max_batch and not self._closing:
                    remaining = oldest + self.gather_s - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                batch: list[_Entry] = []
                while self._heap and len(batch) < self.max_batch:
                    entry = heapq.heappop(self._heap)
                    if entry.future.set_running_or_notify_cancel():
                        self._queued -= 1
                        batch.append(entry)
                if batch:
                    self._running = len(batch)
                    return batch

    def _run(self) -> None:
        while (batch := self._take_batch()) is not None:
            started = time.perf_counter()
            for deterministic in (False, True):
                group = [e for e in batch if e.spec.deterministic == deterministic]
                if group:
                    self._forward(group, deterministic)
            with self._cond:
                self._running = 0
            if self._on_batch is not None:
                self._on_batch(len(batch), time.perf_counter() - started)

    def _forward(self, group: list[_Entry], deterministic: bool) -> None:
        items = [(e.spec.input_ids, e.spec.ref_s, e.spec.speed, e.spec.seed) for e in group]
        try:
            outputs = self.backend.forward_batch(items, deterministic=deterministic)
        except BaseException as e:  # the callers get the error; the worker lives on
            logger.exception("kokoro_gpu: a batch of %d chunks failed", len(group))
            for entry in group:
                entry.future.set_exception(e)
            return
        for entry, (audio, durations) in zip(group, outputs, strict=True):
            entry.future.set_result(ChunkOutput(audio=audio, durations=durations))

    # -------------------------------------------------------------- shutdown

    def close(self, *, cancel_pending: bool = False, timeout: float | None = None) -> None:
        """Take no more chunks; finish the queued ones (or cancel them) and stop the worker.

        The batch on the backend always finishes. Safe to call more than once.
        """
        with self._cond:
            self._closing = True
            if cancel_pending:
                pending = [e.future for e in self._heap]
            self._cond.notify_all()
        if cancel_pending:
            for future in pending:
                future.cancel()
        self._worker.join(timeout)

    def __enter__(self) -> ChunkScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
