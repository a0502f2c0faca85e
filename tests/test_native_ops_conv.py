"""CUDA conv1d (fp32, TF32, the FP16 tensor-core kernels in rounded and split form, the strided
polyphase conv, output statistics, out_scale, shared-GPU launches) against the NumPy reference
ops.

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
    FAST_CONV1D_CASES,
    HALF_OPERAND_TOL,
    SHORT_REDUCTION_TOL,
    check,
    check_partials,
    f32,
    f64,
    gpu,
    reduction_tol,
    round_half,
)

from kokoro_gpu import ops as ref
from kokoro_gpu.errors import BackendError

pytestmark = pytest.mark.gpu


# (Cin, Cout, Tin, K, stride, pad, dilation, groups): every configuration the
# model uses plus awkward sizes, on both the GEMM and the direct path.
CONV1D_CASES = [
    (64, 48, 101, 3, 1, 1, 1, 1),  # resblock k3 d1
    (64, 48, 101, 3, 1, 3, 3, 1),  # k3 d3
    (37, 29, 53, 3, 1, 5, 5, 1),  # k3 d5
    (64, 64, 97, 7, 1, 3, 1, 1),  # k7 d1
    (33, 40, 61, 7, 1, 9, 3, 1),  # k7 d3
    (33, 40, 61, 7, 1, 15, 5, 1),  # k7 d5
    (45, 31, 89, 11, 1, 5, 1, 1),  # k11 d1
    (45, 31, 89, 11, 1, 15, 3, 1),  # k11 d3
    (45, 31, 89, 11, 1, 25, 5, 1),  # k11 d5
    (128, 128, 6007, 11, 1, 25, 5, 1),  # k11 d5, long enough for two time chunks
    (70, 33, 13, 5, 1, 2, 1, 1),  # text encoder k5 p2
    (70, 33, 1, 5, 1, 2, 1, 1),  # ... on one token
    (22, 40, 121, 12, 6, 3, 1, 1),  # noise_convs[0]: k12 s6 p3
    (1, 1, 7, 3, 2, 1, 1, 1),  # F0_conv / N_conv: k3 s2 p1 on 1 channel (direct)
    (1, 1, 1, 3, 2, 1, 1, 1),
    (1, 1, 300, 3, 2, 1, 1, 1),
    (130, 65, 77, 1, 1, 0, 1, 1),  # 1x1 (pointwise GEMM)
    (22, 128, 121, 1, 1, 0, 1, 1),  # noise_convs[1]: 1x1 22 -> 128
    (512, 1, 31, 1, 1, 0, 1, 1),  # F0/N projection 1x1 -> 1 channel
    (1090, 100, 33, 3, 1, 1, 1, 1),  # decoder k3 on 1090 channels
    (1090, 64, 3001, 3, 1, 1, 1, 1),  # ... long: two time chunks
    (16, 16, 29, 3, 1, 1, 1, 16),  # depthwise (direct)
    (8, 6, 23, 3, 1, 1, 1, 2),  # grouped (direct)
    (3, 5, 17, 4, 2, 1, 2, 1),  # tiny dense (direct), stride + dilation
]


@pytest.mark.parametrize("case", CONV1D_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv1d(rng: np.random.Generator, case: tuple[int, ...]) -> None:
    c_in, c_out, t_in, k, stride, pad, dilation, groups = case
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_out, c_in // groups, k)) / math.sqrt(c_in // groups * k))
    b = f32(rng.standard_normal(c_out))
    want = ref.conv1d(f64(x), f64(w), f64(b), stride, pad, dilation, groups)
    tol = reduction_tol(c_in // groups * k)
    check(f"conv1d {case}", gpu.conv1d(x, w, b, stride, pad, dilation, groups), want, tol)
    nobias = ref.conv1d(f64(x), f64(w), None, stride, pad, dilation, groups)
    check(f"conv1d no bias {case}", gpu.conv1d(x, w, None, stride, pad, dilation, groups), nobias, tol)
    residual = f32(rng.standard_normal(want.shape))
    for in_place in (False, True):
        got = gpu.conv1d(x, w, b, stride, pad, dilation, groups, residual, in_place)
        check(f"conv1d + residual (in place {in_place}) {case}", got, want + f64(residual), tol)


@pytest.mark.parametrize("math_name", ["fp16", "fp16_mma_sync"])
@pytest.mark.parametrize("case", FAST_CONV1D_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv1d_fp16(rng: np.random.Generator, case: tuple[int, ...], math_name: str) -> None:
    """Against the float64 conv of the FP16-rounded operands (only fp32 accumulation
    error remains), and of the exact operands (the rounding itself)."""
    c_in, c_out, t_in, k, pad, dilation = case
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_out, c_in, k)) / math.sqrt(c_in * k))
    b = f32(rng.standard_normal(c_out))
    rounded = ref.conv1d(round_half(x), round_half(w), f64(b), 1, pad, dilation, 1)
    got = gpu.conv1d(x, w, b, 1, pad, dilation, math=math_name)
    check(f"conv1d {math_name} {case} vs rounded operands", got, rounded, reduction_tol(c_in * k))
    want = ref.conv1d(f64(x), f64(w), f64(b), 1, pad, dilation, 1)
    check(f"conv1d {math_name} {case}", got, want, HALF_OPERAND_TOL)
    nobias = ref.conv1d(round_half(x), round_half(w), None, 1, pad, dilation, 1)
    got = gpu.conv1d(x, w, None, 1, pad, dilation, math=math_name)
    check(f"conv1d {math_name} no bias {case}", got, nobias, reduction_tol(c_in * k))
    residual = f32(rng.standard_normal(want.shape))
    for in_place in (False, True):
        got = gpu.conv1d(x, w, b, 1, pad, dilation, 1, residual, in_place, math_name)
        check(
            f"conv1d {math_name} + residual (in place {in_place}) {case}",
            got,
            rounded + f64(residual),
            reduction_tol(c_in * k),
        )


# (c_in, c_out, t_in, K, stride, pad): the fast generator's first noise conv (22 -> 256, K 12,
# stride 6, pad 3) on a medium input's source STFT length and on one of a whole number of
# strides; K not a multiple of the stride; no pad; a short input (fewer rows than a tile).
STRIDED_CONV1D_CASES = [
    (22, 256, 56761, 12, 6, 3),
    (22, 256, 6000, 12, 6, 3),
    (40, 96, 777, 5, 2, 2),
    (8, 130, 500, 9, 3, 0),
    (22, 128, 40, 12, 6, 3),
]


@pytest.mark.parametrize("shared_gpu", [False, True])
@pytest.mark.parametrize("case", STRIDED_CONV1D_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv1d_strided_half(rng: np.random.Generator, case: tuple[int, ...], shared_gpu: bool) -> None:
    """The polyphase tensor-core conv of stride > 1 against the float64 strided conv of the
    FP16-rounded operands (only fp32 accumulation error remains) and of the exact ones; its
    statistics partials tile y; the input's rows past Tin, poisoned, are zeroed by the op."""
    c_in, c_out, t_in, k, stride, pad = case
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_out, c_in, k)) / math.sqrt(c_in * k))
    b = f32(rng.standard_normal(c_out))
    y, parts = gpu.conv1d_strided_half(x, w, b, stride, pad, shared_gpu)
    rounded = ref.conv1d(round_half(x), round_half(w), f64(b), stride, pad, 1, 1)
    assert y.shape == rounded.shape
    check(f"strided conv1d {case} vs rounded operands", y, rounded, reduction_tol(c_in * k))
    want = ref.conv1d(f64(x), f64(w), f64(b), stride, pad, 1, 1)
    check(f"strided conv1d {case}", y, want, HALF_OPERAND_TOL)
    check_partials(y, parts)


