"""The CUDA engine end to end: parity with the CPU backend, determinism, seeds, errors, backend_info;
precision="fast", CUDA-graph replays and batches.

Runs on full-size random weights (kokoro_gpu.random_weights, folded), shaped so
that the comparison means something: voiced F0 (100..250 Hz) and durations
that vary per token; the phase-input channels of the generator's noise
convolutions are zeroed, since STFT phases of near-silent bins are rounding
noise in any float32 implementation and would dominate the audio difference.
Fast mode (TF32 GEMMs past the durations) must give durations identical to
fp32 and audio within 3e-2 of the CPU float32 reference. The first call of a
shape runs uncaptured, the second captures a graph, later ones replay it: all
bit-identical in deterministic mode, and a replay takes its call's seed.
forward_batch and KokoroTTS.synthesize_batch equal one-by-one synthesis.
Skipped as a whole when no usable GPU (or no native engine) is present; the
CPU-side parts of backend_info (and of precision) are covered in test_backends.py.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from kokoro_gpu import backend_info
from kokoro_gpu.api import KokoroTTS
from kokoro_gpu.backends import CPUBackend, CUDABackend, create_backend, cuda_state
from kokoro_gpu.checkpoint import fold_official
from kokoro_gpu.config import MAX_FRAMES, SAMPLES_PER_FRAME, ModelConfig
from kokoro_gpu.errors import BackendError, CheckpointError, InputError
from kokoro_gpu.random_weights import random_checkpoint, random_voice_pack
from kokoro_gpu.voices import VoiceStore

_CUDA = cuda_state()
# Skipped without a usable GPU by tests/conftest.py's gpu marker (one line for all of them).
pytestmark = pytest.mark.gpu

# Intermediates up to the decoder: float32 on both sides, same operation order
# up to summation order, so normwise relative error within 1e-4.
TIGHT_KEYS = (
    "bert",
    "d_en",
    "d",
    "dur_lstm",
    "dur_float",
    "en",
    "shared_lstm",
    "F0",
    "N",
    "t_en",
    "asr",
    "dec_out",
)
# Loose bounds past the decoder: the sine source integrates F0 over the whole
# utterance, so the ~1e-6 relative F0 difference becomes ~1e-3 rad of phase
# per second (times the harmonic number); conv_post and the audio inherit it.
LOOSE_TOL = {"har_source": 1e-2, "gen_post": 1e-2, "audio": 2e-2}
N_BINS = 11  # n_fft / 2 + 1: the magnitude half of the source STFT
FAST_AUDIO_TOL = 3e-2


def full_size_weights(config: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random folded weights of the real model's shapes, phase inputs zeroed (see the module docstring)."""
    return fold_official(random_checkpoint(config, seed, zero_phase_inputs=True), config)


