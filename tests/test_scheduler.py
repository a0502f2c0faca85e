"""The continuous-batching scheduler: concurrent submitters, batching, cancellation, bounds, shutdown.

The scheduling tests use a fast recording backend whose output is a function of
its inputs (so a mixed-up result shows); one test runs the real CPU model on a
random-weights model directory and compares with one-by-one ``forward``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor

import numpy as np
import pytest

from kokoro_gpu import KokoroTTS
from kokoro_gpu.backends import Backend
from kokoro_gpu.errors import KokoroError, QueueFullError
from kokoro_gpu.scheduler import ChunkScheduler, ChunkSpec, SchedulerClosedError
from kokoro_gpu.tokens import phonemes_to_ids
from kokoro_gpu.voices import style_for


class RecordingBackend(Backend):
    """Audio = f(ids, style, speed, seed); records each batch; can be held to let chunks pile up."""

    device = "cuda"  # batches like the GPU engine
    precision = "fp32"

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def forward(self, input_ids, ref_s, speed, *, deterministic, seed, trace=None):
        noise = 0.0 if deterministic else np.random.default_rng(seed).standard_normal()
        audio = np.full(len(input_ids) * 10, input_ids.sum() + ref_s[0] + speed + noise, dtype=np.float32)
        return audio, np.ones(len(input_ids), dtype=np.int64)

    def forward_batch(self, items, *, deterministic):
        self.started.set()
        self.gate.wait()
        self.batches.append([int(ids[1]) for ids, *_ in items])
        return super().forward_batch(items, deterministic=deterministic)


def _spec(tag: int, **kwargs) -> ChunkSpec:
    ids = np.array([0, tag, tag % 7 + 1, 0], dtype=np.int64)
    return ChunkSpec(ids, np.full(256, tag / 100, dtype=np.float32), **kwargs)


def test_many_threads_each_get_their_own_results():
    backend = RecordingBackend()
    with ChunkScheduler(backend, max_batch=8, gather_s=0.005) as scheduler:

        def caller(thread: int) -> list[tuple[int, np.ndarray]]:
            tags = [thread * 100 + k + 1 for k in range(5)]
            futures = [scheduler.submit(_spec(t, seed=t, speed=1 + thread / 10)) for t in tags]
            return [(t, f.result(timeout=30).audio) for t, f in zip(tags, futures, strict=True)]

        with ThreadPoolExecutor(16) as pool:
            results = [r for rs in pool.map(caller, range(16)) for r in rs]
    assert len(results) == 80
    for tag, audio in results:
        spec = _spec(tag, seed=tag, speed=1 + (tag // 100) / 10)
        want, _ = backend.forward(spec.input_ids, spec.ref_s, spec.speed, deterministic=False, seed=tag)
        np.testing.assert_array_equal(audio, want)
    assert sum(len(b) for b in backend.batches) == 80
    assert max(len(b) for b in backend.batches) > 1, "concurrent chunks were never batched"
    assert max(len(b) for b in backend.batches) <= 8


def test_chunks_submitted_during_a_batch_join_the_next_one_by_priority():
    backend = RecordingBackend()
    backend.gate.clear()
    with ChunkScheduler(backend, max_batch=3, gather_s=0) as scheduler:
        first = scheduler.submit(_spec(1))
        assert backend.started.wait(10)
        # While the first batch runs: a long stream's later chunks, then a new stream's first chunk.
        later = [scheduler.submit(_spec(10 + k, priority=k + 1)) for k in range(4)]
        new_first = scheduler.submit(_spec(50, priority=0))
        backend.gate.set()
        for f in [first, new_first, *later]:
            f.result(timeout=10)
    assert backend.batches == [[1], [50, 10, 11], [12, 13]]


def test_each_chunk_reports_its_wait_for_a_lane():
    """on_wait gets every chunk's time from submission to a lane taking it: about nothing for the
    chunk that starts at once, at least the time the lane was held for those queued behind it."""
    backend = RecordingBackend()
    backend.gate.clear()
    waits: list[float] = []
    hold_s = 0.2
    with ChunkScheduler(backend, max_batch=2, gather_s=0, on_wait=waits.append) as scheduler:
        first = scheduler.submit(_spec(1))
        assert backend.started.wait(10)
        queued = [scheduler.submit(_spec(2 + k)) for k in range(3)]
        time.sleep(hold_s)
        backend.gate.set()
        for f in [first, *queued]:
            f.result(timeout=10)
    assert len(waits) == 4
    assert waits[0] < hold_s / 2
    assert all(w >= hold_s for w in waits[1:]), waits


def test_cancel_a_queued_chunk():
    backend = RecordingBackend()
    backend.gate.clear()
    with ChunkScheduler(backend, max_batch=1, gather_s=0) as scheduler:
        running = scheduler.submit(_spec(1))
        assert backend.started.wait(10)
        queued = [scheduler.submit(_spec(2 + k)) for k in range(3)]
        assert scheduler.queue_depth == 3
        assert queued[1].cancel()
        assert not running.cancel(), "a started chunk cannot be cancelled"
        assert scheduler.queue_depth == 2
        backend.gate.set()
        assert running.result(timeout=10).audio.size
        assert queued[0].result(timeout=10).audio.size and queued[2].result(timeout=10).audio.size
    with pytest.raises(CancelledError):
        queued[1].result()
    assert [b[0] for b in backend.batches] == [1, 2, 4]


def test_full_queue_raises_and_frees_on_cancel():
    backend = RecordingBackend()
    backend.gate.clear()
    scheduler = ChunkScheduler(backend, max_batch=1, max_queue=2, gather_s=0)
    scheduler.submit(_spec(1))
    assert backend.started.wait(10)
    waiting = [scheduler.submit(_spec(2)), scheduler.submit(_spec(3))]
    with pytest.raises(QueueFullError, match="queue is full"):
        scheduler.submit(_spec(4))
    assert isinstance(QueueFullError("x"), KokoroError)
    waiting[0].cancel()
    extra = scheduler.submit(_spec(5))
    backend.gate.set()
    assert extra.result(timeout=10).audio.size
    scheduler.close()


def test_close_finishes_queued_work_then_refuses():
    backend = RecordingBackend()
    backend.gate.clear()
    scheduler = ChunkScheduler(backend, max_batch=2, gather_s=0)
    futures = [scheduler.submit(_spec(k + 1)) for k in range(5)]
    assert backend.started.wait(10)
    threading.Timer(0.1, backend.gate.set).start()
    scheduler.close(timeout=10)
    assert all(f.done() and not f.cancelled() for f in futures)
    with pytest.raises(SchedulerClosedError):
        scheduler.submit(_spec(9))


def test_close_can_cancel_queued_work():
    backend = RecordingBackend()
    backend.gate.clear()
    scheduler = ChunkScheduler(backend, max_batch=1, gather_s=0)
    futures = [scheduler.submit(_spec(k + 1)) for k in range(4)]
    assert backend.started.wait(10)
    threading.Timer(0.1, backend.gate.set).start()
    scheduler.close(cancel_pending=True, timeout=10)
    assert futures[0].result().audio.size
    assert all(f.cancelled() for f in futures[1:])


def test_a_failing_batch_reaches_its_callers_and_the_worker_lives_on():
    class Failing(RecordingBackend):
        def forward_batch(self, items, *, deterministic):
            if any(int(ids[1]) == 13 for ids, *_ in items):
                raise RuntimeError("engine failure")
            return super().forward_batch(items, deterministic=deterministic)

    with ChunkScheduler(Failing(), max_batch=1, gather_s=0) as scheduler:
        bad = scheduler.submit(_spec(13))
        with pytest.raises(RuntimeError, match="engine failure"):
            bad.result(timeout=10)
        assert scheduler.submit(_spec(14)).result(timeout=10).audio.size


def test_submit_async_and_task_cancellation():
    backend = RecordingBackend()

    async def main(scheduler: ChunkScheduler) -> None:
        out = await scheduler.submit_async(_spec(3, deterministic=True))
        want, _ = backend.forward(_spec(3).input_ids, _spec(3).ref_s, 1.0, deterministic=True, seed=None)
        np.testing.assert_array_equal(out.audio, want)
        backend.gate.clear()
        blocker = asyncio.ensure_future(scheduler.submit_async(_spec(4)))
        await asyncio.sleep(0.05)
        queued = asyncio.ensure_future(scheduler.submit_async(_spec(5)))
        await asyncio.sleep(0.05)
        assert scheduler.queue_depth == 1
        queued.cancel()
        await asyncio.sleep(0.05)
        assert scheduler.queue_depth == 0
        backend.gate.set()
        await blocker

    with ChunkScheduler(backend, max_batch=1, gather_s=0) as scheduler:
        asyncio.run(main(scheduler))
    assert [b[0] for b in backend.batches] == [3, 4]


class LaneBackend(RecordingBackend):
    """Three lanes, as the CUDA engine has several: records (lane, tags) per call; lanes can be held."""

    lanes = 3

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, list[int]]] = []
        self.lane_gates = [threading.Event() for _ in range(self.lanes)]
        for gate in self.lane_gates:
            gate.set()
        self.lane_started = [threading.Event() for _ in range(self.lanes)]
        self.active = 0
        self.most_active = 0
        self.taken: list[int] = []
        self.lock = threading.Lock()

    def forward_on_lane(self, lane, items, *, deterministic, on_result=None):
        with self.lock:
            self.taken.append(len(items))
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        self.lane_started[lane].set()
        self.lane_gates[lane].wait()
        with self.lock:
            self.calls.append((lane, [int(ids[1]) for ids, *_ in items]))
        results = []
        try:
            # As the engine does: each result handed on as soon as it is made, then the next item.
            for i, item in enumerate(items):
                results.append(self.forward(*item[:3], deterministic=deterministic, seed=item[3]))
                if on_result is not None:
                    on_result(i, *results[-1])
                self.after_item(lane, i)
        finally:
            with self.lock:
                self.active -= 1
        return results

    def after_item(self, lane: int, index: int) -> None:
        """Called after each item's result is handed on (tests hold the lane here)."""

    def forward_batch(self, items, *, deterministic):
        raise AssertionError("a scheduler over lanes calls forward_on_lane")