def test_conv1d_strided_half_rejects_one_tap() -> None:
    """A kernel within one stride (one polyphase tap) is refused with the op's message."""
    x = f32(np.ones((4, 64)))
    w = f32(np.ones((8, 4, 3)))
    with pytest.raises(BackendError, match="at least two strides"):
        gpu.conv1d_strided_half(x, w, None, 4, 0)


@pytest.mark.parametrize("math_name", ["fp16x3", "fp16x3_mma_sync"])
@pytest.mark.parametrize("case", FAST_CONV1D_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv1d_fp16x3(rng: np.random.Generator, case: tuple[int, ...], math_name: str) -> None:
    """Split operands (precision "fp32" on the tensor cores): the float32 conv's tolerance
    against the exact float64 conv, where the rounded FP16 operands miss it by ~3e-4."""
    c_in, c_out, t_in, k, pad, dilation = case
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_out, c_in, k)) / math.sqrt(c_in * k))
    b = f32(rng.standard_normal(c_out))
    want = ref.conv1d(f64(x), f64(w), f64(b), 1, pad, dilation, 1)
    tol = reduction_tol(c_in * k)
    check(f"conv1d {math_name} {case}", gpu.conv1d(x, w, b, 1, pad, dilation, math=math_name), want, tol)
    residual = f32(rng.standard_normal(want.shape))
    got = gpu.conv1d(x, w, b, 1, pad, dilation, 1, residual, True, math_name)
    check(f"conv1d {math_name} + residual in place {case}", got, want + f64(residual), tol)


