"""CUDA elementwise ops (embeddings, activations, copies, durations, frame expansion, resampling,
padding) against the NumPy reference ops.

Every test draws fresh random inputs (tests/native_ops.py), runs the op on the GPU through the
test bindings kokoro_gpu._native.ops (outputs filled with NaN first, so an unwritten element
fails) and compares with the reference op in float64, normwise. Skipped without a GPU or a
native module built with its test bindings.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from native_ops import (
    POINTWISE_TOL,
    check,
    f32,
    f64,
    gpu,
)

from kokoro_gpu import ops as ref

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("t_len,dim", [(1, 1), (7, 128), (512, 512)])
def test_embeddings(rng: np.random.Generator, t_len: int, dim: int) -> None:
    ids = rng.integers(0, 178, t_len).astype(np.int32)
    word = f32(rng.standard_normal((178, dim)))
    pos, type0 = f32(rng.standard_normal((t_len, dim))), f32(rng.standard_normal(dim))
    np.testing.assert_array_equal(gpu.albert_embeddings(ids, word), word[ids])
    np.testing.assert_array_equal(gpu.albert_embeddings(ids, word, pos, type0), (word[ids] + type0) + pos)
    # Stacked utterances (a batch's token group): each token takes its position in its own utterance.
    cuts = [0, t_len // 3, t_len // 2, t_len]
    positions = np.concatenate([np.arange(n) for n in np.diff(cuts)]).astype(np.int32)
    np.testing.assert_array_equal(
        gpu.albert_embeddings(ids, word, pos, type0, positions), (word[ids] + type0) + pos[positions]
    )


@pytest.mark.parametrize("n", [1, 1000, 100003])
def test_gelu_new(rng: np.random.Generator, n: int) -> None:
    x = f32(rng.standard_normal(n) * 4)
    # Relative to max |x|: in float32, 1 + tanh(...) cancels for large negative x.
    check(f"gelu_new n={n}", gpu.gelu_new(x), ref.gelu_new(f64(x)), POINTWISE_TOL, float(np.max(np.abs(x))))


def test_gelu_new_bias(rng: np.random.Generator) -> None:
    """The linear layer's bias fused in: gelu_new(x + b) per row, the same float32 sum first."""
    x, b = f32(rng.standard_normal((7, 333)) * 3), f32(rng.standard_normal(333))
    want = ref.gelu_new(f64(x + b))
    check("gelu_new bias", gpu.gelu_new(x, b), want, POINTWISE_TOL, float(np.max(np.abs(x + b))))


@pytest.mark.parametrize("slope", [0.01, 0.1, 0.2])
@pytest.mark.parametrize("in_place", [False, True])
def test_leaky_relu(rng: np.random.Generator, slope: float, in_place: bool) -> None:
    x = f32(rng.standard_normal((13, 257)))
    np.testing.assert_array_equal(gpu.leaky_relu(x, slope, in_place), ref.leaky_relu(x, slope))


def test_add_scaled(rng: np.random.Generator) -> None:
    a, b = f32(rng.standard_normal((5, 1001))), f32(rng.standard_normal((5, 1001)))
    scale = np.float32(1 / math.sqrt(2))
    np.testing.assert_array_equal(gpu.add_scaled(a, b, float(scale)), (a + b) * scale)


def test_copy_rows(rng: np.random.Generator) -> None:
    src, dst = f32(rng.standard_normal((37, 640))), f32(rng.standard_normal((37, 1090)))
    want = dst.copy()
    want[:, 1024:1088] = src[:, 100:164]
    np.testing.assert_array_equal(gpu.copy_rows(src, 100, dst, 1024, 64), want)


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 77), (33, 65), (513, 7), (512, 768)])
def test_transpose(rng: np.random.Generator, rows: int, cols: int) -> None:
    x = f32(rng.standard_normal((rows, cols)))
    np.testing.assert_array_equal(gpu.transpose(x), x.T)


@pytest.mark.parametrize("t_len", [1, 17, 513])
@pytest.mark.parametrize("speed", [1.0, 1.3, 0.7])
def test_durations_from_logits(rng: np.random.Generator, t_len: int, speed: float) -> None:
    logits = f32(rng.standard_normal((t_len, 50)) * 3)
    logits[0] = -30  # every sigmoid ~0: clamped to 1
    exact = ref.durations_float(f64(logits), speed)
    # Sums within float32 rounding of a .5 boundary may round either way.
    decided = np.abs(exact - np.floor(exact) - 0.5) > 1e-4
    got = gpu.durations_from_logits(logits, speed)
    want = ref.durations_from_logits(f64(logits), speed)
    assert got.dtype == np.int32 and got[0] == 1
    np.testing.assert_array_equal(got[decided], want[decided])


@pytest.mark.parametrize("t_len,max_dur", [(1, 1), (5, 7), (1500, 12)])
def test_frame_token_index(rng: np.random.Generator, t_len: int, max_dur: int) -> None:
    dur = rng.integers(0 if t_len > 1 else 1, max_dur + 1, t_len).astype(np.int32)
    np.testing.assert_array_equal(gpu.frame_token_index(dur), ref.frame_token_index(dur))


@pytest.mark.parametrize("c,t_len", [(1, 1), (640, 37), (3, 500)])
def test_expand_frames(rng: np.random.Generator, c: int, t_len: int) -> None:
    x = f32(rng.standard_normal((c, t_len)))
    frame_token = ref.frame_token_index(rng.integers(1, 9, t_len)).astype(np.int32)
    np.testing.assert_array_equal(gpu.expand_frames(x, frame_token), ref.expand_frames(x, frame_token))
    rows = gpu.expand_frames(np.ascontiguousarray(x.T), frame_token, rows=True)
    np.testing.assert_array_equal(rows, ref.expand_frames(x, frame_token).T)


@pytest.mark.parametrize("c,t_len,scale", [(1, 1, 300), (512, 37, 2), (3, 101, 300)])
def test_upsample_nearest(rng: np.random.Generator, c: int, t_len: int, scale: int) -> None:
    x = f32(rng.standard_normal((c, t_len)))
    np.testing.assert_array_equal(gpu.upsample_nearest(x, scale), ref.upsample_nearest(x, scale))


@pytest.mark.parametrize(
    "c,t_len,scale",
    [(1, 1, 2.0), (4, 37, 2.0), (3, 900, 1 / 300), (2, 13, 300.0), (5, 101, 1.5), (2, 64, 0.5), (1, 7, 1.0)],
)
def test_interpolate_linear(rng: np.random.Generator, c: int, t_len: int, scale: float) -> None:
    x = f32(rng.standard_normal((c, t_len)))
    check(
        f"interpolate_linear {c}x{t_len} scale={scale:.4g}",
        gpu.interpolate_linear(x, scale),
        ref.interpolate_linear(f64(x), scale),
        POINTWISE_TOL,
    )


@pytest.mark.parametrize(
    "c,t_len,left,right", [(1, 2, 1, 0), (128, 61, 1, 0), (1, 11, 10, 10), (3, 37, 3, 5)]
)
def test_reflection_pad(rng: np.random.Generator, c: int, t_len: int, left: int, right: int) -> None:
    x = f32(rng.standard_normal((c, t_len)))
    np.testing.assert_array_equal(gpu.reflection_pad(x, left, right), ref.reflection_pad(x, left, right))