def test_a_chunk_starts_on_a_free_lane_while_another_lane_is_busy():
    backend = LaneBackend()
    for gate in backend.lane_gates:
        gate.clear()
    with ChunkScheduler(backend, gather_s=0) as scheduler:
        long_running = scheduler.submit(_spec(1))
        deadline = time.monotonic() + 10
        while not any(started.is_set() for started in backend.lane_started):
            assert time.monotonic() < deadline, "no lane started"
            time.sleep(0.001)
        busy = next(lane for lane in range(3) if backend.lane_started[lane].is_set())
        for lane in range(3):
            if lane != busy:
                backend.lane_gates[lane].set()
        # The busy lane is held: a new chunk must finish on another lane meanwhile.
        quick = scheduler.submit(_spec(2))
        assert quick.result(timeout=10).audio.size
        assert not long_running.done()
        backend.lane_gates[busy].set()
        assert long_running.result(timeout=10).audio.size
    lanes = {tags[0]: lane for lane, tags in backend.calls}
    assert lanes[2] != lanes[1]


def test_lanes_take_shrinking_shares_and_every_chunk_once():
    backend = LaneBackend()
    for gate in backend.lane_gates:
        gate.clear()
    with ChunkScheduler(backend, max_batch=16, gather_s=0) as scheduler:
        futures = scheduler.submit_many([_spec(k + 1, seed=k) for k in range(48)])
        for started in backend.lane_started:
            assert started.wait(10)
        for gate in backend.lane_gates:
            gate.set()
        outputs = [f.result(timeout=10) for f in futures]
    for k, out in enumerate(outputs):
        spec = _spec(k + 1, seed=k)
        want, _ = backend.forward(spec.input_ids, spec.ref_s, spec.speed, deterministic=False, seed=k)
        np.testing.assert_array_equal(out.audio, want)
    tags = sorted(t for _, call in backend.calls for t in call)
    assert tags == list(range(1, 49))
    # 48 queued over 3 held lanes: the first shares are 48 / 6 = 8, 40 / 6 -> 7 and 33 / 6 -> 6; the
    # queue's tail goes one chunk at a time.
    assert sorted(backend.taken[:3]) == [6, 7, 8]
    assert min(backend.taken) == 1 and sum(backend.taken) == 48
    assert {lane for lane, _ in backend.calls} == {0, 1, 2}
    assert backend.most_active == 3