def test_conv1d_fp16x3_keeps_small_weights() -> None:
    """Weights far below FP16's normal range (1e-6) keep their significant bits: the
    stored weight is scaled by a power of two that the conv undoes."""
    rng = np.random.default_rng(7)
    x = f32(rng.standard_normal((64, 300)))
    w = f32(rng.standard_normal((40, 64, 3)) * 1e-6)
    want = ref.conv1d(f64(x), f64(w), None, 1, 1, 1, 1)
    for math_name in ("fp16x3", "fp16"):
        tol = SHORT_REDUCTION_TOL if math_name == "fp16x3" else HALF_OPERAND_TOL
        check(f"conv1d {math_name} tiny weights", gpu.conv1d(x, w, None, 1, 1, math=math_name), want, tol)


@pytest.mark.parametrize("math_name", ["fp32", "tf32"])
@pytest.mark.parametrize("c_in,c_out,t_len", [(22, 128, 1000), (22, 256, 517), (3, 20, 77), (22, 128, 1)])
def test_conv1d_pointwise_statistics(
    rng: np.random.Generator, c_in: int, c_out: int, t_len: int, math_name: str
) -> None:
    """A pointwise conv of few input channels (the last noise conv, 22 -> 128) is one fp32
    pass whatever the GEMM math: y = b + w x (+ residual) to float32 level, and it hands its
    output's statistics partials (one per 128 steps) to the AdaIN after it, which then
    writes what its own statistics pass writes."""
    x = f32(rng.standard_normal((c_in, t_len)) + 0.3)
    w = f32(rng.standard_normal((c_out, c_in, 1)) / math.sqrt(c_in))
    b = f32(rng.standard_normal(c_out) + 2.0)
    residual = f32(rng.standard_normal((c_out, t_len)))
    want = ref.conv1d(f64(x), f64(w), f64(b), 1, 0, 1, 1) + f64(residual)
    y, parts = gpu.conv1d_stats(x, w, b, 0, 1, residual, math_name)
    check(f"pointwise conv {math_name}", y, want, reduction_tol(c_in))
    assert np.array_equal(y, gpu.conv1d(x, w, b, 1, 0, 1, 1, residual, False, math_name))
    assert parts.shape[1] == -(-t_len // 128)
    check_partials(y, parts)
    style = f32(rng.standard_normal(2 * c_out) * 0.5)
    alpha = f32(rng.uniform(0.2, 2.0, c_out))
    own = gpu.adain(y, style, "snake", 0.2, alpha, half_rows=True)
    given = gpu.adain(y, style, "snake", 0.2, alpha, half_rows=True, partials=parts)
    check(f"adain from pointwise partials {math_name}", given, own, 2.0**-11)


@pytest.mark.parametrize("math_name", ["fp16", "fp16_mma_sync", "fp16x3", "fp16x3_mma_sync"])
@pytest.mark.parametrize(
    "case",
    # wide (128-step) tiles; on 132 SMs narrow (64-step) ones, 32 rows a warp (one reduction
    # chunk: no split); a split reduction; a narrow Cout tile (wgmma, Cout <= 32: 4 rows a warp)
    [
        (128, 128, 34001, 7, 9, 3),
        (256, 256, 20011, 3, 1, 1),
        (64, 128, 9460, 3, 1, 1),
        (1090, 100, 33, 3, 1, 1),
        (128, 24, 9001, 7, 3, 1),
    ],
    ids=lambda c: "x".join(map(str, c)),
)
def test_conv1d_statistics_partials(rng: np.random.Generator, case: tuple[int, ...], math_name: str) -> None:
    """The conv hands its output's statistics to the AdaIN after it: the partials tile
    the time axis in order, each holds its piece's count, sum and squared deviations of y
    as stored (float64), and AdaIN from them writes what AdaIN's own statistics pass
    writes. A reduction split over blocks (the 1090-channel case) has its sum kernel
    write them, one per 256 steps. The conv epilogue's partials (128 values each) are
    summed in float32: within 1e-6 of the piece's absolute sum, the squared deviations
    within 1e-5; so AdaIN from them may round a value to the neighbouring FP16 step
    (rounded half rows), and matches to float32 level with split ones."""
    c_in, c_out, t_in, k, pad, dilation = case
    x = f32(rng.standard_normal((c_in, t_in)) + 0.3)
    w = f32(rng.standard_normal((c_out, c_in, k)) / math.sqrt(c_in * k))
    b = f32(rng.standard_normal(c_out) + 2.0)  # an offset mean, as after a bias
    t_out = t_in + 2 * pad - dilation * (k - 1)
    residual = f32(rng.standard_normal((c_out, t_out)))
    y, parts = gpu.conv1d_stats(x, w, b, pad, dilation, residual, math_name)
    assert np.array_equal(y, gpu.conv1d(x, w, b, 1, pad, dilation, 1, residual, False, math_name))
    check_partials(y, parts)
    style = f32(rng.standard_normal(2 * c_out) * 0.5)
    alpha = f32(rng.uniform(0.2, 2.0, c_out))
    split = math_name.startswith("fp16x3")
    own = gpu.adain(y, style, "snake", 0.2, alpha, half_rows=True, split=split)
    given = gpu.adain(y, style, "snake", 0.2, alpha, half_rows=True, split=split, partials=parts)
    values = (given[0] + given[1]) if split else given
    own_values = (own[0] + own[1]) if split else own
    check(f"adain from conv partials {math_name} {case}", values, own_values, 1e-6 if split else 2.0**-11)
    want = ref.adain(f64(y), f64(style), "snake", 0.2, f64(alpha))
    check(
        f"adain from conv partials {math_name} {case} vs float64",
        values[:, :c_out].T,
        want,
        reduction_tol(t_out) if split else HALF_OPERAND_TOL,
    )


@pytest.mark.parametrize("math_name", ["fp16", "fp16_mma_sync", "fp16x3"])
@pytest.mark.parametrize(
    "case", [(256, 256, 20011, 3, 1, 1), (1090, 100, 33, 3, 1, 1)], ids=lambda c: "x".join(map(str, c))
)
def test_conv1d_out_scale(rng: np.random.Generator, case: tuple[int, ...], math_name: str) -> None:
    """out_scale scales conv + bias + residual once more (an AdainResBlk1d's sum / sqrt(2)):
    exactly the float32 product of the unscaled output, in the epilogue and in the split
    reduction's sum kernel (the 1090-channel case), and the statistics are the scaled y's."""
    c_in, c_out, t_in, k, pad, dilation = case
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_out, c_in, k)) / math.sqrt(c_in * k))
    b = f32(rng.standard_normal(c_out))
    residual = f32(rng.standard_normal((c_out, t_in)))
    scale = np.float32(1 / math.sqrt(2))
    y1, _ = gpu.conv1d_stats(x, w, b, pad, dilation, residual, math_name)
    y, parts = gpu.conv1d_stats(x, w, b, pad, dilation, residual, math_name, out_scale=scale)
    assert np.array_equal(y, y1 * scale)
    check_partials(y, parts)


