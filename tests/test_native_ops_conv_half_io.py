"""CUDA convs with FP16 outputs, residuals and raw inputs, the half-rows conversions and AdaIN into
half rows, against the NumPy reference ops.

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


HALF_IO_CASES = [
    (128, 128, 34001, 7, 9, 3),
    (64, 128, 9460, 3, 1, 1),
    (1090, 100, 33, 3, 1, 1),
    (1090, 1024, 473, 1, 0, 1),
]


@pytest.mark.parametrize("shared_gpu", [False, True])
@pytest.mark.parametrize("math_name", ["fp16", "fp16_mma_sync"])
@pytest.mark.parametrize("case", HALF_IO_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv1d_half_out(
    rng: np.random.Generator, case: tuple[int, ...], math_name: str, shared_gpu: bool
) -> None:
    """y stored as FP16 (the fast generator's residual-block hidden): each value is the FP16
    rounding of the fp32 output, bit for bit, from the epilogue and from the split reduction's
    kernels (the 1090-channel case); the statistics partials are the rounded values'; and the
    AdaIN reading the FP16 tensor writes what it writes from the same values in fp32."""
    c_in, c_out, t_in, k, pad, dilation = case
    x = f32(rng.standard_normal((c_in, t_in)) + 0.3)
    w = f32(rng.standard_normal((c_out, c_in, k)) / math.sqrt(c_in * k))
    b = f32(rng.standard_normal(c_out))
    y32, _ = gpu.conv1d_stats(x, w, b, pad, dilation, None, math_name, shared_gpu=shared_gpu)
    y16, parts = gpu.conv1d_stats(
        x, w, b, pad, dilation, None, math_name, shared_gpu=shared_gpu, half_out=True
    )
    assert np.array_equal(y16, round_half(y32))
    check_partials(y16, parts)
    style = f32(rng.standard_normal(2 * c_out) * 0.5)
    alpha = f32(rng.uniform(0.2, 2.0, c_out))
    from_f32 = gpu.adain(y16, style, "snake", 0.2, alpha, half_rows=True, partials=parts)
    from_f16 = gpu.adain(y16, style, "snake", 0.2, alpha, half_rows=True, partials=parts, x_half=True)
    assert np.array_equal(from_f16, from_f32)


@pytest.mark.parametrize("shared_gpu", [False, True])
@pytest.mark.parametrize("half_out", [False, True])
@pytest.mark.parametrize("math_name", ["fp16", "fp16x3", "fp16_mma_sync"])
@pytest.mark.parametrize("case", HALF_IO_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv1d_half_residual(
    rng: np.random.Generator, case: tuple[int, ...], math_name: str, half_out: bool, shared_gpu: bool
) -> None:
    """An FP16 residual (the fast generator's running sum inside a residual block) is added as its
    values: y and the statistics partials bit for bit those of the same values given in fp32, from
    the epilogue and from the split reduction's kernels, into an fp32 or an FP16 y."""
    c_in, c_out, t_in, k, pad, dilation = case
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_out, c_in, k)) / math.sqrt(c_in * k))
    b = f32(rng.standard_normal(c_out))
    residual = f32(rng.standard_normal((c_out, t_in + 2 * pad - dilation * (k - 1))) * 3)

    def conv(r: np.ndarray, **extra: bool) -> tuple[np.ndarray, np.ndarray]:
        return gpu.conv1d_stats(
            x, w, b, pad, dilation, r, math_name, shared_gpu=shared_gpu, half_out=half_out, **extra
        )

    got, parts = conv(residual, residual_half=True)
    want, want_parts = conv(f32(round_half(residual)))
    assert np.array_equal(got, want)
    assert np.array_equal(parts, want_parts)
    assert not np.array_equal(got, conv(residual)[0])  # the residual's rounding is seen


# The fast decoder's block shortcuts: a 1x1 conv on the tensor-core conv (K = 1) into FP16 channels.
# (Cin, Cout, T): the decoder's shapes at an odd and an even frame count, a short input, Cin off a
# multiple of 8 (padded half rows), T = 1.
CONV1X1_HALF_CASES = [(1090, 1024, 473), (1090, 512, 946), (514, 1024, 92), (37, 40, 33), (64, 40, 1)]


