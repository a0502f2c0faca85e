"""Continuous batching: chunks from many callers, run together on the backend as they arrive.

``ChunkScheduler.submit(ChunkSpec)`` is thread-safe and returns a
``concurrent.futures.Future`` of a ``ChunkOutput`` (``submit_many`` queues
several at once, ``submit_async`` is the asyncio form). One worker thread per
backend lane (the CUDA engine's lanes: streams with their own workspace; one
elsewhere) takes pending chunks as soon as its lane is free and runs them in
one ``backend.forward_on_lane`` call: a chunk submitted while others run
starts when a lane frees, not after a whole batch drains, and each chunk's
future resolves as soon as its own audio is ready, not when its call ends.
Order: lower ``priority`` first; then earliest deadline, a chunk's arrival
plus a few times its idle latency (estimated from its length), so that
under load every chunk waits about in proportion to its own length and a
short chunk is not queued behind every long one that came just before it;
chunks submitted together share their longest one's deadline (then longer
first, which evens out the lanes), then arrival order. A worker takes a
share of the queue that shrinks as it empties (the queue over twice the
lanes, at most ``max_batch``), so lanes that took long chunks and lanes that
took short ones finish together. Urgent chunks (a listener is already waiting:
a stream's first chunk) at the head of the queue go in calls of their own, the
urgent queue over twice the lanes, so that under load a first chunk shares its
call only with other first chunks, not with the chunks of streams that are
ahead. With one lane, an idle backend's first
chunk waits at most ``gather_s`` for companions (with several, a free lane
starts at once: the next chunks go to the other lanes). Scheduling is per chunk: a caller
with a long text submits its chunks one (or a few) at a time, so other
callers' chunks interleave with them.

A future not yet started can be cancelled (``Future.cancel()``); the queue is
bounded (``QueueFullError`` when full); ``close()`` stops intake and either
finishes or cancels what is queued.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from .backends import Backend
from .errors import KokoroError, QueueFullError

logger = logging.getLogger("kokoro_gpu")

# A CUDA lane stacks up to 16 chunks' token phases (the engine's group bound); the CPU
# backend runs chunks one after another, so batching there only delays the first.
DEFAULT_MAX_BATCH = {"cuda": 16, "cpu": 1}
DEFAULT_MAX_QUEUE = 4096
DEFAULT_GATHER_S = 0.002
# A chunk's deadline: its arrival plus DEADLINE_SLACK times its idle latency, estimated as
# IDLE_BASE_S + IDLE_PER_TOKEN_S per token (an H100's replayed chunks on real weights: ~3 ms at
# 100 tokens). Only the order of deadlines matters, so the estimate need not fit every GPU.
DEADLINE_SLACK = 4.0
IDLE_BASE_S = 0.002
IDLE_PER_TOKEN_S = 1e-5


class SchedulerClosedError(KokoroError):
    """The scheduler is shut down and takes no more chunks."""


@dataclass(frozen=True)
class ChunkSpec:
    """One chunk to synthesise: token ids int64 [T] (boundary zeros included) and style [256].

    ``seed`` makes a non-deterministic chunk reproducible (None: fresh);
    ``priority`` orders the queue, lower first (a server passes the time by which
    a listener needs the chunk, so a new stream's first chunk is not queued
    behind a long stream's tenth, nor a stream that is falling behind behind both);
    ``urgent``: a listener is waiting for it now (a stream's first chunk): at the head of the
    queue it runs in a call of urgent chunks only, which lands sooner than a shared one.
    """

    input_ids: np.ndarray
    ref_s: np.ndarray
    speed: float = 1.0
    seed: int | None = None
    deterministic: bool = False
    priority: float = 0.0
    urgent: bool = False


@dataclass(frozen=True)
class ChunkOutput:
    """A chunk's audio (float32, 24 kHz) and durations (frames per token)."""

    audio: np.ndarray
    durations: np.ndarray


def idle_estimate_s(tokens: int) -> float:
    """A chunk's latency on an idle GPU, roughly, from its token count (for deadlines only)."""
    return IDLE_BASE_S + IDLE_PER_TOKEN_S * tokens


@dataclass(order=True)
class _Entry:
    priority: float
    deadline: float  # arrival + DEADLINE_SLACK x the idle estimate of its submission's longest chunk
    longer_first: int  # minus the token count: of one submission, long chunks start first
    order: int
    spec: ChunkSpec = field(compare=False)
    future: Future[ChunkOutput] = field(compare=False)
    arrived: float = field(compare=False)


# Called after each backend call with (chunks in it, seconds the backend took).
BatchObserver = Callable[[int, float], None]
# Called with each chunk's seconds in the queue (from submission to a lane taking it).
WaitObserver = Callable[[float], None]


class ChunkScheduler:
    """Thread-safe submission of chunks; a worker thread per backend lane runs them as lanes free."""

    def __init__(
        self,
        backend: Backend,
        *,
        max_batch: int | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        gather_s: float = DEFAULT_GATHER_S,
        on_batch: BatchObserver | None = None,
        lanes: int | None = None,
        on_wait: WaitObserver | None = None,
    ) -> None:
        batch = max_batch if max_batch is not None else DEFAULT_MAX_BATCH.get(backend.device, 1)
        backend_lanes = max(1, int(getattr(backend, "lanes", 1)))
        if batch < 1 or max_queue < 1 or gather_s < 0 or (lanes is not None and lanes < 1):
            raise ValueError("max_batch, max_queue and lanes must be >= 1 and gather_s >= 0")
        self.backend = backend
        self.max_batch = batch
        self.max_queue = max_queue
        self.gather_s = gather_s
        self.lanes = backend_lanes if lanes is None else min(lanes, backend_lanes)
        self._on_lanes = backend_lanes > 1  # forward_on_lane, else forward_batch
        self._on_batch = on_batch
        self._on_wait = on_wait
        self._heap: list[_Entry] = []
        self._queued = 0  # entries in the heap not cancelled
        self._urgent = 0  # of them, urgent
        self._running = [0] * self.lanes  # chunks on each lane now
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._closing = False
        self._workers = [
            threading.Thread(target=self._run, args=(lane,), name=f"kokoro-lane-{lane}", daemon=True)
            for lane in range(self.lanes)
        ]
        for worker in self._workers:
            worker.start()

    # ------------------------------------------------------------ submission

    def submit(self, spec: ChunkSpec) -> Future[ChunkOutput]:
        """Queue one chunk; its future resolves to a ``ChunkOutput`` (or the backend's error)."""
        return self.submit_many([spec])[0]

    def submit_many(self, specs: list[ChunkSpec]) -> list[Future[ChunkOutput]]:
        """Queue chunks together (the lanes see them all at once); all or none are taken."""
        futures: list[Future[ChunkOutput]] = [Future() for _ in specs]
        with self._cond:
            if self._closing:
                raise SchedulerClosedError("the synthesis scheduler is shut down; no more chunks are taken")
            if self._queued + len(specs) > self.max_queue:
                raise QueueFullError(
                    f"the synthesis queue is full ({self.max_queue} chunks at most, {self._queued} waiting); "
                    "retry in a moment"
                )
            now = time.monotonic()
            longest = max((int(np.size(spec.input_ids)) for spec in specs), default=0)
            deadline = now + DEADLINE_SLACK * idle_estimate_s(longest)
            for spec, future in zip(specs, futures, strict=True):
                entry = _Entry(
                    spec.priority,
                    deadline,
                    -int(np.size(spec.input_ids)),
                    next(self._order),
                    spec,
                    future,
                    now,
                )
                heapq.heappush(self._heap, entry)
            self._queued += len(specs)
            self._urgent += sum(spec.urgent for spec in specs)
            self._cond.notify_all()
        for spec, future in zip(specs, futures, strict=True):
            future.add_done_callback(functools.partial(self._forget_if_cancelled, spec.urgent))
        return futures

    async def submit_async(self, spec: ChunkSpec) -> ChunkOutput:
        """``submit`` for asyncio: awaiting gives the output; cancelling the task cancels the chunk."""
        return await asyncio.wrap_future(self.submit(spec))

    def _forget_if_cancelled(self, urgent: bool, future: Future[ChunkOutput]) -> None:
        if future.cancelled():
            with self._cond:
                self._queued -= 1
                self._urgent -= urgent
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
        """Chunks on the backend now (all lanes)."""
        with self._cond:
            return sum(self._running)

    @property
    def closed(self) -> bool:
        return self._closing

    # ---------------------------------------------------------------- worker

    def _share(self, queued: int) -> int:
        """How many chunks a free lane takes: ``queued`` over twice the lanes, within 1 .. max_batch.

        Early shares are large (stacked token phases), the last ones small, so that the lanes'
        work evens out as the queue drains (guided self-scheduling).
        """
        return max(1, min(self.max_batch, -(-queued // (2 * self.lanes))))

    def _take_batch(self, lane: int) -> list[_Entry] | None:
        """Wait for chunks and pop this lane's share of them (marked running); None when done."""
        with self._cond:
            while True:
                while not self._heap and not self._closing:
                    self._cond.wait()
                if not self._heap:
                    return None
                while self._heap and self._heap[0].future.cancelled():
                    heapq.heappop(self._heap)  # counted out when cancelled
                if not self._heap:
                    continue
                urgent = self._heap[0].spec.urgent
                # One idle lane: the first chunk waits a little for companions; a chunk that waited
                # while the lane was busy has used its window up and goes at once.
                if self.lanes == 1 and not self._running[0] and not urgent:
                    oldest = min(e.arrived for e in self._heap[: self.max_batch])
                    while self._queued < self.max_batch and not self._closing:
                        remaining = oldest + self.gather_s - time.monotonic()
                        if remaining <= 0 or not self._heap:
                            break
                        self._cond.wait(remaining)
                if urgent:  # a call of urgent chunks only, sized for the urgent queue
                    share = self._share(self._urgent)
                else:
                    share = self._share(self._queued) if self.lanes > 1 else self.max_batch
                batch: list[_Entry] = []
                while self._heap and len(batch) < share and (self._heap[0].spec.urgent or not urgent):
                    entry = heapq.heappop(self._heap)
                    if entry.future.set_running_or_notify_cancel():
                        self._queued -= 1
                        self._urgent -= entry.spec.urgent
                        batch.append(entry)
                if batch:
                    self._running[lane] = len(batch)
                    return batch

    def _run(self, lane: int) -> None:
        while (batch := self._take_batch(lane)) is not None:
            started = time.perf_counter()
            if self._on_wait is not None:
                taken = time.monotonic()
                for entry in batch:
                    self._on_wait(taken - entry.arrived)
            for deterministic in (False, True):
                group = [e for e in batch if e.spec.deterministic == deterministic]
                if group:
                    self._forward(lane, group, deterministic)
            with self._cond:
                self._running[lane] = 0
                self._cond.notify_all()
            if self._on_batch is not None:
                self._on_batch(len(batch), time.perf_counter() - started)

    def _forward(self, lane: int, group: list[_Entry], deterministic: bool) -> None:
        items = [(e.spec.input_ids, e.spec.ref_s, e.spec.speed, e.spec.seed) for e in group]

        def deliver(i: int, audio: np.ndarray, durations: np.ndarray) -> None:
            group[i].future.set_result(ChunkOutput(audio=audio, durations=durations))

        try:
            if self._on_lanes:
                self.backend.forward_on_lane(lane, items, deterministic=deterministic, on_result=deliver)
            else:
                outputs = self.backend.forward_batch(items, deterministic=deterministic)
                for i, (audio, durations) in enumerate(outputs):
                    deliver(i, audio, durations)
        except BaseException as e:  # the callers get the error; the worker lives on
            logger.exception("kokoro_gpu: a batch of %d chunks failed", len(group))
            for entry in group:
                if not entry.future.done():
                    entry.future.set_exception(e)

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
        deadline = None if timeout is None else time.monotonic() + timeout
        for worker in self._workers:
            worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> ChunkScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
