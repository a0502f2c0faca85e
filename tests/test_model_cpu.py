"""The NumPy CPU model end to end on full-size random folded weights."""

from __future__ import annotations

import numpy as np
import pytest

from kokoro_gpu.config import SAMPLES_PER_FRAME, ModelConfig
from kokoro_gpu.errors import CheckpointError, InputError
from kokoro_gpu.layout import folded_layout
from kokoro_gpu.model import KModelCPU

N_TOKENS = 10


def _random_folded(cfg: ModelConfig, seed: int) -> dict[str, np.ndarray]:
    """Folded weights at a scale that keeps activations O(1); F0 voiced (~150 Hz)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in folded_layout(cfg).items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("alpha"):
            a = rng.uniform(0.5, 1.5, shape)
        elif leaf == "gamma" or name.endswith("LayerNorm.weight") or name.endswith("layer_norm.weight"):
            a = 1 + 0.1 * rng.standard_normal(shape)
        elif leaf in ("bias", "beta") or leaf.startswith("bias_"):
            a = 0.05 * rng.standard_normal(shape)
        elif "embeddings" in name or name.endswith("embedding.weight"):
            a = 0.5 * rng.standard_normal(shape)
        else:
            fan_in = int(np.prod(shape[1:]))
            scale = 0.2 if "conv_post" in name or ".fc." in name else 1.0
            a = scale / np.sqrt(fan_in) * rng.standard_normal(shape)
        out[name] = a.astype(np.float32)
    out["predictor.F0_proj.bias"][:] = 150.0
    out["predictor.F0_proj.weight"] *= 10.0
    out["predictor.duration_proj.linear_layer.bias"][:] = -3.0
    return out


@pytest.fixture(scope="module")
def cfg() -> ModelConfig:
    return ModelConfig.load()


@pytest.fixture(scope="module")
def weights(cfg) -> dict[str, np.ndarray]:
    return _random_folded(cfg, seed=11)


@pytest.fixture(scope="module")
def model(cfg, weights) -> KModelCPU:
    return KModelCPU(cfg, weights)


@pytest.fixture(scope="module")
def inputs(cfg) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    ids = np.array([0, *rng.choice(sorted(set(cfg.vocab.values())), N_TOKENS), 0], dtype=np.int64)
    ref_s = (0.3 * rng.standard_normal(2 * cfg.style_dim)).astype(np.float32)
    return ids, ref_s


@pytest.fixture(scope="module")
def traced(model, inputs) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    trace: dict[str, np.ndarray] = {}
    audio, dur = model.forward_with_tokens(*inputs, 1.0, trace=trace)
    return audio, dur, trace


def test_output_length_and_durations(traced, inputs):
    audio, dur, _ = traced
    t_len = inputs[0].shape[0]
    assert dur.dtype == np.int64 and dur.shape == (t_len,)
    assert (dur >= 1).all()
    assert audio.dtype == np.float32
    assert audio.shape == (SAMPLES_PER_FRAME * int(dur.sum()),)
    assert np.isfinite(audio).all() and np.abs(audio).max() > 0


def test_trace_has_every_design_key_with_its_shape(traced, inputs, cfg):
    audio, dur, trace = traced
    t_len, n_frames = inputs[0].shape[0], int(dur.sum())
    hid, bert_hid = cfg.hidden_dim, int(cfg.plbert["hidden_size"])
    n_fft = int(cfg.istftnet["gen_istft_n_fft"])
    stft_frames = SAMPLES_PER_FRAME * n_frames // int(cfg.istftnet["gen_istft_hop_size"]) + 1
    expected = {
        "bert": (t_len, bert_hid),
        "d_en": (hid, t_len),
        "d": (t_len, hid + cfg.style_dim),
        "dur_lstm": (t_len, hid),
        "dur_float": (t_len,),
        "pred_dur": (t_len,),
        "en": (hid + cfg.style_dim, n_frames),
        "shared_lstm": (n_frames, hid),
        "F0": (2 * n_frames,),
        "N": (2 * n_frames,),
        "t_en": (hid, t_len),
        "asr": (hid, n_frames),
        "dec_out": (hid, 2 * n_frames),
        "har_source": (SAMPLES_PER_FRAME * n_frames,),
        "har": (n_fft + 2, stft_frames),
        "gen_post": (n_fft + 2, stft_frames),
        "audio": (SAMPLES_PER_FRAME * n_frames,),
    }
    assert set(trace) == set(expected)
    for key, shape in expected.items():
        assert trace[key].shape == shape, key
        assert np.isfinite(trace[key]).all(), key
    assert trace["pred_dur"].dtype == np.int64
    np.testing.assert_array_equal(trace["pred_dur"], dur)
    np.testing.assert_array_equal(trace["audio"], audio)
    np.testing.assert_array_equal(np.maximum(np.round(trace["dur_float"]), 1), dur)
    # The check weights put F0 in the voiced range, so the sine source is active.
    assert 100 < np.median(trace["F0"]) < 200


def test_alignment_repeats_each_token_for_its_duration(traced):
    _, dur, trace = traced
    frame = 0
    for token, n in enumerate(dur):
        for _ in range(n):
            np.testing.assert_array_equal(trace["en"][:, frame], trace["d"][token])
            np.testing.assert_array_equal(trace["asr"][:, frame], trace["t_en"][:, token])
            frame += 1
    assert frame == trace["en"].shape[1]


def test_deterministic_mode_is_repeatable(model, inputs, traced):
    audio, dur = model.forward_with_tokens(*inputs, 1.0)
    np.testing.assert_array_equal(audio, traced[0])
    np.testing.assert_array_equal(dur, traced[1])


def test_seeded_rng_repeatable_and_seeds_differ(model, inputs, traced):
    runs = []
    for seed in (5, 5, 6):
        trace: dict[str, np.ndarray] = {}
        audio, dur = model.forward_with_tokens(*inputs, 1.0, rng=np.random.default_rng(seed), trace=trace)
        np.testing.assert_array_equal(dur, traced[1])
        # Randomness enters only in the generator's source.
        np.testing.assert_array_equal(trace["dec_out"], traced[2]["dec_out"])
        runs.append((audio, trace["har_source"]))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert not np.array_equal(runs[0][0], runs[2][0])
    assert not np.array_equal(runs[0][1], traced[2]["har_source"])


def test_speed_divides_the_float_durations(model, inputs, traced):
    trace: dict[str, np.ndarray] = {}
    _, dur = model.forward_with_tokens(*inputs, 2.0, trace=trace)
    np.testing.assert_allclose(trace["dur_float"], traced[2]["dur_float"] / 2, rtol=1e-6)
    assert (dur >= 1).all()


def test_float64_model_agrees_with_float32(cfg, weights, inputs, traced):
    model64 = KModelCPU(cfg, weights, dtype=np.float64)
    trace: dict[str, np.ndarray] = {}
    audio, _ = model64.forward_with_tokens(*inputs, 1.0, trace=trace)
    assert audio.dtype == np.float32 and trace["dec_out"].dtype == np.float64
    np.testing.assert_allclose(trace["dur_float"], traced[2]["dur_float"], rtol=1e-5)
    for key in ("bert", "d", "F0", "t_en", "dec_out"):
        ref = trace[key]
        rel = np.linalg.norm(traced[2][key] - ref) / np.linalg.norm(ref)
        assert rel < 1e-4, key


@pytest.mark.parametrize(
    ("ids", "ref_len", "speed"),
    [
        ([], 256, 1.0),
        ([0, 178, 0], 256, 1.0),
        ([0, -1, 0], 256, 1.0),
        ([0, 5, 0], 255, 1.0),
        ([0, 5, 0], 256, 0.0),
        ([0, 5, 0], 256, float("nan")),
    ],
)
def test_invalid_inputs_raise(model, ids, ref_len, speed):
    with pytest.raises(InputError):
        model.forward_with_tokens(np.array(ids, dtype=np.int64), np.zeros(ref_len, np.float32), speed)


def test_missing_tensor_is_a_checkpoint_error(cfg, weights):
    partial = dict(weights)
    del partial["decoder.generator.conv_post.weight"]
    with pytest.raises(CheckpointError, match="conv_post"):
        KModelCPU(cfg, partial)


def test_branches_on_threads_match_one_thread(cfg, weights, inputs, traced, monkeypatch):
    """The worker-thread schedule (and split GEMMs) computes what one thread computes: the same
    durations, and every module up to the generator within float32 rounding. The generator is then
    compared on the threaded run's own inputs: its STFT phase channels are ill-conditioned (REFERENCE.md),
    so a rounding-level difference in F0, accumulated over the harmonic source's phase, can turn a
    near-silent bin's angle by 2 pi and the audio with it; on the same F0 the phases are the same."""
    from kokoro_gpu.ops import parallel

    monkeypatch.setattr(parallel, "worker_count", lambda: 1)
    monkeypatch.setattr("kokoro_gpu.ops.fast_conv.worker_count", lambda: 1)
    model = KModelCPU(cfg, weights)
    trace: dict[str, np.ndarray] = {}
    _, dur = model.forward_with_tokens(*inputs, 1.0, trace=trace)
    np.testing.assert_array_equal(dur, traced[1])
    for key in ("t_en", "F0", "N", "dec_out"):
        scale = np.abs(trace[key]).max()
        np.testing.assert_allclose(trace[key], traced[2][key], rtol=1e-5, atol=1e-5 * scale)
    s_dec = inputs[1][: cfg.style_dim]
    gen_trace: dict[str, np.ndarray] = {}
    generator = model.decoder.generator
    har = generator.excitation(traced[2]["F0"], trace=gen_trace)
    audio = generator(traced[2]["dec_out"], s_dec, har, trace=gen_trace)
    np.testing.assert_array_equal(gen_trace["har"], traced[2]["har"])
    scale = np.abs(gen_trace["gen_post"]).max()
    np.testing.assert_allclose(gen_trace["gen_post"], traced[2]["gen_post"], rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(audio, traced[0], rtol=1e-4, atol=1e-4 * np.abs(audio).max())