class TakeOrderBackend(LaneBackend):
    """Records each call's tags in the order the lanes take them."""

    def __init__(self) -> None:
        super().__init__()
        self.taken_tags: list[list[int]] = []

    def forward_on_lane(self, lane, items, *, deterministic, on_result=None):
        with self.lock:
            self.taken_tags.append([int(ids[1]) for ids, *_ in items])
        return super().forward_on_lane(lane, items, deterministic=deterministic, on_result=on_result)


@pytest.mark.parametrize("urgent", [True, False])
def test_urgent_chunks_at_the_head_run_in_calls_of_their_own(urgent: bool):
    """Three lanes held busy while 8 chunks due now (a server's first chunks) and 30 due later queue up:
    urgent ones go first in calls of urgent chunks only, the urgent queue over twice the lanes (8 / 6 ->
    2, then single ones); unmarked, the same head shares its calls with the chunks behind it."""
    backend = TakeOrderBackend()
    for gate in backend.lane_gates:
        gate.clear()
    with ChunkScheduler(backend, max_batch=16, gather_s=0) as scheduler:
        blockers = []
        for lane in range(3):  # one chunk on each lane, held
            blockers.append(scheduler.submit(_spec(100 + lane, priority=-1.0)))
            deadline = time.monotonic() + 10
            while sum(started.is_set() for started in backend.lane_started) <= lane:
                assert time.monotonic() < deadline, "a lane did not start"
                time.sleep(0.001)
        later = scheduler.submit_many([_spec(k + 1, priority=10.0) for k in range(30)])
        due = [scheduler.submit(_spec(50 + k, priority=1.0, urgent=urgent)) for k in range(8)]
        for gate in backend.lane_gates:
            gate.set()
        for future in blockers + later + due:
            assert future.result(timeout=10).audio.size
    calls = backend.taken_tags[3:]
    due_tags = set(range(50, 58))
    assert sorted(t for call in calls for t in call) == sorted([*range(1, 31), *due_tags])
    first_due = [call for call in calls if due_tags & set(call)]
    if urgent:
        assert all(set(call) <= due_tags for call in first_due), calls
        assert len(first_due[0]) == 2 and max(len(call) for call in first_due) == 2
        assert all(due_tags & set(call) for call in calls[: len(first_due)]), "urgent calls go first"
    else:
        # 38 queued over 3 lanes: the first share (7) takes the 8 due chunks' first 7 with nothing else,
        # the next one the last due chunk with 5 later ones.
        assert any(not set(call) <= due_tags for call in first_due), calls


