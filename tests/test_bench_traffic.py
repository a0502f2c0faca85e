"""scripts/bench_traffic.py on the CPU: its corpus, its piece selection, its arrival loop and a --quick run.

Also the path its batch form measures: ``KokoroTTS.synthesize_batch`` through the model's
scheduler equals one-by-one synthesis, and ``close()`` / the context manager stop the scheduler.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from script_modules import load_script

from kokoro_gpu import KokoroTTS
from kokoro_gpu.backends import Backend
from kokoro_gpu.config import ModelConfig
from kokoro_gpu.scheduler import ChunkScheduler, ChunkSpec
from kokoro_gpu.tokens import phonemes_to_ids
from kokoro_gpu.voices import VoiceStore

bench_traffic = load_script("bench_traffic")
HI = "h\u02c8I."
THERE = "\u00f0\u02c8\u025b\u0279"
HI_THERE = f"h\u02c8I {THERE}."
PHONEMES_FILE = bench_traffic.PHONEMES


def test_committed_phonemes_cover_the_corpus() -> None:
    """One chunk per corpus line (each fits a chunk), every one of the model's vocabulary, lengths mixed."""
    chunks = bench_traffic.load_phonemes(PHONEMES_FILE)
    lines = [line for line in bench_traffic.CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(chunks) == len(lines)
    vocab = ModelConfig.load().vocab
    for chunk in chunks:
        assert len(phonemes_to_ids(chunk, vocab, 510)) == len(chunk) + 2  # no character dropped
    lengths = [len(c) for c in chunks]
    assert min(lengths) < 20 and max(lengths) > 200


def test_committed_phonemes_match_the_front_end() -> None:
    """The file is what the front end gives for the corpus today (rewrite with --write-phonemes)."""
    pytest.importorskip("misaki")
    text = bench_traffic.CORPUS.read_text(encoding="utf-8")
    assert bench_traffic.phonemize_corpus(text) == bench_traffic.load_phonemes(PHONEMES_FILE)


def test_word_prefixes_and_distinct_lengths() -> None:
    pieces = bench_traffic.word_prefixes(["ab cd, ef gh.", "ij kl"])
    assert pieces == ["ab.", "ab cd,", "ab cd, ef.", "ij."]
    used = {len("ab.") + 2}
    picked = bench_traffic.pick_distinct_lengths(pieces, used, 3, np.random.default_rng(0))
    # "ij." has the used length: it comes last, after the two pieces of new lengths.
    assert sorted(picked[:2]) == ["ab cd,", "ab cd, ef."] and picked[2] in ("ab.", "ij.")
    assert len(bench_traffic.pick_distinct_lengths(pieces, set(), 10, np.random.default_rng(0))) == 4


def test_idle_latency_fit_is_a_line_through_the_points() -> None:
    rows = [bench_traffic.Latency(10, s, 0.0, 2.0 + 3.0 * s) for s in (1.0, 2.0, 4.0)]
    intercept, slope = bench_traffic.idle_latency_fit(rows)
    assert intercept == pytest.approx(2.0) and slope == pytest.approx(3.0)
    assert bench_traffic.idle_latency_fit(rows[:1]) == (5.0, 0.0)


@pytest.fixture(scope="module")
def tts(demo_model_dir: Path) -> KokoroTTS:
    with KokoroTTS.from_pretrained(demo_model_dir, device="cpu") as model:
        yield model


def test_arrivals_record_every_chunk(tts: KokoroTTS) -> None:
    """Open loop: each chunk is submitted at its due time and its result recorded, none lost."""
    inputs = bench_traffic.Inputs(tts, "af_heart", tts.voices.load("af_heart"))
    specs = [inputs.spec(p, deterministic=True) for p in (HI, HI_THERE)]
    with ChunkScheduler(tts.backend) as scheduler:
        arrivals, wall = bench_traffic.run_arrivals(scheduler, specs, [0.0, 0.05])
    assert [a.error for a in arrivals] == ["", ""]
    assert arrivals[1].due == pytest.approx(0.05)
    for arrival, spec in zip(arrivals, specs, strict=True):
        audio, _ = tts.backend.forward(spec.input_ids, spec.ref_s, 1.0, deterministic=True, seed=None)
        assert arrival.audio_s == pytest.approx(len(audio) / 24000)
        assert arrival.due < arrival.done <= wall


def test_synthesize_batch_through_the_scheduler_equals_one_by_one(demo_model_dir: Path) -> None:
    inputs = [HI, {"phonemes": THERE, "voice": "am_adam", "speed": 1.3}]
    with KokoroTTS.from_pretrained(demo_model_dir, device="cpu") as model:
        batch = model.synthesize_batch(inputs, voice="af_heart", seed=7)
        scheduler = model.scheduler
        assert not scheduler.closed
        singles = [
            model.synthesize(phonemes=HI, voice="af_heart", seed=7),
            model.synthesize(phonemes=THERE, voice="am_adam", speed=1.3, seed=8),
        ]
    assert scheduler.closed
    for got, want in zip(batch, singles, strict=True):
        np.testing.assert_array_equal(got.audio, want.audio)
        np.testing.assert_array_equal(got.durations, want.durations)
    # Used after close(): a new scheduler starts.
    again = model.synthesize_batch([HI], voice="af_heart", seed=7)
    np.testing.assert_array_equal(again[0].audio, batch[0].audio)
    assert model.scheduler is not scheduler
    model.close()


class HeldBackend(Backend):
    """Audio = a function of the ids; four lanes, as on the engine; records each call's size in the
    order the calls are made; every call is held until `gate` is set."""

    device = "cuda"  # KokoroTTS's scheduler batches as on the engine
    precision = "fp32"
    lanes = 4

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.gate = threading.Event()
        self.started = threading.Event()
        self.lock = threading.Lock()

    def forward(self, input_ids, ref_s, speed, *, deterministic, seed, trace=None):
        return np.full(10 * len(input_ids), float(input_ids.sum()), dtype=np.float32), np.ones(
            len(input_ids), dtype=np.int64
        )

    def forward_on_lane(self, lane, items, *, deterministic, on_result=None):
        with self.lock:
            self.batches.append(len(items))
        self.started.set()
        self.gate.wait()
        return super().forward_on_lane(lane, items, deterministic=deterministic, on_result=on_result)


def test_synthesize_batch_spreads_its_chunks_over_the_lanes(demo_model_dir: Path) -> None:
    """On CUDA a call's chunks are queued together: the free lanes take full shares (16) at once,
    the shares shrink as the queue drains, and every chunk runs once, its result in its place."""
    backend = HeldBackend()
    model = KokoroTTS(ModelConfig.load(), backend, VoiceStore(demo_model_dir / "voices", None))
    with model:
        busy = model.scheduler.submit(ChunkSpec(np.array([0, 5, 0]), np.zeros(256, np.float32)))
        backend.started.wait(10)
        inputs = [HI * (1 + i % 5) for i in range(300)]
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(model.synthesize_batch, inputs, voice="af_heart", seed=1)
            # Every chunk in the scheduler: queued, or taken by the free lanes (held at the gate).
            deadline = time.monotonic() + 30
            while (
                model.scheduler.queue_depth + model.scheduler.running < 1 + len(inputs)
                and not call.done()
                and time.monotonic() < deadline
            ):
                time.sleep(0.01)
            backend.gate.set()
            results = call.result(30)
        busy.result(10)
    assert backend.batches[:4] == [1, 16, 16, 16]
    # The shares shrink to single chunks at the queue's tail (the order in which the lanes' threads
    # record their calls is not the order in which they took them: no assertion on the last one).
    assert max(backend.batches) == 16 and min(backend.batches[1:]) == 1
    assert sum(backend.batches) == 1 + len(inputs)
    for phonemes, result in zip(inputs, results, strict=True):
        assert len(result.audio) == 10 * (len(phonemes) + 2)


@pytest.mark.slow
def test_quick_run_end_to_end(demo_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "traffic.json"
    md = tmp_path / "traffic.md"
    argv = [
        "--model",
        str(demo_model_dir),
        "--device",
        "cpu",
        "--quick",
        "--phonemes-file",
        str(PHONEMES_FILE),
    ]
    assert bench_traffic.main([*argv, "--capacity", "7.5", "--json", str(out), "--md", str(md)]) == 0
    forms = {f["title"]: f for f in json.loads(out.read_text(encoding="utf-8"))["forms"]}
    batch = forms["(a) batch"]["figures"]
    assert batch["mixed_vs_fixed"] == pytest.approx(
        batch["mixed_audio_s_per_s"] / batch["fixed_audio_s_per_s"]
    )
    first_seen = forms["(b) first-seen, one by one"]["figures"]
    assert first_seen["distinct_token_counts"] == len(first_seen["latencies"]) == 3
    arrivals = forms["(c) open-loop Poisson arrivals through ChunkScheduler"]["figures"]
    levels = arrivals["levels"]
    assert [lv["load"] for lv in levels] == [0.25, 0.5, 0.9]
    # --capacity sets the offered rates: load x 7.5 audio-s/s in chunks of (a)'s mean audio length.
    assert arrivals["capacity"]["audio_s_per_s"] == 7.5
    chunk_s = batch["mixed_chunk_audio_s"]
    want = [lv["load"] * 7.5 / chunk_s for lv in levels]
    assert [lv["chunks_per_s"] for lv in levels] == pytest.approx(want)
    assert all(lv["errors"] == 0 and lv["p99_ms"] >= lv["p50_ms"] > 0 for lv in levels)
    assert [row[3] in ("PASS", "FAIL") for row in forms["summary"]["rows"]] == [True] * 4
    assert "## summary" in md.read_text(encoding="utf-8")