@pytest.mark.parametrize("case", CONV1X1_HALF_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv1x1_half(rng: np.random.Generator, case: tuple[int, int, int]) -> None:
    """y is the FP16 rounding of the product of the FP16 operands (the weight rounded at the
    engine's power-of-two scale, max |w| in [2^13, 2^14)) summed in fp32: every value FP16, each
    within one FP16 step (plus the fp32 sum's error) of that product's float64 value."""
    c_in, c_out, t = case
    x = f32(rng.standard_normal((c_in, t)))
    w = f32(rng.standard_normal((c_out, c_in, 1)) / math.sqrt(c_in))
    e = 13 - math.floor(math.log2(float(np.abs(w).max())))
    w16 = f64((w[:, :, 0] * np.float32(2.0**e)).astype(np.float16)) / 2.0**e
    x16 = round_half(x)
    want = w16 @ x16
    got = gpu.conv1x1_half(x, w)
    assert got.shape == (c_out, t)
    assert np.isfinite(got).all(), np.argwhere(~np.isfinite(got))[:5]
    assert np.array_equal(got, round_half(got))
    step = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(got - want) <= step + 1e-6 * (np.abs(w16) @ np.abs(x16)))
    with pytest.raises(ValueError, match=r"\[Cout, Cin, 1\]"):
        gpu.conv1x1_half(x, f32(np.ones((c_out, c_in, 3))))


# Raw inputs: the wide (128-step) tile, k7 d3 (wgmma: MMAs in flight, four weight stages) and k11 d5
# (three stages: a fourth would not leave two blocks per SM), also over four 64-channel chunks; the
# narrow one, k11 d5 over one chunk (on 132 SMs: more chunks would split the reduction), and two
# blocks that both reach past an end of the input, at an odd and an even pad (the transform pairs
# its rows from an even staging row: window row -1 first at an odd pad).
RAW_INPUT_CASES = [
    (128, 128, 34001, 7, 9, 3),
    (128, 128, 34001, 11, 25, 5),
    (256, 128, 20000, 11, 25, 5),
    (64, 128, 9460, 11, 25, 5),
    (64, 128, 100, 3, 1, 1),
    (64, 128, 100, 5, 4, 2),
]