def test_one_lane_runs_one_call_at_a_time():
    """``lanes=1`` (a server's one-request-at-a-time mode): one worker, on the backend's lane 0."""
    backend = LaneBackend()
    with ChunkScheduler(backend, max_batch=1, lanes=1, gather_s=0) as scheduler:
        assert scheduler.lanes == 1
        futures = scheduler.submit_many([_spec(k + 1) for k in range(6)])
        assert all(f.result(timeout=10).audio.size for f in futures)
    assert backend.most_active == 1
    assert backend.calls == [(0, [k + 1]) for k in range(6)]
    with pytest.raises(ValueError):
        ChunkScheduler(backend, lanes=0)


def test_submit_many_is_all_or_none_against_the_queue_bound():
    backend = LaneBackend()
    for gate in backend.lane_gates:
        gate.clear()
    scheduler = ChunkScheduler(backend, max_queue=4, gather_s=0)
    try:
        with pytest.raises(QueueFullError, match="4 chunks at most"):
            scheduler.submit_many([_spec(k + 1) for k in range(5)])
        assert scheduler.queue_depth == 0
        futures = scheduler.submit_many([_spec(k + 1) for k in range(4)])
    finally:
        for gate in backend.lane_gates:
            gate.set()
        scheduler.close(timeout=10)
    assert all(f.result(timeout=10).audio.size for f in futures)


@pytest.fixture(scope="module")
def cpu_tts(tmp_path_factory) -> KokoroTTS:
    from kokoro_gpu.random_weights import write_model_dir

    path = write_model_dir(tmp_path_factory.mktemp("model"), seed=3, voices=["af_heart", "am_adam"])
    return KokoroTTS.from_pretrained(path, device="cpu")


def test_cpu_backend_concurrent_chunks_equal_one_by_one(cpu_tts):
    """Real model: chunks of two voices, speeds and seeds from four threads, batched on the CPU backend."""
    cases = [("h\u02c8I.", "af_heart", 1.0, 7, False), ("b\u02c8I.", "am_adam", 1.3, 11, False),
             ("s\u02c8O.", "af_heart", 0.8, None, True), ("n\u02c8O.", "am_adam", 1.0, 5, False)]
    specs = []
    for phonemes, voice, speed, seed, deterministic in cases:
        ids = phonemes_to_ids(phonemes, cpu_tts.config.vocab, cpu_tts.config.max_phonemes)
        ref_s = style_for(cpu_tts.voices.load(voice), phonemes)
        specs.append(ChunkSpec(ids, ref_s, speed, seed, deterministic))
    with ChunkScheduler(cpu_tts.backend, max_batch=4, gather_s=0.05) as scheduler:
        with ThreadPoolExecutor(len(specs)) as pool:
            outputs = list(pool.map(lambda s: scheduler.submit(s).result(timeout=300), specs))
    for spec, out in zip(specs, outputs, strict=True):
        audio, durations = cpu_tts.backend.forward(
            spec.input_ids, spec.ref_s, spec.speed, deterministic=spec.deterministic, seed=spec.seed
        )
        np.testing.assert_array_equal(out.audio, audio)
        np.testing.assert_array_equal(out.durations, durations)