def random_inputs(config: ModelConfig, n_phonemes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = np.concatenate([[0], rng.integers(1, config.n_token, n_phonemes), [0]]).astype(np.int64)
    ref_s = random_voice_pack(seed)[n_phonemes - 1, 0]
    return ids, ref_s


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want|."""
    want64 = np.asarray(want, dtype=np.float64)
    return float(
        np.max(np.abs(np.asarray(got, dtype=np.float64) - want64)) / max(np.max(np.abs(want64)), 1e-30)
    )


@pytest.fixture(scope="module")
def config() -> ModelConfig:
    return ModelConfig.load()


@pytest.fixture(scope="module")
def weights(config: ModelConfig) -> dict[str, np.ndarray]:
    return full_size_weights(config)


@pytest.fixture(scope="module")
def gpu(config: ModelConfig, weights: dict[str, np.ndarray]) -> CUDABackend:
    backend = create_backend("cuda", config, weights)
    assert isinstance(backend, CUDABackend)
    return backend


@dataclass(frozen=True)
class CpuRun:
    """One input and the CPU float32 reference's forward of it (audio, durations, trace)."""

    ids: np.ndarray
    ref_s: np.ndarray
    audio: np.ndarray
    durations: np.ndarray
    trace: dict[str, np.ndarray]


@pytest.fixture(scope="module")
def cpu_reference(config: ModelConfig, weights: dict[str, np.ndarray]) -> CpuRun:
    """The 48-phoneme input (seed 3) that the parity tests of both precisions compare on, run once
    on the CPU backend."""
    ids, ref_s = random_inputs(config, 48, seed=3)
    trace: dict[str, np.ndarray] = {}
    audio, durations = CPUBackend(config, weights).forward(
        ids, ref_s, 1.0, deterministic=True, seed=None, trace=trace
    )
    return CpuRun(ids, ref_s, audio, durations, trace)


def test_end_to_end_matches_cpu(gpu: CUDABackend, cpu_reference: CpuRun) -> None:
    ids, ref_s = cpu_reference.ids, cpu_reference.ref_s
    cpu_trace, cpu_audio, cpu_dur = cpu_reference.trace, cpu_reference.audio, cpu_reference.durations
    gpu_trace: dict[str, np.ndarray] = {}
    audio, dur = gpu.forward(ids, ref_s, 1.0, deterministic=True, seed=None, trace=gpu_trace)

    np.testing.assert_array_equal(dur, cpu_dur)
    assert len(set(dur.tolist())) > 1, "test weights should give durations that vary"
    assert 100 < np.median(cpu_trace["F0"]) < 250, "test weights should give a voiced F0"
    assert audio.dtype == np.float32 and audio.shape == (SAMPLES_PER_FRAME * int(dur.sum()),)
    assert set(gpu_trace) == set(cpu_trace)
    np.testing.assert_array_equal(gpu_trace["pred_dur"], cpu_trace["pred_dur"])

    errors: dict[str, float] = {}
    for key in (*TIGHT_KEYS, *LOOSE_TOL):
        assert gpu_trace[key].shape == cpu_trace[key].shape, key
        errors[key] = rel_error(gpu_trace[key], cpu_trace[key])
    assert rel_error(audio, cpu_audio) == errors["audio"]
    # Source STFT: magnitudes everywhere; phases only where the magnitude is
    # well above zero (elsewhere the angle is rounding noise).
    har_gpu, har_cpu = gpu_trace["har"], cpu_trace["har"]
    errors["har magnitude"] = rel_error(har_gpu[:N_BINS], har_cpu[:N_BINS])
    strong = har_cpu[:N_BINS] > 1e-2 * har_cpu[:N_BINS].max()
    phase_diff = np.angle(np.exp(1j * (har_gpu[N_BINS:][strong] - har_cpu[N_BINS:][strong])))
    errors["har phase (rad)"] = float(np.max(np.abs(phase_diff)))
    print("\nCUDA vs CPU, max |gpu - cpu| / max |cpu|:")
    for key, err in errors.items():
        print(f"  {key:16s} {err:.3e}")

    for key in TIGHT_KEYS:
        assert errors[key] < 1e-4, (key, errors[key])
    for key, tol in LOOSE_TOL.items():
        assert errors[key] < tol, (key, errors[key])
    assert errors["har magnitude"] < 1e-3
    assert errors["har phase (rad)"] < 1e-2


def test_deterministic_is_bit_exact_and_workspace_reuse_is_clean(
    config: ModelConfig, gpu: CUDABackend
) -> None:
    short_ids, ref_s = random_inputs(config, 20, seed=2)
    long_ids, _ = random_inputs(config, 510, seed=3)
    first, dur = gpu.forward(short_ids, ref_s, 1.0, deterministic=True, seed=None)
    long_audio, long_dur = gpu.forward(long_ids, ref_s, 1.0, deterministic=True, seed=None)  # grows buffers
    again, dur_again = gpu.forward(short_ids, ref_s, 1.0, deterministic=True, seed=None)
    assert first.tobytes() == again.tobytes()
    np.testing.assert_array_equal(dur, dur_again)
    assert np.all(np.isfinite(long_audio)) and long_audio.size == SAMPLES_PER_FRAME * long_dur.sum()
    # Deterministic mode ignores the seed.
    seeded, _ = gpu.forward(short_ids, ref_s, 1.0, deterministic=True, seed=99)
    assert seeded.tobytes() == first.tobytes()


def test_audio_arrays_keep_their_samples(config: ModelConfig, gpu: CUDABackend) -> None:
    """Each result's audio owns its page-locked block (the engine copies the audio straight
    into it): later calls never write into a block whose array is alive, and a block comes
    back for reuse once its array is gone."""
    ids, ref_s = random_inputs(config, 25, seed=8)
    other_ids, other_ref_s = random_inputs(config, 25, seed=9)
    first, _ = gpu.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    kept = first.copy()
    others = [gpu.forward(other_ids, other_ref_s, 1.0, deterministic=True, seed=None)[0] for _ in range(3)]
    assert np.array_equal(first, kept)
    assert all(not np.array_equal(o[: kept.size], kept[: o.size]) for o in others)
    del first, others
    again, _ = gpu.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    assert again.tobytes() == kept.tobytes()


def test_audio_past_the_page_locked_bound(config: ModelConfig, gpu: CUDABackend) -> None:
    """Results that stay alive beyond the pool's 256 MB of page-locked blocks get ordinary
    memory (so that user arrays never pin unbounded host memory): the same samples either way."""
    ids, ref_s = random_inputs(config, 500, seed=10)
    first, _ = gpu.forward(ids, ref_s, 0.5, deterministic=True, seed=None)
    held = [first]
    while sum(a.nbytes for a in held) <= 300 * 2**20:
        held.append(gpu.forward(ids, ref_s, 0.5, deterministic=True, seed=None)[0])
    assert all(a.tobytes() == first.tobytes() for a in held[1:])


def test_seeded_stochastic_mode_repeats(config: ModelConfig, gpu: CUDABackend) -> None:
    ids, ref_s = random_inputs(config, 30, seed=4)
    a, _ = gpu.forward(ids, ref_s, 1.0, deterministic=False, seed=1234)
    b, _ = gpu.forward(ids, ref_s, 1.0, deterministic=False, seed=1234)
    c, _ = gpu.forward(ids, ref_s, 1.0, deterministic=False, seed=1235)
    fresh1, _ = gpu.forward(ids, ref_s, 1.0, deterministic=False, seed=None)
    fresh2, _ = gpu.forward(ids, ref_s, 1.0, deterministic=False, seed=None)
    det, _ = gpu.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()
    assert fresh1.tobytes() != fresh2.tobytes()
    assert a.tobytes() != det.tobytes()


def test_speed_scales_durations(config: ModelConfig, gpu: CUDABackend) -> None:
    ids, ref_s = random_inputs(config, 40, seed=5)
    _, normal = gpu.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    _, fast = gpu.forward(ids, ref_s, 2.0, deterministic=True, seed=None)
    assert fast.sum() < normal.sum()


def test_bad_inputs_raise_input_error(config: ModelConfig, gpu: CUDABackend) -> None:
    ids, ref_s = random_inputs(config, 10, seed=6)
    with pytest.raises(InputError, match="token ids"):
        gpu.forward(np.array([0, config.n_token, 0]), ref_s, 1.0, deterministic=True, seed=None)
    with pytest.raises(InputError, match="token ids"):
        gpu.forward(
            np.zeros(config.context_length + 1, dtype=np.int64), ref_s, 1.0, deterministic=True, seed=None
        )
    with pytest.raises(InputError, match="ref_s"):
        gpu.forward(ids, ref_s[:100], 1.0, deterministic=True, seed=None)
    with pytest.raises(InputError, match="speed"):
        gpu.forward(ids, ref_s, 0.0, deterministic=True, seed=None)
    with pytest.raises(InputError, match="device"):
        create_backend("gpu", config, {})


def test_frame_bound_is_an_input_error(config: ModelConfig, gpu: CUDABackend, fast: CUDABackend) -> None:
    """A speed far below the API's bound asks for more than MAX_FRAMES frames: refused after the read-back."""
    ids, ref_s = random_inputs(config, 20, seed=7)
    for backend in (gpu, fast):
        for speed in (1e-3, 1e-40):
            with pytest.raises(InputError, match=f"over {MAX_FRAMES} frames") as info:
                backend.forward(ids, ref_s, speed, deterministic=True, seed=None)
            assert "\n" not in str(info.value)
        with pytest.raises(InputError, match=f"over {MAX_FRAMES} frames"):
            backend.forward_batch([(ids, ref_s, 1.0, 0), (ids, ref_s, 1e-3, 1)], deterministic=True)
        audio, _ = backend.forward(ids, ref_s, 1.0, deterministic=True, seed=None)  # the engine still works
        assert np.isfinite(audio).all() and audio.size > 0


def test_missing_weight_is_a_checkpoint_error(config: ModelConfig, weights: dict[str, np.ndarray]) -> None:
    partial = {k: v for k, v in weights.items() if k != "decoder.generator.conv_post.weight"}
    with pytest.raises(CheckpointError, match="conv_post"):
        CUDABackend(config, partial).forward(
            *random_inputs(config, 5, seed=7), 1.0, deterministic=True, seed=None
        )


@pytest.mark.parametrize("precision", ["fp32", "fast"])
def test_weights_are_checked_when_the_engine_is_built(
    config: ModelConfig, weights: dict[str, np.ndarray], precision: str
) -> None:
    # The model's layers resolve their weights once, as the engine is built: a weight that only the
    # generator reads, missing, or one of the wrong size fails there, before any input is given.
    missing = {k: v for k, v in weights.items() if k != "decoder.generator.resblocks.0.alpha1.0"}
    with pytest.raises(CheckpointError, match=r"resblocks\.0\.alpha1\.0"):
        CUDABackend(config, missing, precision)
    misshapen = dict(weights)
    misshapen["text_encoder.cnn.0.1.gamma"] = weights["text_encoder.cnn.0.1.gamma"][:-1]
    with pytest.raises(CheckpointError, match=r"cnn\.0\.1\.gamma.* holds"):
        CUDABackend(config, misshapen, precision)


def test_cuda_unavailable_is_a_backend_error(
    config: ModelConfig, weights: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kokoro_gpu.backends as backends

    monkeypatch.setattr(backends, "load_native", lambda: (None, "native engine not built"))
    with pytest.raises(BackendError, match="native engine not built"):
        create_backend("cuda", config, weights)


def test_backend_info_on_a_gpu_machine() -> None:
    info = backend_info()
    assert info["native_built"] and info["native_loaded"] and info["cuda_available"]
    assert info["reason"] is None
    assert isinstance(info["cuda_architectures"], str) and info["cuda_architectures"]
    assert info["devices"], "at least one device"
    dev = info["devices"][info["device_index"]]
    assert isinstance(dev["name"], str) and dev["name"]
    major, minor = (int(p) for p in dev["compute_capability"].split("."))
    assert (major, minor) >= (8, 0)
    assert dev["total_memory_bytes"] > 2**30
    for key in ("driver_version", "runtime_version"):
        assert isinstance(info[key], str) and "." in info[key]


# ------------------------------------------------- fast precision, graphs, batches


@pytest.fixture(scope="module")
def fast(config: ModelConfig, weights: dict[str, np.ndarray]) -> CUDABackend:
    backend = create_backend("cuda", config, weights, "fast")
    assert isinstance(backend, CUDABackend) and backend.precision == "fast"
    return backend


@pytest.mark.parametrize(("n_phonemes", "seed"), [(12, 10), (64, 11), (200, 12), (480, 13)])
def test_fast_durations_equal_fp32(
    config: ModelConfig, gpu: CUDABackend, fast: CUDABackend, n_phonemes: int, seed: int
) -> None:
    ids, ref_s = random_inputs(config, n_phonemes, seed)
    for speed in (0.8, 1.0, 1.3):
        _, want = gpu.forward(ids, ref_s, speed, deterministic=True, seed=None)
        _, got = fast.forward(ids, ref_s, speed, deterministic=True, seed=None)
        np.testing.assert_array_equal(got, want)


def test_fast_audio_close_to_cpu_reference(
    gpu: CUDABackend, fast: CUDABackend, cpu_reference: CpuRun
) -> None:
    ids, ref_s = cpu_reference.ids, cpu_reference.ref_s
    audio, dur = fast.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    fp32_audio, _ = gpu.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    np.testing.assert_array_equal(dur, cpu_reference.durations)
    err_fast = rel_error(audio, cpu_reference.audio)
    err_fp32 = rel_error(fp32_audio, cpu_reference.audio)
    print(f"\naudio vs CPU fp32, max|d|/max|ref|: fast {err_fast:.3e}, fp32 {err_fp32:.3e}")
    assert err_fast < FAST_AUDIO_TOL
    assert audio.tobytes() != fp32_audio.tobytes(), "fast mode should use other GEMMs"


def test_fast_f0_stays_float32_level(fast: CUDABackend, cpu_reference: CpuRun) -> None:
    """Fast precision keeps the F0 stack on split operands (F0 feeds the source's phase) and runs
    the N stack, which feeds only the decoder, on rounded FP16 operands like the decoder's."""
    cpu_trace = cpu_reference.trace
    fast_trace: dict[str, np.ndarray] = {}
    fast.forward(cpu_reference.ids, cpu_reference.ref_s, 1.0, deterministic=True, seed=None, trace=fast_trace)
    err_f0, err_n = rel_error(fast_trace["F0"], cpu_trace["F0"]), rel_error(fast_trace["N"], cpu_trace["N"])
    print(f"\nfast vs CPU fp32, max|d|/max|ref|: F0 {err_f0:.3e}, N {err_n:.3e}")
    assert err_f0 < 1e-5
    assert err_n < 1e-2


def test_fast_short_utterance_concurrent_resblocks(
    config: ModelConfig, weights: dict[str, np.ndarray], fast: CUDABackend
) -> None:
    """Short utterances run each generator stage's residual blocks on three streams (generator.cu:
    the last stage at every length, stage 0 up to ~490 frames), each block into an FP16 output of
    its own that the next stage's reader sums in block order: close to the CPU reference, and the
    same bits uncaptured, captured, replayed and traced."""
    ids, ref_s = random_inputs(config, 16, seed=31)
    cpu_audio, cpu_dur = CPUBackend(config, weights).forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    runs = [fast.forward(ids, ref_s, 1.0, deterministic=True, seed=None) for _ in range(3)]
    assert 0 < int(cpu_dur.sum()) <= 490, "the case should take the concurrent path at both stages"
    for audio, dur in runs:
        np.testing.assert_array_equal(dur, cpu_dur)
        assert audio.tobytes() == runs[0][0].tobytes()
    traced, _ = fast.forward(ids, ref_s, 1.0, deterministic=True, seed=None, trace={})
    assert traced.tobytes() == runs[0][0].tobytes()
    assert rel_error(runs[0][0], cpu_audio) < FAST_AUDIO_TOL


@pytest.mark.parametrize("precision", ["fp32", "fast"])
def test_graph_replay_is_bit_identical(
    config: ModelConfig, weights: dict[str, np.ndarray], precision: str
) -> None:
    backend = create_backend("cuda", config, weights, precision)
    ids, ref_s = random_inputs(config, 37, seed=21)
    # First sight (uncaptured), capture, replay, replay after another shape; each forward's two
    # phases (tokens, frames) counted in phase_runs as they ran.
    runs, counts = [], [backend.phase_runs()]
    for _ in range(3):
        runs.append(backend.forward(ids, ref_s, 1.0, deterministic=True, seed=None))
        counts.append(backend.phase_runs())
    steps = [{k: after[k] - before[k] for k in after} for before, after in itertools.pairwise(counts)]
    assert steps == [{"eager": 2, "captured": 0, "replayed": 0}, {"eager": 0, "captured": 2, "replayed": 0},
                     {"eager": 0, "captured": 0, "replayed": 2}]
    other_ids, _ = random_inputs(config, 90, seed=22)
    backend.forward(other_ids, ref_s, 1.0, deterministic=True, seed=None)
    runs.append(backend.forward(ids, ref_s, 1.0, deterministic=True, seed=None))
    for audio, dur in runs[1:]:
        assert audio.tobytes() == runs[0][0].tobytes()
        np.testing.assert_array_equal(dur, runs[0][1])
    # A trace forces the uncaptured path: the replay equals it.
    traced, _ = backend.forward(ids, ref_s, 1.0, deterministic=True, seed=None, trace={})
    assert traced.tobytes() == runs[0][0].tobytes()

    # Stochastic: replays take each call's seed.
    for _ in range(2):  # first sight, capture
        backend.forward(ids, ref_s, 1.0, deterministic=False, seed=5)
    replay_a, _ = backend.forward(ids, ref_s, 1.0, deterministic=False, seed=6)
    replay_b, _ = backend.forward(ids, ref_s, 1.0, deterministic=False, seed=7)
    eager_a, _ = backend.forward(ids, ref_s, 1.0, deterministic=False, seed=6, trace={})
    assert replay_a.tobytes() == eager_a.tobytes()
    assert replay_a.tobytes() != replay_b.tobytes()


def test_phase_timing_marks_in_order_audio_unchanged(config: ModelConfig, fast: CUDABackend) -> None:
    engine = fast._engine
    ids, ref_s = random_inputs(config, 41, seed=23)
    want, _ = fast.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    engine.set_phase_timing(True)
    try:
        for _ in range(3):  # uncaptured, captured, replayed: the marks come from each
            audio, _ = fast.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
            assert audio.tobytes() == want.tobytes()
            marks = engine.phase_times()
            names = [name for name, _ in marks]
            times = [ms for _, ms in marks]
            assert marks[0] == ("start", 0.0)
            assert times == sorted(times) and times[-1] > 0.0
            assert names[-1] == "conv_post, iSTFT"  # the main stream waits for the side stream first
            for earlier, later in [
                ("style projections, ALBERT", "duration head"),
                ("duration head", "durations read back"),
                ("F0 || N stacks", "harmonic source, STFT (side stream)"),
                ("harmonic source, STFT (side stream)", "source branch 0 (side stream)"),
                ("source branch 0 (side stream)", "generator stage 0"),
                ("source branch 1 (side stream)", "generator stage 1"),
                ("decoder", "generator stage 0"),
            ]:
                assert names.index(earlier) < names.index(later), (earlier, later, marks)
    finally:
        engine.set_phase_timing(False)
    audio, _ = fast.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    assert audio.tobytes() == want.tobytes()


# A batch runs its utterances in groups (one per lane; each group's token phase on all of its
# tokens at once: ALBERT, bert_encoder and the LSTMs' recurrences side by side, up to four per
# launch): at eight lanes groups of two for the nine (the last of one), of three for the twenty,
# with short and long utterances mixed in a group (ALBERT's attention on both of its paths), and of
# six for the forty-eight (sequences of different lengths in one recurrence launch, a group's
# sequences over two launches).
BATCH_SIZES = [5, 140, 33, 300, 33, 77, 12, 210, 64]
GROUPED_BATCH_SIZES = [510, 498, 400, 3, 260, 1, 256, 257, 90, 510, 2, 45, 300, 7, 120, 33, 499, 64, 16, 200]
SHORT_BATCH_SIZES = [3 + (37 * i) % 90 for i in range(48)]


# fp32 ("gpu"): groups of one (cuBLAS ALBERT), the lanes' convs on split operands still walking
# their split reductions inside their blocks.
@pytest.mark.parametrize(
    "backend_name,sizes,deterministic",
    [
        ("fast", BATCH_SIZES, True),
        ("fast", BATCH_SIZES, False),
        ("fast", GROUPED_BATCH_SIZES, True),
        ("fast", SHORT_BATCH_SIZES, False),
        ("gpu", BATCH_SIZES, True),
    ],
    ids=[
        "nine-deterministic",
        "nine-random",
        "twenty-deterministic",
        "forty-eight-random",
        "fp32-nine-deterministic",
    ],
)
def test_forward_batch_equals_one_by_one(
    config: ModelConfig,
    request: pytest.FixtureRequest,
    backend_name: str,
    sizes: list[int],
    deterministic: bool,
) -> None:
    backend: CUDABackend = request.getfixturevalue(backend_name)
    items = []
    for i, n in enumerate(sizes):
        ids, ref_s = random_inputs(config, n, seed=100 + i)
        items.append((ids, ref_s, 1.0 + 0.05 * i, 1000 + i))
    # Twice: a group's token phase runs uncaptured on its lengths' first sight, then as a graph.
    batches = [backend.forward_batch(items, deterministic=deterministic) for _ in range(2)]
    for (ids, ref_s, speed, seed), *results in zip(items, *batches, strict=True):
        want_audio, want_dur = backend.forward(ids, ref_s, speed, deterministic=deterministic, seed=seed)
        for audio, dur in results:
            np.testing.assert_array_equal(dur, want_dur)
            assert audio.tobytes() == want_audio.tobytes()
    assert backend.forward_batch([], deterministic=True) == []


@pytest.mark.parametrize("backend_name", ["fast", "gpu"])
def test_forward_on_lane_hands_over_each_result(
    config: ModelConfig, request: pytest.FixtureRequest, backend_name: str
) -> None:
    """forward_on_lane hands each result to on_result once, in the call's order, as it lands (a
    group's utterances one by one; fp32: groups of one), the same arrays it then returns, each
    equal to forward() of its item; a callback's error is raised once the call is done, and the
    lane runs on."""
    backend: CUDABackend = request.getfixturevalue(backend_name)
    items = []
    for i, n in enumerate(GROUPED_BATCH_SIZES[:12]):
        ids, ref_s = random_inputs(config, n, seed=500 + i)
        items.append((ids, ref_s, 1.0, 0))
    handed: list[tuple[int, np.ndarray, np.ndarray]] = []
    returned = backend.forward_on_lane(
        1, items, deterministic=True, on_result=lambda i, audio, dur: handed.append((i, audio, dur))
    )
    assert [i for i, _, _ in handed] == list(range(len(items)))
    for (i, audio, dur), (ret_audio, ret_dur), (ids, ref_s, speed, seed) in zip(
        handed, returned, items, strict=True
    ):
        assert audio is ret_audio and dur is ret_dur
        want_audio, want_dur = backend.forward(ids, ref_s, speed, deterministic=True, seed=seed)
        np.testing.assert_array_equal(dur, want_dur)
        assert audio.tobytes() == want_audio.tobytes(), f"item {i}"

    def failing(i: int, audio: np.ndarray, dur: np.ndarray) -> None:
        if i == 2:
            raise ValueError("the caller's callback failed")

    with pytest.raises(ValueError, match="callback failed"):
        backend.forward_on_lane(1, items[:5], deterministic=True, on_result=failing)
    again = backend.forward_on_lane(1, items[:3], deterministic=True)
    assert [a.tobytes() for a, _ in again] == [a.tobytes() for a, _ in returned[:3]]


def test_batch_lanes_follow_device_memory(fast: CUDABackend) -> None:
    """A batch runs on one lane per 8 GiB of the GPU's memory, four to eight (each lane keeps a
    workspace of its own)."""
    device = next(d for d in _CUDA.devices if d["index"] == fast._engine.device)
    assert fast._engine.batch_lanes == min(8, max(4, device["total_memory_bytes"] // 2**33))


def test_forward_batch_past_the_pinned_bound(fast: CUDABackend, config: ModelConfig) -> None:
    """Results past the engine's page-locked bound (PinnedPool::kLiveBytes, 256 MB of audio alive at
    once) land in ordinary memory through each lane's staging block: every one the same bits as the
    one-by-one call's."""
    ids, ref_s = random_inputs(config, 400, seed=300)
    one, _ = fast.forward(ids, ref_s, 1.0, deterministic=True, seed=0)
    count = (300 << 20) // one.nbytes + 2
    batch = fast.forward_batch([(ids, ref_s, 1.0, 0)] * count, deterministic=True)
    assert sum(audio.nbytes for audio, _ in batch) > 256 << 20
    assert all(audio.tobytes() == one.tobytes() for audio, _ in batch)


def test_pinned_blocks_past_the_keep_bound_are_released(fast: CUDABackend, config: ModelConfig) -> None:
    """More page-locked audio comes back than the pool keeps free (256 MB): the largest blocks go to
    the pool's releasing thread (freeing page-locked memory waits for the device). Arrays alive
    meanwhile keep their samples; later results are exact."""
    ids, ref_s = random_inputs(config, 400, seed=301)
    one, _ = fast.forward(ids, ref_s, 1.0, deterministic=True, seed=0)
    longer, _ = fast.forward(ids, ref_s, 0.5, deterministic=True, seed=0)  # twice the frames
    assert longer.size > one.size, "the second shape needs blocks that the first one's do not fit"
    first = fast.forward_batch([(ids, ref_s, 1.0, 0)] * ((240 << 20) // one.nbytes), deterministic=True)
    del first  # ~240 MB free in the pool
    second = fast.forward_batch(
        [(ids, ref_s, 0.5, 0)] * ((100 << 20) // longer.nbytes), deterministic=True
    )
    kept = second[:3]
    del second  # ~100 MB more comes back: past the bound
    again = fast.forward_batch([(ids, ref_s, 1.0, 0)] * 8, deterministic=True)
    assert all(audio.tobytes() == one.tobytes() for audio, _ in again)
    assert all(audio.tobytes() == longer.tobytes() for audio, _ in kept)


def test_synthesize_batch_equals_synthesize(fast: CUDABackend, config: ModelConfig, tmp_path: Path) -> None:
    voices = tmp_path / "voices"
    voices.mkdir()
    np.save(voices / "af_test.npy", random_voice_pack(1))
    np.save(voices / "bf_test.npy", random_voice_pack(2))
    tts = KokoroTTS(config, fast, VoiceStore(voices, None))
    inputs = [
        "helo world",
        {"phonemes": "the kwik brawn foks", "voice": "bf_test", "speed": 1.2},
        {"phonemes": "jumps over the lazi dok " * 30, "seed": 77},  # several chunks
    ]
    results = tts.synthesize_batch(inputs, voice="af_test", seed=40)
    want = [
        tts.synthesize(phonemes="helo world", voice="af_test", seed=40),
        tts.synthesize(phonemes="the kwik brawn foks", voice="bf_test", speed=1.2, seed=41),
        tts.synthesize(phonemes="jumps over the lazi dok " * 30, voice="af_test", seed=77),
    ]
    for got, exp in zip(results, want, strict=True):
        assert got.audio.tobytes() == exp.audio.tobytes()
        np.testing.assert_array_equal(got.durations, exp.durations)
        assert got.phonemes == exp.phonemes
        assert [(w.word, w.start, w.end) for w in got.words] == [(w.word, w.start, w.end) for w in exp.words]
    with pytest.raises(InputError, match="phonemes"):
        tts.synthesize_batch([{"voice": "af_test"}])
    with pytest.raises(InputError, match="list"):
        tts.synthesize_batch("helo")  # type: ignore[arg-type]