@pytest.mark.parametrize("residual_half", [False, True])
@pytest.mark.parametrize("half_out", [False, True])
@pytest.mark.parametrize("case", RAW_INPUT_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv1d_raw_input(
    rng: np.random.Generator, case: tuple[int, ...], half_out: bool, residual_half: bool
) -> None:
    """A conv taking its input raw (FP16 as a residual block's hidden or running sum is stored,
    with its AdaIN's statistics partials) applies AdaIN + Snake as it loads its windows: y and
    its statistics partials bit for bit those of the half-rows pass followed by the conv, and
    near the float64 AdaIN + Snake + conv."""
    c_in, c_out, t_in, k, pad, dilation = case
    if not gpu.conv1d_takes_raw_input(c_in, c_out, t_in, k, pad, dilation):
        pytest.skip("this GPU plans the conv with a split reduction (or has no wgmma)")
    x = f32(round_half(rng.standard_normal((c_in, t_in)) * 2 + 0.5))
    parts = channel_partials(x, 37)
    style = f32(rng.standard_normal(2 * c_in) * 0.5)
    alpha = f32(rng.uniform(0.2, 2.0, c_in))
    w = f32(rng.standard_normal((c_out, c_in, k)) / math.sqrt(c_in * k))
    b = f32(rng.standard_normal(c_out))
    residual = f32(rng.standard_normal((c_out, t_in + 2 * pad - dilation * (k - 1))))
    io = {"half_out": half_out, "residual_half": residual_half}
    got, got_parts = gpu.conv1d_raw(x, parts, style, alpha, w, b, pad, dilation, residual, **io)
    rows = gpu.adain(x, style, "snake", 0.2, alpha, half_rows=True, partials=parts, x_half=True)
    want, want_parts = gpu.conv1d_stats(rows[:, :c_in].T.copy(), w, b, pad, dilation, residual, **io)
    assert np.array_equal(got, want)
    assert np.array_equal(got_parts, want_parts)
    check_partials(got, got_parts)
    r = round_half(residual) if residual_half else f64(residual)
    activated = ref.adain(f64(x), f64(style), "snake", alpha=f64(alpha))
    exact = ref.conv1d(activated, f64(w), f64(b), 1, pad, dilation) + r
    check(f"conv1d raw input {case}", got, exact, HALF_OPERAND_TOL)


def test_conv1d_raw_input_misuse(rng: np.random.Generator) -> None:
    """A raw input needs a conv whose kernel takes one: here 100 input channels (not whole
    64-channel chunks); nor does one of two output-channel tiles take one."""
    assert not gpu.conv1d_takes_raw_input(100, 128, 20000, 3, 1, 1)
    assert not gpu.conv1d_takes_raw_input(256, 256, 9460, 3, 1, 1)
    x = f32(rng.standard_normal((100, 20000)))
    w = f32(rng.standard_normal((128, 100, 3)) / 20)
    with pytest.raises(ValueError, match="cannot take a raw input"):
        gpu.conv1d_raw(x, channel_partials(x, 4), f32(np.zeros(200)), f32(np.ones(100)), w, pad=1)


def test_half_out_misuse(rng: np.random.Generator) -> None:
    """An FP16 tensor needs its producer's statistics (no statistics pass reads FP16), and an FP16
    conv output a tensor-core conv1d of more than 32 output channels (the wide Cout tiles)."""
    x = f32(rng.standard_normal((64, 300)))
    style = f32(rng.standard_normal(128) * 0.5)
    with pytest.raises(BackendError, match="statistics partials"):
        gpu.adain(x, style, "leaky_relu", 0.2, half_rows=True, x_half=True)
    w = f32(rng.standard_normal((24, 64, 3)) / 8)
    with pytest.raises(BackendError, match="more than 32 output channels"):
        gpu.conv1d_stats(x, w, None, 1, 1, None, "fp16", half_out=True)


@pytest.mark.parametrize(
    "case",
    FAST_CONV1D_CASES[:3] + FAST_CONV1D_CASES[-4:-2] + [(130, 65, 77, 1, 0, 1)],
    ids=lambda c: "x".join(map(str, c)),
)
def test_conv1d_tf32(rng: np.random.Generator, case: tuple[int, ...]) -> None:
    c_in, c_out, t_in, k, pad, dilation = case
    x = f32(rng.standard_normal((c_in, t_in)))
    w = f32(rng.standard_normal((c_out, c_in, k)) / math.sqrt(c_in * k))
    b = f32(rng.standard_normal(c_out))
    want = ref.conv1d(f64(x), f64(w), f64(b), 1, pad, dilation, 1)
    check(f"conv1d tf32 {case}", gpu.conv1d(x, w, b, 1, pad, dilation, math="tf32"), want, HALF_OPERAND_TOL)
    residual = f32(rng.standard_normal(want.shape))
    got = gpu.conv1d(x, w, b, 1, pad, dilation, 1, residual, True, "tf32")
    check(f"conv1d tf32 + residual in place {case}", got, want + f64(residual), HALF_OPERAND_TOL)


@pytest.mark.parametrize("shape", [(70, 37), (64, 32), (1090, 5), (3, 1)])
def test_to_half_rows(rng: np.random.Generator, shape: tuple[int, int]) -> None:
    """Exact: the FP16 rounding of x transposed, pad columns zero."""
    c, t_len = shape
    x = f32(rng.standard_normal(shape) * 3)
    got = gpu.to_half_rows(x)
    ld = (c + 7) // 8 * 8
    want = np.zeros((t_len, ld))
    want[:, :c] = round_half(x.T)
    assert got.shape == want.shape
    assert np.array_equal(got, want)


@pytest.mark.parametrize("shape", [(70, 37), (1090, 5)])
def test_to_half_rows_split(rng: np.random.Generator, shape: tuple[int, int]) -> None:
    """Exact: hi is x rounded to FP16, lo the FP16 rounding of x - hi."""
    c, t_len = shape
    x = f32(rng.standard_normal(shape) * np.exp(rng.uniform(-8, 4, shape)))
    got = gpu.to_half_rows(x, split=True)
    ld = (c + 7) // 8 * 8
    assert got.shape == (2, t_len, ld)
    hi, lo = got
    assert np.array_equal(hi[:, :c], round_half(x.T)) and np.all(hi[:, c:] == 0)
    assert np.array_equal(lo[:, :c], round_half(x.T.astype(np.float64) - hi[:, :c]))
    assert np.all(lo[:, c:] == 0)
    check(f"to_half_rows split {shape}: hi + lo", (hi + lo)[:, :c].T, f64(x), 2.0**-21)


@pytest.mark.parametrize("terms_half", [False, True])
@pytest.mark.parametrize("terms", [2, 3])
@pytest.mark.parametrize("split", [False, True])
def test_to_half_rows_scaled_sum(rng: np.random.Generator, split: bool, terms: int, terms_half: bool) -> None:
    """A ScaledSum's half rows (the generator's stage mean, its last sums formed by its reader):
    the float32 ((x0 + x1) + x2) * scale, through the LeakyReLU, then rounded (split: hi + lo)
    exactly as to_half_rows rounds a single tensor. FP16 terms (fast precision's block outputs,
    channels at their padded pitch) give the same from their values."""
    shape = (130, 517)
    xs = [f32(rng.standard_normal(shape)) for _ in range(terms)]
    if terms_half:
        xs = [f32(round_half(x)) for x in xs]
    scale = np.float32(1 / 3)
    v = (xs[0] + xs[1] + xs[2] if terms == 3 else xs[0] + xs[1]) * scale
    v = np.where(v >= 0, v, v * np.float32(0.1)).astype(np.float32)
    got = gpu.to_half_rows(xs[0], split, plus=xs[1:], scale=scale, leaky_slope=0.1, terms_half=terms_half)
    assert np.array_equal(got, gpu.to_half_rows(v, split))


@pytest.mark.parametrize("act", ["leaky_relu", "snake"])
@pytest.mark.parametrize("shape", [(70, 37), (256, 5003), (1090, 41)])
def test_adain_half_rows(rng: np.random.Generator, shape: tuple[int, int], act: str) -> None:
    """AdaIN + activation as half rows: the fp32 op's values, transposed and FP16-rounded."""
    c, t_len = shape
    x = f32(rng.standard_normal(shape) * 2 + 0.5)
    style = f32(rng.standard_normal(2 * c) * 0.5)
    alpha = f32(rng.uniform(0.2, 2.0, c))
    got = gpu.adain(x, style, act, 0.2, alpha if act == "snake" else None, half_rows=True)
    ld = (c + 7) // 8 * 8
    assert got.shape == (t_len, ld)
    assert np.all(got[:, c:] == 0)
    want = ref.adain(f64(x), f64(style), act, 0.2, f64(alpha))
    check(f"adain half rows {act} {shape}", got[:, :c].T, want, HALF_OPERAND_TOL)
    # Split: hi is the rounding of the fp32 op's values (at most one FP16 step apart
    # anywhere), hi + lo holds them to float32 accuracy.
    fp32 = gpu.adain(x, style, act, 0.2, alpha if act == "snake" else None)
    step = np.spacing(np.abs(round_half(fp32.T)).astype(np.float16)).astype(np.float64)
    split = gpu.adain(x, style, act, 0.2, alpha if act == "snake" else None, half_rows=True, split=True)
    assert split.shape == (2, t_len, ld) and np.all(split[:, :, c:] == 0)
    assert np.all(np.abs(split[0][:, :c] - round_half(fp32.T)) <= step)
    # Rounded half rows: the same, up to the hardware sine's absolute error for Snake
    # (they take __sinf, whose 11 bits it cannot disturb: ~2^-21 on [-pi, pi], growing
    # with |arg| through its range reduction; Snake adds sin^2(a v) / a, so twice that
    # over alpha); without Snake, hi itself.
    if act == "snake":
        arg = np.abs(ref.adain(f64(x), f64(style), None) * f64(alpha)[:, None])
        step += (2 * 2.0**-20 * np.maximum(1.0, arg) / f64(alpha)[:, None]).T
        assert np.all(np.abs(got[:, :c] - round_half(fp32.T)) <= step)
    else:
        assert np.array_equal(split[0], got)
    hi_lo = (split[0] + split[1])[:, :c].T
    check(f"adain half rows split {act} {shape}: hi + lo", hi_lo, want, reduction_tol(t_len))


def channel_partials(x: np.ndarray, parts: int) -> np.ndarray:
    """Statistics partials of x [C, T] over `parts` time pieces: {count, sum, m2 about its mean}."""
    pieces = np.array_split(f64(x), parts, axis=1)
    out = np.empty((x.shape[0], parts, 3))
    for i, p in enumerate(pieces):
        out[:, i, 0] = p.shape[1]
        out[:, i, 1] = p.sum(axis=1)
        out[:, i, 2] = ((p - p.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    return out


@pytest.mark.parametrize("parts", [0, 1, 37, 1100])
def test_adain_half_rows_shared_gpu_same_bits(rng: np.random.Generator, parts: int) -> None:
    """A batch lane's AdaIN combines the statistics partials a warp per channel: the sums and the
    order of one utterance's block per channel, so the same bits (0: its own partials)."""
    c, t_len = 70, 9001
    x = f32(rng.standard_normal((c, t_len)) * 2 + 0.5)
    style = f32(rng.standard_normal(2 * c) * 0.5)
    alpha = f32(rng.uniform(0.2, 2.0, c))
    given = channel_partials(x, parts) if parts else None
    block = gpu.adain(x, style, "snake", 0.2, alpha, half_rows=True, partials=given)
    warp = gpu.adain(x, style, "snake", 0.2, alpha, half_rows=True, partials=given, shared_gpu=True)
    assert np.array_equal(block, warp)
    want = ref.adain(f64(x), f64(style), "snake", 0.2, f64(alpha))
    check(f"adain half rows from {parts} partials", warp[:, :c].T, want, HALF_OPERAND_TOL)


# (Cin, Cout, Tin, K, stride, pad, output_padding, groups)