def test_default_batch_size_follows_the_device():
    class Cpu(RecordingBackend):
        device = "cpu"

    with ChunkScheduler(Cpu()) as cpu, ChunkScheduler(RecordingBackend()) as gpu:
        assert cpu.max_batch == 1 and gpu.max_batch == 16
    with pytest.raises(ValueError):
        ChunkScheduler(RecordingBackend(), max_batch=0)


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "seeded"])
def test_cuda_concurrent_submitters_equal_one_by_one(tmp_path_factory, deterministic):
    """The CUDA engine: 48 chunks of mixed lengths, voices and speeds from 8 threads, batched
    (up to 16 a batch), each equal to its own one-by-one ``forward``."""
    from kokoro_gpu.backends import cuda_state

    state = cuda_state()
    if not state.usable:
        pytest.skip(f"CUDA unavailable: {state.reason}")
    from kokoro_gpu.random_weights import write_model_dir

    path = write_model_dir(tmp_path_factory.mktemp("model"), seed=5, voices=["af_heart", "am_adam"])
    tts = KokoroTTS.from_pretrained(path, device="cuda")
    rng = np.random.default_rng(0)
    phoneme_set = [c for c in tts.config.vocab if c.isalpha()]
    specs = []
    for k in range(48):
        phonemes = "".join(rng.choice(phoneme_set, int(rng.integers(5, 200))))
        ids = phonemes_to_ids(phonemes, tts.config.vocab, tts.config.max_phonemes)
        ref_s = style_for(tts.voices.load(("af_heart", "am_adam")[k % 2]), phonemes)
        specs.append(ChunkSpec(ids, ref_s, float(rng.choice([0.8, 1.0, 1.25])), 100 + k, deterministic))
    with ChunkScheduler(tts.backend, max_batch=16, gather_s=0.01) as scheduler:

        def caller(part: int) -> list:
            futures = [scheduler.submit(s) for s in specs[part::8]]
            return [f.result(timeout=600) for f in futures]

        with ThreadPoolExecutor(8) as pool:
            parts = list(pool.map(caller, range(8)))
    outputs = {id(s): out for part in range(8) for s, out in zip(specs[part::8], parts[part], strict=True)}
    for spec in specs:
        audio, durations = tts.backend.forward(spec.input_ids, spec.ref_s, spec.speed,
                                               deterministic=deterministic, seed=spec.seed)
        np.testing.assert_array_equal(outputs[id(spec)].durations, durations)
        np.testing.assert_array_equal(outputs[id(spec)].audio, audio)


@pytest.mark.gpu
def test_cuda_cancelled_and_refused_chunks_leave_the_rest_exact(tmp_path_factory):
    """The CUDA engine's lanes: a full queue refuses a submission whole; chunks cancelled before they
    start never run (their futures say so) and every other chunk equals its one-by-one ``forward``."""
    from kokoro_gpu.backends import cuda_state

    state = cuda_state()
    if not state.usable:
        pytest.skip(f"CUDA unavailable: {state.reason}")
    from kokoro_gpu.random_weights import write_model_dir

    path = write_model_dir(tmp_path_factory.mktemp("model"), seed=6, voices=["af_heart"])
    tts = KokoroTTS.from_pretrained(path, device="cuda", precision="fast")
    assert tts.backend.lanes >= 2
    rng = np.random.default_rng(1)
    phoneme_set = [c for c in tts.config.vocab if c.isalpha()]
    pack = tts.voices.load("af_heart")
    specs = []
    for k in range(40):
        phonemes = "".join(rng.choice(phoneme_set, int(rng.integers(20, 200))))
        ids = phonemes_to_ids(phonemes, tts.config.vocab, tts.config.max_phonemes)
        specs.append(ChunkSpec(ids, style_for(pack, phonemes), 1.0, 300 + k, priority=float(k)))
    with ChunkScheduler(tts.backend, max_queue=40, gather_s=0) as scheduler:
        with pytest.raises(QueueFullError):
            scheduler.submit_many(specs + specs[:1])
        futures = scheduler.submit_many(specs)
        cancelled = [k for k in range(39, 19, -1) if futures[k].cancel()]
        outputs = {k: f.result(timeout=300) for k, f in enumerate(futures) if k not in cancelled}
    assert cancelled, "every chunk had started before any could be cancelled"
    for k in cancelled:
        with pytest.raises(CancelledError):
            futures[k].result()
    for k, out in outputs.items():
        spec = specs[k]
        audio, durations = tts.backend.forward(spec.input_ids, spec.ref_s, spec.speed,
                                               deterministic=False, seed=spec.seed)
        np.testing.assert_array_equal(out.durations, durations)
        np.testing.assert_array_equal(out.audio, audio)