@pytest.mark.parametrize("math_name", ["fp16", "fp16x3"])
@pytest.mark.parametrize(
    "case",
    [
        (1090, 1024, 473, 3, 1, 1),
        (512, 512, 159, 3, 3, 3),
        (1090, 100, 33, 3, 1, 1),
        (1090, 1024, 473, 1, 0, 1),
        (256, 256, 9460, 3, 1, 1),
    ],
    ids=lambda c: "x".join(map(str, c)),
)
def test_conv1d_shared_gpu_same_bits(rng: np.random.Generator, case: tuple[int, ...], math_name: str) -> None:
    """A conv called as a batch's lane calls it (the GPU shared with other lanes): a reduction
    that the plan splits over blocks (the first four cases, 5 - 24 ways on an H200) runs inside
    one block per tile on Hopper, each split's sums added in split order, and the statistics
    partials are written as the split sum kernel writes them. y and the partials are bit-equal
    to the latency plan's (the last case splits nothing: the same path either way)."""
    c_in, c_out, t_in, k, pad, dilation = case
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_out, c_in, k)) / math.sqrt(c_in * k))
    b = f32(rng.standard_normal(c_out))
    t_out = t_in + 2 * pad - dilation * (k - 1)
    residual = f32(rng.standard_normal((c_out, t_out)))
    scale = np.float32(1 / math.sqrt(2))
    y, parts = gpu.conv1d_stats(x, w, b, pad, dilation, residual, math_name, out_scale=scale)
    y_shared, parts_shared = gpu.conv1d_stats(
        x, w, b, pad, dilation, residual, math_name, out_scale=scale, shared_gpu=True
    )
    np.testing.assert_array_equal(y_shared, y)
    np.testing.assert_array_equal(parts_shared, parts)
    check_partials(y, parts)


# FP16 outputs and residuals: wide tiles; narrow (64-step) tiles; a reduction split over blocks
# (in one block per tile on a shared GPU).
