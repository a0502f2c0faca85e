"""CUDA linear ops (matmul, linear, the split FP16 GEMM, the ALBERT ffn fusions) against the
NumPy reference ops.

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
    SHORT_REDUCTION_TOL,
    check,
    f32,
    f64,
    gpu,
    reduction_tol,
    rel_error,
)

from kokoro_gpu import ops as ref

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (37, 53, 129), (130, 7, 300)])
def test_matmul(rng: np.random.Generator, trans_a: bool, trans_b: bool, m: int, n: int, k: int) -> None:
    a = f32(rng.standard_normal((k, m) if trans_a else (m, k)))
    b = f32(rng.standard_normal((n, k) if trans_b else (k, n)))
    want = (f64(a).T if trans_a else f64(a)) @ (f64(b).T if trans_b else f64(b))
    check(
        f"matmul {m}x{n}x{k} ta={trans_a} tb={trans_b}",
        gpu.matmul(a, b, trans_a, trans_b),
        want,
        reduction_tol(k),
    )


@pytest.mark.parametrize("rows,d_in,d_out", [(1, 1, 1), (1, 768, 512), (17, 128, 768), (511, 2048, 768)])
@pytest.mark.parametrize("bias", [False, True])
def test_linear(rng: np.random.Generator, rows: int, d_in: int, d_out: int, bias: bool) -> None:
    x = f32(rng.standard_normal((rows, d_in)))
    w = f32(rng.standard_normal((d_out, d_in)) / math.sqrt(d_in))
    b = f32(rng.standard_normal(d_out)) if bias else None
    check(
        f"linear {rows}x{d_in}->{d_out} bias={bias}",
        gpu.linear(x, w, b),
        ref.linear(f64(x), f64(w), f64(b)),
        reduction_tol(d_in),
    )


def test_linear_accumulates_with_beta(rng: np.random.Generator) -> None:
    x, w = f32(rng.standard_normal((9, 65))), f32(rng.standard_normal((33, 65)))
    b, y0 = f32(rng.standard_normal(33)), f32(rng.standard_normal((9, 33)))
    want = ref.linear(f64(x), f64(w), f64(b)) + 0.5 * f64(y0)
    check("linear beta=0.5", gpu.linear(x, w, b, y0, 0.5), want, SHORT_REDUCTION_TOL)


# (600, 256, 2304): 360 tiles, more than a wave of three-stage blocks, so the two-stage kernel
# (three blocks per SM on an H200); the others split the reduction or not. The best kernel
# (wgmma on Hopper) and mma.sync (everywhere) each.
@pytest.mark.parametrize("mma_sync", [False, True], ids=["best", "mma_sync"])
@pytest.mark.parametrize(
    "rows,d_in,d_out", [(1, 1, 1), (32, 768, 2304), (159, 2048, 768), (502, 100, 130), (600, 256, 2304)]
)
def test_linear_split_half(
    rng: np.random.Generator, rows: int, d_in: int, d_out: int, mma_sync: bool
) -> None:
    """Fast precision's ALBERT linears: split FP16 operands on the tensor cores, as accurate as SGEMM.

    Weights of ALBERT's small scale (FP16's underflow would cost their low bits without the
    power-of-two scaling), a few outlier input dimensions as ALBERT's hidden states have (the
    tensor cores' truncating accumulation over a whole row would lose the small terms next to
    them), a reduction that is not a multiple of the 64-wide chunks, partial tiles, reductions
    split over blocks (all but the last shape), bias and beta.
    Rounded FP16 operands alone would be ~1e-3 off.
    """
    x = f32(rng.standard_normal((rows, d_in)) * 3)
    x[:, ::97] *= 40
    w = f32(rng.standard_normal((d_out, d_in)) * 2e-4)
    b, y0 = f32(rng.standard_normal(d_out) * 1e-3), f32(rng.standard_normal((rows, d_out)) * 1e-3)
    want = ref.linear(f64(x), f64(w), f64(b)) + 0.5 * f64(y0)
    got = gpu.linear(x, w, b, y0, 0.5, split=True, mma_sync=mma_sync)
    check(f"linear split {rows}x{d_in}->{d_out}", got, want, reduction_tol(d_in))
    err, sgemm_err = rel_error(got, want), rel_error(gpu.linear(x, w, b, y0, 0.5), want)
    print(f"  split {err:.2e} vs SGEMM {sgemm_err:.2e}")
    assert err <= max(2 * sgemm_err, 1e-7)
    if d_in > 1:
        w_half = f64((w * 2**20).astype(np.float16)) / 2**20
        rounded = f64(x.astype(np.float16)) @ w_half.T + f64(b) + 0.5 * f64(y0)
        assert rel_error(rounded, want) > 5 * reduction_tol(d_in), "the rounded-FP16 contrast is too weak"


def test_linear_split_half_kernels_agree(rng: np.random.Generator) -> None:
    """The best kernel (wgmma on Hopper) issues the same products in the same order into each
    chunk's sums as mma.sync: the same bits, on a split reduction, a single one, and partial tiles.
    wgmma walks a block's chunks in runs of four, two and one (MMAs in flight within a run): 5 and
    2 chunks per split, then 4, 7 and 3 chunks in one block."""
    shapes = ((159, 2048, 768), (600, 256, 2304), (600, 448, 2304), (600, 192, 2304), (7, 100, 130))
    for rows, d_in, d_out in shapes:
        x = f32(rng.standard_normal((rows, d_in)))
        w = f32(rng.standard_normal((d_out, d_in)) * 0.03)
        b = f32(rng.standard_normal(d_out))
        np.testing.assert_array_equal(
            gpu.linear(x, w, b, split=True), gpu.linear(x, w, b, split=True, mma_sync=True)
        )


@pytest.mark.parametrize("mma_sync", [False, True], ids=["best", "mma_sync"])
@pytest.mark.parametrize("d_in,d_out", [(768, 2304), (2048, 768), (100, 130)])
def test_linear_split_half_stacked_rows(
    rng: np.random.Generator, d_in: int, d_out: int, mma_sync: bool
) -> None:
    """A batch's token group: utterances' rows stacked into one split GEMM, each row on the split
    plan of a call on its utterance alone (split over blocks for the short ones, not for the long
    ones), added up inside one block. Every utterance's rows are bit-equal to that call's."""
    lengths = [32, 157, 1, 70, 502, 9]
    x = f32(rng.standard_normal((sum(lengths), d_in)) * 3)
    w = f32(rng.standard_normal((d_out, d_in)) * 2e-4)
    b, y0 = f32(rng.standard_normal(d_out) * 1e-3), f32(rng.standard_normal((sum(lengths), d_out)))
    stacked = gpu.linear(x, w, b, y0, 1.0, split=True, mma_sync=mma_sync, stacked=lengths)
    row = 0
    for n in lengths:
        alone = gpu.linear(x[row : row + n], w, b, y0[row : row + n], 1.0, split=True, mma_sync=mma_sync)
        np.testing.assert_array_equal(stacked[row : row + n], alone, err_msg=f"utterance of {n} rows")
        row += n
    if d_in >= 768:
        # A plain call on all the rows plans fewer splits than the short utterances' calls (at
        # d_in 100 every plan splits each chunk off): its bits differ, so the check above compares
        # each utterance's own plan, not one plan with itself.
        assert not np.array_equal(stacked, gpu.linear(x, w, b, y0, 1.0, split=True, mma_sync=mma_sync))
    with pytest.raises(ValueError, match="add up to rows"):
        gpu.linear(x, w, b, split=True, stacked=lengths[:-1])


@pytest.mark.parametrize("rows,d_in,d_inter", [(32, 768, 2048), (159, 768, 2048), (600, 256, 1000)])
def test_albert_ffn_fusions(rng: np.random.Generator, rows: int, d_in: int, d_inter: int) -> None:
    """ALBERT's ffn as the fast engine runs it: the first split linear's sums (split over
    blocks for the first two shapes, one block's for the last) added up by the GELU, which
    writes the second split linear's operand itself (a width not a multiple of the 64-wide
    chunks in the last shape: its pad columns zero). Bit-equal to the unfused ops, and within
    the split GEMM's float32-level error of float64."""
    x = f32(rng.standard_normal((rows, d_in)))
    w1 = f32(rng.standard_normal((d_inter, d_in)) * 0.03)
    b1 = f32(rng.standard_normal(d_inter))
    w2 = f32(rng.standard_normal((d_in, d_inter)) * 0.03)
    got = gpu.albert_ffn(x, w1, b1, w2)
    hidden = gpu.gelu_new(gpu.linear(x, w1, None, split=True), b1)
    np.testing.assert_array_equal(got, gpu.linear(hidden, w2, None, split=True))
    want = ref.linear(ref.gelu_new(ref.linear(f64(x), f64(w1), f64(b1))), f64(w2), None)
    check("albert ffn vs float64", got, want, 1e-5)