class HoldAfterFirstItem(LaneBackend):
    """Holds a call after its first item's result is handed on, until `release` is set; or fails there."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.first_out = threading.Event()
        self.release = threading.Event()
        self.fail = fail

    def after_item(self, lane: int, index: int) -> None:
        if index == 0:
            self.first_out.set()
            assert self.release.wait(10)
            if self.fail:
                raise RuntimeError("the lane failed after its first chunk")


def test_each_chunk_resolves_as_its_own_result_lands():
    """A call's first chunk resolves while the lane still runs the rest of the call (one call of
    four: one worker, submitted together), with its own result; the others follow."""
    backend = HoldAfterFirstItem()
    with ChunkScheduler(backend, lanes=1, max_batch=8, gather_s=0.05) as scheduler:
        futures = scheduler.submit_many([_spec(k + 1, seed=k) for k in range(4)])
        assert backend.first_out.wait(10)
        done = [f.done() for f in futures]
        backend.release.set()
        outputs = [f.result(timeout=10) for f in futures]
    assert backend.taken == [4]
    assert done.count(True) == 1, "exactly the first chunk taken has resolved while the lane is held"
    first = done.index(True)
    for k, out in enumerate(outputs):
        spec = _spec(k + 1, seed=k)
        want, _ = backend.forward(spec.input_ids, spec.ref_s, spec.speed, deterministic=False, seed=k)
        np.testing.assert_array_equal(out.audio, want)
    # Of one submission the longest is taken first ([0, tag, tag % 7 + 1, 0] are all 4 tokens: order).
    assert first == 0


def test_a_call_failing_midway_keeps_the_results_already_handed_on():
    backend = HoldAfterFirstItem(fail=True)
    with ChunkScheduler(backend, lanes=1, max_batch=8, gather_s=0.05) as scheduler:
        futures = scheduler.submit_many([_spec(k + 1, seed=k) for k in range(3)])
        assert backend.first_out.wait(10)
        backend.release.set()
        assert futures[0].result(timeout=10).audio.size
        for f in futures[1:]:
            with pytest.raises(RuntimeError, match="after its first chunk"):
                f.result(timeout=10)


def _spec_of_length(tag: int, tokens: int) -> ChunkSpec:
    ids = np.zeros(tokens, dtype=np.int64)
    ids[1:-1] = tag
    return ChunkSpec(ids, np.full(256, tag / 100, dtype=np.float32))


def test_a_short_chunk_is_not_queued_behind_a_long_one_that_came_just_before():
    """Equal priorities go by deadline (arrival plus a multiple of the idle latency its length
    predicts): a 5-token chunk submitted right after a 500-token one starts first; chunks of one
    submission go longest first."""
    backend = LaneBackend()
    backend.lane_gates[0].clear()
    with ChunkScheduler(backend, lanes=1, max_batch=1, gather_s=0) as scheduler:
        blocker = scheduler.submit(_spec(1))
        assert backend.lane_started[0].wait(10)
        long_chunk = scheduler.submit(_spec_of_length(2, 500))
        short_chunk = scheduler.submit(_spec_of_length(3, 5))
        together = scheduler.submit_many([_spec_of_length(4, 5), _spec_of_length(5, 300)])
        backend.lane_gates[0].set()
        for f in [blocker, long_chunk, short_chunk, *together]:
            f.result(timeout=10)
    order = [tags[0] for _, tags in backend.calls]
    assert order[0] == 1
    assert order.index(3) < order.index(2), "the short chunk went behind the long one"
    assert order.index(5) < order.index(4), "one submission's chunks go longest first"
