"""CUDA transposed convs (fp32, depthwise into half rows, polyphase on the tensor cores) against
the NumPy reference ops.

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
    check,
    f32,
    f64,
    gpu,
    reduction_tol,
    round_half,
)

from kokoro_gpu import ops as ref
from kokoro_gpu.errors import BackendError

pytestmark = pytest.mark.gpu


CONV_TRANSPOSE_CASES = [
    (64, 48, 17, 20, 10, 5, 0, 1),  # ups[0]: k20 s10 p5
    (64, 48, 1, 20, 10, 5, 0, 1),
    (512, 256, 61, 20, 10, 5, 0, 1),  # ups[0] at full width
    (40, 24, 31, 12, 6, 3, 0, 1),  # ups[1]: k12 s6 p3
    (256, 128, 2, 12, 6, 3, 0, 1),
    (33, 33, 10, 3, 2, 1, 1, 33),  # AdainResBlk1d pool: depthwise k3 s2 p1 op1
    (33, 33, 1, 3, 2, 1, 1, 33),
    (1090, 1090, 37, 3, 2, 1, 1, 1090),
    (3, 5, 17, 4, 2, 1, 0, 1),  # tiny dense (direct)
    (8, 6, 9, 5, 3, 2, 2, 2),  # grouped (direct)
]


@pytest.mark.parametrize("case", CONV_TRANSPOSE_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv_transpose1d(rng: np.random.Generator, case: tuple[int, ...]) -> None:
    c_in, c_out, t_in, k, stride, pad, out_pad, groups = case
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_in, c_out // groups, k)) / math.sqrt(c_in // groups))
    b = f32(rng.standard_normal(c_out))
    for bias in (b, None):
        want = ref.conv_transpose1d(f64(x), f64(w), f64(bias), stride, pad, out_pad, groups)
        got = gpu.conv_transpose1d(x, w, bias, stride, pad, out_pad, groups)
        check(
            f"conv_transpose1d bias={bias is not None} {case}", got, want, reduction_tol(c_in // groups * k)
        )


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("c,t_len", [(1090, 473), (512, 37), (33, 1), (70, 130)])
def test_conv_transpose1d_depthwise_half(rng: np.random.Generator, c: int, t_len: int, split: bool) -> None:
    """The AdainResBlk1d's learned upsampler written straight as the next conv's half rows: bit
    for bit the half rows of the fp32 depthwise transposed conv's output (the same values,
    rounded or split alike), the bias included or not."""
    x = f32(rng.standard_normal((c, t_len)))
    w = f32(rng.standard_normal((c, 1, 3)))
    b = f32(rng.standard_normal(c))
    for bias in (b, None):
        y = gpu.conv_transpose1d(x, w, bias, 2, 1, 1, c)
        assert y.shape == (c, 2 * t_len)
        got = gpu.conv_transpose1d_depthwise_half(x, w, bias, 2, 1, 1, split)
        assert np.array_equal(got, gpu.to_half_rows(y, split))
    with pytest.raises(ValueError, match=r"\[C, 1, K\]"):
        gpu.conv_transpose1d_depthwise_half(x, f32(np.ones((c, 2, 3))))


# (Cin, Cout, Tin, K, stride, pad) of the polyphase tensor-core transposed conv
HALF_CONV_TRANSPOSE_CASES = [
    (512, 256, 37, 20, 10, 5),  # ups[0] on a short input: few blocks, split reduction
    (256, 128, 501, 12, 6, 3),  # ups[1], split reduction
    (256, 128, 6000, 12, 6, 3),  # ups[1]: wide tiles, one split (statistics)
    (64, 40, 3000, 12, 6, 3),  # 240 GEMM rows: a Cout tile holds several phases
    (48, 33, 20, 4, 2, 1),  # a Cin that is not a multiple of 8
    (40, 24, 50, 9, 3, 1),  # three taps per phase
    (32, 16, 30, 4, 2, 0),  # pad 0
    (64, 32, 1, 12, 6, 3),  # Tin = 1
]


def check_partial_totals(y: np.ndarray, parts: np.ndarray) -> None:
    """Statistics partials of y [C, T] in any order (a transposed conv's: per time tile, then the
    reflection pad's element): every element counted once, their sums and squared deviations
    adding up to y's."""
    y64 = f64(y)
    counts, sums, m2 = parts[:, :, 0], parts[:, :, 1], parts[:, :, 2]
    assert np.all(counts.sum(axis=1) == y.shape[1]), "every element counted once"
    np.testing.assert_allclose(sums.sum(axis=1), y64.sum(axis=1), rtol=1e-11, atol=1e-11 * y.shape[1])
    mean = y64.mean(axis=1, keepdims=True)
    safe = np.maximum(counts, 1)
    total_m2 = (m2 + np.where(counts > 0, (sums / safe - mean) ** 2 * counts, 0)).sum(axis=1)
    np.testing.assert_allclose(total_m2, ((y64 - mean) ** 2).sum(axis=1), rtol=1e-9)


def leaky_f32(x: np.ndarray, slope: float) -> np.ndarray:
    """LeakyReLU as the GPU computes it (float32)."""
    return f32(np.where(x >= 0, x, x * np.float32(slope)))


@pytest.mark.parametrize("math_name", ["fp16", "fp16_mma_sync", "fp16x3", "fp16x3_mma_sync"])
@pytest.mark.parametrize("case", HALF_CONV_TRANSPOSE_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv_transpose1d_half(rng: np.random.Generator, case: tuple[int, ...], math_name: str) -> None:
    """The generator's upsampler in one pass: LeakyReLU on the half rows, the phases of
    the transposed conv as one GEMM interleaved by the epilogue, bias, the reflection pad
    (1, 0) and the residual, against the float64 composition of those ops (on the
    FP16-rounded operands for fp16, on the exact ones for fp16x3); its statistics
    partials cover every element of y once, the pad's included."""
    c_in, c_out, t_in, k, stride, pad = case
    slope = 0.1
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_in, c_out, k)) / math.sqrt(c_in * k / stride))
    b = f32(rng.standard_normal(c_out) + 1.0)
    split = math_name.startswith("fp16x3")
    operand = f64 if split else round_half
    tol = reduction_tol(c_in * k // stride)
    plain = ref.conv_transpose1d(operand(leaky_f32(x, slope)), operand(w), f64(b), stride, pad, 0, 1)
    for reflect_left in (0, 1):
        want = ref.reflection_pad(plain, reflect_left, 0)
        residual = f32(rng.standard_normal(want.shape))
        y, parts = gpu.conv_transpose1d_half(
            x, w, b, stride, pad, reflect_left, leaky_slope=slope, math=math_name
        )
        check(f"conv_transpose1d_half {math_name} pad {reflect_left} {case}", y, want, tol)
        for in_place in (False, True):
            y, parts = gpu.conv_transpose1d_half(
                x, w, b, stride, pad, reflect_left, residual, in_place, slope, math_name
            )
            name = f"conv_transpose1d_half {math_name} pad {reflect_left} + residual ({in_place}) {case}"
            check(name, y, want + f64(residual), tol)
        if parts.shape[1] == 0:  # a split reduction: no statistics
            continue
        check_partial_totals(y, parts)
        style = f32(rng.standard_normal(2 * c_out) * 0.5)
        alpha = f32(rng.uniform(0.2, 2.0, c_out))
        own = gpu.adain(y, style, "snake", 0.2, alpha, half_rows=True, split=split)
        given = gpu.adain(y, style, "snake", 0.2, alpha, half_rows=True, split=split, partials=parts)
        got, ref_own = ((given[0] + given[1]), (own[0] + own[1])) if split else (given, own)
        check(f"adain from transposed-conv partials {math_name} {case}", got, ref_own, 1e-6)


# FP16 outputs (fast precision's stage input): a split reduction (the split sum kernel stores y,
# no statistics), one split on wide tiles (the epilogue, with statistics), several phases a tile.
@pytest.mark.parametrize("math_name", ["fp16", "fp16_mma_sync"])
@pytest.mark.parametrize("case", HALF_CONV_TRANSPOSE_CASES[1:4], ids=lambda c: "x".join(map(str, c)))
def test_conv_transpose1d_half_out(rng: np.random.Generator, case: tuple[int, ...], math_name: str) -> None:
    """y stored as FP16 channels: every value, the reflection pad's included, the FP16 rounding of
    the fp32 call's bit for bit (an fp32 residual added first); the statistics partials cover the
    rounded values once each, as the fp32 call's cover its own."""
    c_in, c_out, t_in, k, stride, pad = case
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_in, c_out, k)) / math.sqrt(c_in * k / stride))
    b = f32(rng.standard_normal(c_out) + 1.0)
    for reflect_left in (0, 1):
        t_out = reflect_left + (t_in - 1) * stride - 2 * pad + k
        residual = f32(rng.standard_normal((c_out, t_out)))
        args = (x, w, b, stride, pad, reflect_left, residual, False, 0.1, math_name)
        y32, _ = gpu.conv_transpose1d_half(*args)
        y16, parts = gpu.conv_transpose1d_half(*args, half_out=True)
        assert np.array_equal(y16, round_half(y32))
        if parts.shape[1] == 0:  # a split reduction: no statistics
            continue
        assert y16.shape[1] == t_out
        check_partial_totals(y16, parts)
    with pytest.raises(ValueError, match="in place"):
        gpu.conv_transpose1d_half(x, w, b, stride, pad, 0, y32[:, 1:], True, 0.1, math_name, True)


def test_conv_transpose1d_half_geometry_errors(rng: np.random.Generator) -> None:
    """Shapes the polyphase kernel cannot take fail with a message naming the limit."""
    x = f32(rng.standard_normal((32, 10)))
    for k, stride, pad, reflect_left, what in [
        (10, 4, 2, 0, "multiple of the stride"),
        (6, 6, 3, 0, "at least two strides"),
        (12, 6, 6, 0, "pad < stride"),
        (132, 66, 3, 0, "stride of at most 64"),
        (12, 6, 3, 2, "reflection pad of 0 or 1"),
    ]:
        w = f32(rng.standard_normal((32, 8, k)))
        with pytest.raises(BackendError, match=what):
            gpu.conv_transpose1d_half(x, w, None, stride, pad, reflect_left)
