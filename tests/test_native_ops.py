"""CUDA ops (kokoro_gpu._native.ops) against the NumPy reference ops (kokoro_gpu.ops).

Every test draws fresh random inputs, runs the op on the GPU (the bindings fill
outputs with NaN first, so an unwritten element fails) and compares with the
reference op evaluated in float64. Errors are normwise: max |gpu - ref| over
max |ref|. Tolerances follow float32 rounding (unit roundoff 6e-8): pure data
movement is exact; pointwise maths within 1e-6 (libm vs CUDA ulp differences,
fused multiply-adds); reductions within 1e-5 up to ~1000 terms and 3e-5
beyond (error growth ~ sqrt(n) u with headroom); recurrences and the
exp/atan2 spectral paths get the looser bound where noted.

The whole module is skipped when the extension or a GPU is missing.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np
import pytest

from kokoro_gpu import ops as ref
from kokoro_gpu.backends import cuda_state
from kokoro_gpu.errors import BackendError

SHORT_REDUCTION_TOL = 1e-5  # up to ~1000 terms per output
LONG_REDUCTION_TOL = 3e-5  # longer reductions (e.g. 1090 channels x 3 taps)
POINTWISE_TOL = 1e-6


def _load_native_ops() -> Any:
    state = cuda_state()
    if not state.usable:
        pytest.skip(f"CUDA unavailable: {state.reason}", allow_module_level=True)
    return state.native.ops


gpu = _load_native_ops()


def f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def f64(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.asarray(a, dtype=np.float64)


def rel_error(got: np.ndarray, want: np.ndarray, scale: float | None = None) -> float:
    """max |got - want| / scale, scale defaulting to max |want| (0 when both are zero)."""
    if not want.size:
        return 0.0
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    scale = float(np.max(np.abs(want))) if scale is None else scale
    return err / scale if scale > 0 else err


def check(name: str, got: np.ndarray, want: np.ndarray, tol: float, scale: float | None = None) -> None:
    """Shape, no NaN left from the poisoning, and the normwise relative error within tol."""
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    assert np.all(np.isfinite(got)), f"{name}: non-finite output (unwritten element?)"
    err = rel_error(got, np.asarray(want, dtype=np.float64), scale)
    print(f"[native-ops] {name}: max rel err {err:.2e} (tol {tol:.0e})")
    assert err <= tol, f"{name}: max relative error {err:.3e} > {tol:.0e}"


def reduction_tol(n: int) -> float:
    return SHORT_REDUCTION_TOL if n <= 1024 else LONG_REDUCTION_TOL


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """Fresh inputs per test, reproducible from the test's name."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# ------------------------------------------------------------------ linear


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


# ------------------------------------------------------------- elementwise


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


# -------------------------------------------------------------------- norm


@pytest.mark.parametrize("rows,cols", [(1, 768), (7, 640), (513, 128), (3, 1), (5, 33), (9, 1024)])
@pytest.mark.parametrize("eps", [1e-12, 1e-5])
@pytest.mark.parametrize("in_place", [False, True])
def test_layer_norm_rows(rng: np.random.Generator, rows: int, cols: int, eps: float, in_place: bool) -> None:
    x = f32(rng.standard_normal((rows, cols)) * 3 + 1)
    g, b = f32(rng.standard_normal(cols)), f32(rng.standard_normal(cols))
    check(
        f"layer_norm rows {rows}x{cols} eps={eps}",
        gpu.layer_norm(x, False, g, b, eps=eps, in_place=in_place),
        ref.layer_norm(f64(x), -1, f64(g), f64(b), eps),
        SHORT_REDUCTION_TOL,
    )


def test_layer_norm_rows_x_bias(rng: np.random.Generator) -> None:
    """LayerNorm of x + b (the producing linear's bias fused in), against the float64 LN of the
    float32 sum, and bit-equal to adding the bias first."""
    x, xb = f32(rng.standard_normal((37, 768)) * 3), f32(rng.standard_normal(768))
    g, b = f32(rng.standard_normal(768)), f32(rng.standard_normal(768))
    got = gpu.layer_norm(x, False, g, b, eps=1e-12, x_bias=xb)
    want = ref.layer_norm(f64(x + xb), -1, f64(g), f64(b), 1e-12)
    check("layer_norm rows x_bias", got, want, SHORT_REDUCTION_TOL)
    np.testing.assert_array_equal(got, gpu.layer_norm(x + xb, False, g, b, eps=1e-12))


def test_layer_norm_rows_into_wider_rows(rng: np.random.Generator) -> None:
    """The duration encoder's AdaLayerNorm writes the first columns of a wider buffer (y_pitch):
    those equal the LayerNorm, the others stay untouched."""
    x, sg, sb = (f32(rng.standard_normal(shape)) for shape in ((41, 512), 512, 512))
    got = gpu.layer_norm(x, False, None, None, sg, sb, eps=1e-5, y_pitch=640)
    np.testing.assert_array_equal(got[:, :512], gpu.layer_norm(x, False, None, None, sg, sb, eps=1e-5))
    assert np.all(got[:, 512:].view(np.uint32) == 0xFFFFFFFF)


def test_layer_norm_rows_too_wide() -> None:
    with pytest.raises(BackendError, match="at most 1024"):
        gpu.layer_norm(np.zeros((2, 1025), np.float32))


@pytest.mark.parametrize("rows,cols", [(1, 640), (37, 640), (100, 129)])
def test_ada_layer_norm_rows(rng: np.random.Generator, rows: int, cols: int) -> None:
    x = f32(rng.standard_normal((rows, cols)))
    style = f32(rng.standard_normal(2 * cols) * 0.5)
    got = gpu.layer_norm(x, False, style_gamma=style[:cols], style_beta=style[cols:], eps=1e-5)
    check(f"ada_layer_norm {rows}x{cols}", got, ref.ada_layer_norm(f64(x), f64(style)), SHORT_REDUCTION_TOL)


@pytest.mark.parametrize("c,t_len", [(640, 1), (512, 37), (129, 300), (1, 5)])
@pytest.mark.parametrize("in_place", [False, True])
def test_layer_norm_channels(rng: np.random.Generator, c: int, t_len: int, in_place: bool) -> None:
    x = f32(rng.standard_normal((c, t_len)) * 2 - 1)
    g, b = f32(rng.standard_normal(c)), f32(rng.standard_normal(c))
    got = gpu.layer_norm(x, True, g, b, eps=1e-5, in_place=in_place)
    check(
        f"layer_norm channels {c}x{t_len}",
        got,
        ref.layer_norm(f64(x), 0, f64(g), f64(b), 1e-5),
        SHORT_REDUCTION_TOL,
    )
    style = f32(rng.standard_normal(2 * c) * 0.5)
    got = gpu.layer_norm(x, True, style_gamma=style[:c], style_beta=style[c:], eps=1e-5, in_place=in_place)
    want = ref.ada_layer_norm(f64(x).T, f64(style)).T
    check(f"ada_layer_norm channels {c}x{t_len}", got, want, SHORT_REDUCTION_TOL)


@pytest.mark.parametrize("c,t_len", [(1, 1), (64, 7), (257, 1001), (128, 36001), (2, 300007)])
@pytest.mark.parametrize("act", ["none", "leaky_relu", "snake"])
@pytest.mark.parametrize("in_place", [False, True])
def test_adain(rng: np.random.Generator, c: int, t_len: int, act: str, in_place: bool) -> None:
    x = f32(rng.standard_normal((c, t_len)) * 2 + 0.5)
    style = f32(rng.standard_normal(2 * c) * 0.5)
    alpha = f32(rng.uniform(0.2, 2.0, c))
    got = gpu.adain(x, style, act, 0.2, alpha if act == "snake" else None, in_place)
    want = ref.adain(f64(x), f64(style), None if act == "none" else act, 0.2, f64(alpha))
    check(f"adain {act} {c}x{t_len}", got, want, reduction_tol(t_len))


def test_adain_long_rows_repeatable(rng: np.random.Generator) -> None:
    """Split statistics (offset mean) combine in a fixed order: identical bits every run."""
    x = f32(rng.standard_normal((3, 120001)) * 0.5 + 40.0)
    style = f32(rng.standard_normal(6) * 0.5)
    alpha = f32(rng.uniform(0.2, 2.0, 3))
    first = gpu.adain(x, style, "snake", 0.2, alpha, False)
    want = ref.adain(f64(x), f64(style), "snake", 0.2, f64(alpha))
    check("adain long rows", first, want, LONG_REDUCTION_TOL)
    for _ in range(3):
        assert np.array_equal(gpu.adain(x, style, "snake", 0.2, alpha, False), first)


# -------------------------------------------------------------------- conv

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


# Precision "fast": dense stride-1 convs run the FP16 implicit-GEMM tensor-core
# kernel on half rows (math="fp16": wgmma on Hopper builds with sm_90a, else
# mma.sync; math="fp16_mma_sync" forces the latter, so a Hopper run checks both
# kernels; K = 1: the decoder's and N stack's shortcuts), strided ones cuBLAS in TF32
# (math="tf32", which the bindings also offer for stride 1). (Cin, Cout,
# Tin, K, pad, dilation): every K / dilation the model uses, T and channels
# off the tile sizes, T = 1, Cin % 8 != 0 (padded half rows), lengths that
# take the wide (128) and the narrow (64) time tile, and grids too small for
# the GPU (the reduction split over blocks, partial sums added after).
FAST_CONV1D_CASES = [
    (64, 48, 101, 3, 1, 1),
    (64, 48, 101, 3, 3, 3),
    (36, 29, 53, 3, 5, 5),
    (37, 29, 53, 3, 5, 5),
    (64, 64, 97, 7, 3, 1),
    (33, 40, 61, 7, 9, 3),
    (40, 40, 61, 7, 15, 5),
    (45, 31, 89, 11, 5, 1),
    (48, 31, 89, 11, 15, 3),
    (128, 128, 1001, 11, 25, 5),  # many time tiles, halo of 50
    (256, 256, 333, 3, 1, 1),  # two Cout tiles, eight reduction chunks
    (130, 200, 1, 3, 1, 1),  # T = 1
    (512, 512, 13, 5, 2, 1),  # text encoder k5
    (1090, 100, 33, 3, 1, 1),  # decoder k3, Cin % 8 == 2; one tile: reduction split 18 ways
    (1090, 1024, 92, 3, 1, 1),  # decoder on a short input: split reduction
    (128, 22, 257, 7, 3, 1),  # conv_post (the wgmma kernel's narrow tile: Cout <= 32)
    (128, 22, 30011, 7, 3, 1),  # conv_post on wide time tiles
    (1090, 20, 33, 3, 1, 1),  # narrow tile, reduction split
    (128, 128, 34001, 7, 9, 3),  # wide time tiles (enough of them for every SM twice)
    (64, 48, 34001, 2, 1, 1),  # wide tiles, K = 2 (wgmma: no MMAs left in flight)
    (256, 256, 20011, 3, 1, 1),  # wide tiles, two Cout tiles
    (64, 40, 34001, 7, 90, 30),  # wide tiles, windows of 308 steps: two TMA boxes (wgmma)
    (1090, 1024, 473, 1, 0, 1),  # pointwise (a third window): the decoder's shortcut, split
    (64, 48, 34001, 1, 0, 1),  # pointwise on wide tiles (three weight stages: two blocks per SM)
    (37, 29, 53, 1, 0, 1),  # pointwise on the narrow Cout tile
    (64, 136, 1500, 5, 200, 100),  # 64-step tiles, windows of 464 steps: two boxes
    (64, 136, 34001, 5, 200, 100),  # wide tiles, windows of 528 steps: three boxes
]
# TF32 / FP16 round each operand to 11 significant bits: the normwise error of
# a long random dot product lands near 3e-4.
HALF_OPERAND_TOL = 1e-3


def round_half(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(np.float64)


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


def check_partials(y: np.ndarray, parts: np.ndarray) -> None:
    """Statistics partials of y [C, T] as a conv hands them on: they tile the time axis in
    order, alike for every channel, each with its piece's count, sum (within 1e-6 of the
    piece's absolute sum: fp32 sums) and squared deviations about its own mean (1e-5)."""
    c_out, t_out = y.shape
    assert parts.shape[0] == c_out and parts.shape[1] >= 1 and parts.shape[2] == 3
    counts = parts[:, :, 0]
    assert np.all(counts == counts[0]) and np.all(counts >= 1) and counts[0].sum() == t_out
    lengths = counts[0].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    y64 = f64(y)
    sums = np.add.reduceat(y64, starts, axis=1)
    abs_sums = np.add.reduceat(np.abs(y64), starts, axis=1)
    assert np.all(np.abs(parts[:, :, 1] - sums) <= 1e-6 * abs_sums)
    piece_means = np.repeat(sums / counts, lengths, axis=1)
    m2 = np.add.reduceat((y64 - piece_means) ** 2, starts, axis=1)
    np.testing.assert_allclose(parts[:, :, 2], m2, rtol=1e-5)


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


# -------------------------------------------------------- lstm, attention


@pytest.mark.parametrize(
    "t_len,d_in,hidden,max_cluster_blocks",
    # H 64 / 128 / 256 take the cluster path on sm_90 (T=500: the long case), 16 blocks per
    # direction at H 256 where the device allows it, else (and when capped at 8) the portable
    # shape; a cap below every cluster shape, and H 33, take the fallback.
    [
        (1, 640, 256, 16),
        (2, 17, 33, 16),
        (37, 640, 256, 16),
        (150, 512, 256, 16),
        (500, 640, 256, 16),
        (45, 24, 64, 16),
        (90, 40, 128, 16),
        (150, 512, 256, 8),
        (90, 40, 128, 4),
        (37, 640, 256, 4),
    ],
)
def test_lstm_bidirectional(
    rng: np.random.Generator, t_len: int, d_in: int, hidden: int, max_cluster_blocks: int
) -> None:
    x = f32(rng.standard_normal((t_len, d_in)))
    w_ih = f32(rng.uniform(-1, 1, (2, 4 * hidden, d_in)) / math.sqrt(hidden))
    w_hh = f32(rng.uniform(-1, 1, (2, 4 * hidden, hidden)) / math.sqrt(hidden))
    b = f32(rng.uniform(-1, 1, (2, 4 * hidden)) / math.sqrt(hidden))
    want = ref.lstm_bidirectional(f64(x), f64(w_ih), f64(w_hh), f64(b))
    # Rounding of each step feeds the next: allow the long-reduction bound.
    check(
        f"lstm T={t_len} In={d_in} H={hidden}",
        gpu.lstm_bidirectional(x, w_ih, w_hh, b, max_cluster_blocks),
        want,
        LONG_REDUCTION_TOL,
    )


@pytest.mark.parametrize(
    "lengths,hidden,max_cluster_blocks,shared_gpu",
    # Stacked sequences recur up to four per launch (six: a stack of four, then two; a zero-length
    # one is skipped); 16 / 8 blocks per direction, a batch lane's portable clusters, and the
    # fallback (a cap below every cluster shape) one sequence at a time.
    [
        ([37, 150, 1, 90, 150, 5], 256, 16, False),
        ([157, 157, 157, 157], 256, 16, True),
        ([12, 0, 40], 64, 16, False),
        ([33, 70], 128, 8, False),
        ([20, 9], 256, 4, False),
    ],
)
def test_lstm_recurrence_stacked(
    rng: np.random.Generator,
    lengths: list[int],
    hidden: int,
    max_cluster_blocks: int,
    shared_gpu: bool,
) -> None:
    rows = sum(lengths)
    gx = f32(rng.uniform(-2, 2, (rows, 8 * hidden)))
    w_hh = f32(rng.uniform(-1, 1, (2, 4 * hidden, hidden)) / math.sqrt(hidden))
    got = gpu.lstm_recurrence(gx, w_hh, lengths, max_cluster_blocks, shared_gpu)
    # gx as the input projection of x = gx under identity weights and no bias.
    eye = np.eye(8 * hidden).reshape(2, 4 * hidden, 8 * hidden)
    start = 0
    for t_len in lengths:
        part = slice(start, start + t_len)
        start += t_len
        if t_len == 0:
            continue
        want = ref.lstm_bidirectional(f64(gx[part]), eye, f64(w_hh), np.zeros((2, 4 * hidden)))
        check(f"stacked lstm T={t_len} H={hidden}", got[part], want, LONG_REDUCTION_TOL)
        # Each sequence's bits are those of its own call (one sequence per launch).
        alone = gpu.lstm_recurrence(gx[part], w_hh, [t_len], max_cluster_blocks, shared_gpu)
        assert np.array_equal(got[part], alone), f"T={t_len}: stacked differs from alone"


@pytest.mark.parametrize(
    "t_len,heads,head_dim",
    # 502: ALBERT's long case (score row pitch padded to 504); head_dim 5: heads not 16-byte aligned.
    [
        (1, 12, 64),
        (7, 12, 64),
        (33, 12, 64),
        (502, 12, 64),
        (512, 12, 64),
        (101, 3, 48),
        (40, 2, 128),
        (13, 3, 5),
    ],
)
@pytest.mark.parametrize("masked", [0, 3])
# packed: q, k, v as the column blocks of one [T, 3 * width] matrix (row pitch 3 * width), the
# engine's fused QKV projection.
@pytest.mark.parametrize("packed", [False, True])
def test_attention(
    rng: np.random.Generator, t_len: int, heads: int, head_dim: int, masked: int, packed: bool
) -> None:
    width = heads * head_dim
    q, k, v = (f32(rng.standard_normal((t_len, width))) for _ in range(3))
    valid_len = max(t_len - masked, 1)
    want = ref.attention(f64(q), f64(k), f64(v), heads, valid_len)
    check(
        f"attention T={t_len} {heads}x{head_dim} valid={valid_len} packed={packed}",
        gpu.attention(q, k, v, heads, valid_len, packed=packed),
        want,
        SHORT_REDUCTION_TOL,
    )


@pytest.mark.parametrize(
    "t_len,heads,head_dim",
    # 1 and 502 / 512: ALBERT's extremes (a single key; the widest softmax rows); 157: medium; 70:
    # probabilities' pad columns inside a 128-key split row; head dims off the 64-wide chunks.
    [
        (1, 12, 64),
        (70, 12, 64),
        (157, 12, 64),
        (502, 12, 64),
        (512, 2, 64),
        (101, 3, 48),
        (40, 2, 128),
        (13, 3, 5),
    ],
)
@pytest.mark.parametrize("masked", [0, 3])
def test_attention_split_half(
    rng: np.random.Generator, t_len: int, heads: int, head_dim: int, masked: int
) -> None:
    """Fast precision's attention (split FP16 operands on the tensor cores, with the QKV
    projection's bias added on the way in): as accurate as the fp32 SGEMM path against float64,
    on ALBERT-like inputs (scores of a few units, so some probabilities sit far below 2^-14, where
    an unscaled low part would be subnormal). Rounded FP16 operands would be ~1e-3 off."""
    width = heads * head_dim
    q, k, v = (f32(rng.standard_normal((t_len, width)) * 2) for _ in range(3))
    bias = f32(rng.standard_normal(3 * width) * 0.1)
    qb, kb, vb = (x + bias[i * width : (i + 1) * width] for i, x in enumerate((q, k, v)))
    valid_len = max(t_len - masked, 1)
    want = ref.attention(f64(qb), f64(kb), f64(vb), heads, valid_len)
    got = gpu.attention(q, k, v, heads, valid_len, split=True, bias=bias)
    check(f"attention split T={t_len} {heads}x{head_dim} valid={valid_len}", got, want, SHORT_REDUCTION_TOL)
    err = rel_error(got, want)
    sgemm_err = rel_error(gpu.attention(f32(qb), f32(kb), f32(vb), heads, valid_len), want)
    print(f"  split {err:.2e} vs SGEMM {sgemm_err:.2e}")
    assert err <= max(4 * sgemm_err, 2e-7)
    if t_len > 1:
        rounded = ref.attention(round_half(qb), round_half(kb), round_half(vb), heads, valid_len)
        assert rel_error(rounded, want) > 10 * max(err, 1e-7), "the rounded-FP16 contrast is too weak"


def test_attention_split_half_kernels_agree(rng: np.random.Generator) -> None:
    """The best kernel (wgmma on Hopper) and mma.sync give the split attention the same bits."""
    for t_len, heads, head_dim in ((157, 12, 64), (40, 2, 128), (13, 3, 5)):
        q, k, v = (f32(rng.standard_normal((t_len, heads * head_dim))) for _ in range(3))
        np.testing.assert_array_equal(
            gpu.attention(q, k, v, heads, t_len, split=True),
            gpu.attention(q, k, v, heads, t_len, split=True, mma_sync=True),
        )


def test_attention_longer_than_albert_positions(rng: np.random.Generator) -> None:
    """A softmax row lives in one warp's registers: at most 512 keys (ALBERT's position table)."""
    q, k, v = (f32(rng.standard_normal((513, 64))) for _ in range(3))
    with pytest.raises(BackendError, match="513 positions, at most 512"):
        gpu.attention(q, k, v, 1, 513)


def test_attention_all_keys_masked(rng: np.random.Generator) -> None:
    q, k, v = (f32(rng.standard_normal((9, 128))) for _ in range(3))
    check(
        "attention valid_len=0",
        gpu.attention(q, k, v, 2, 0),
        ref.attention(f64(q), f64(k), f64(v), 2, 0),
        SHORT_REDUCTION_TOL,
    )


# -------------------------------------------------------------------- stft


@pytest.mark.parametrize("n", [11, 600, 1001, 12347])
def test_stft_mag_phase(rng: np.random.Generator, n: int) -> None:
    x = f32(np.tanh(rng.standard_normal(n)))
    got = gpu.stft_mag_phase(x)
    want = ref.stft_mag_phase(f64(x))
    bins = want.shape[0] // 2
    check(f"stft magnitude n={n}", got[:bins], want[:bins], SHORT_REDUCTION_TOL)
    # Phase is only defined where the magnitude is well above rounding noise.
    mag = want[:bins]
    reliable = mag > 1e-2 * mag.max()
    diff = np.angle(np.exp(1j * (got[bins:].astype(np.float64) - want[bins:])))
    worst = float(np.max(np.abs(diff[reliable])))
    print(f"[native-ops] stft phase n={n}: max abs err {worst:.2e} rad where |X| > 1% of max")
    assert np.all(np.isfinite(got[bins:]))
    assert worst < 1e-4


@pytest.mark.parametrize("frames", [2, 3, 121, 1201])
def test_istft_from_logits(rng: np.random.Generator, frames: int) -> None:
    logits = f32(np.concatenate([rng.standard_normal((11, frames)), rng.standard_normal((11, frames)) * 2]))
    check(
        f"istft frames={frames}",
        gpu.istft_from_logits(logits),
        ref.istft_from_logits(f64(logits)),
        SHORT_REDUCTION_TOL,
    )


def test_istft_single_frame_is_empty() -> None:
    assert gpu.istft_from_logits(np.zeros((22, 1), np.float32)).shape == (0,)


# ------------------------------------------------------------------ source


def _voiced_f0(rng: np.random.Generator, n: int) -> np.ndarray:
    f0 = rng.uniform(100, 250, n)
    f0[rng.random(n) < 0.2] = 0.0  # unvoiced stretches
    return f32(f0)


@pytest.mark.parametrize("t_f,upp", [(1, 300), (2, 1), (37, 2), (37, 3), (200, 300)])
def test_harmonic_source_deterministic(rng: np.random.Generator, t_f: int, upp: int) -> None:
    f0 = _voiced_f0(rng, t_f)
    lin_w, lin_b = f32(rng.standard_normal((1, 9)) * 0.3), f32(rng.standard_normal(1) * 0.1)
    want = ref.harmonic_source(f64(f0), upp, f64(lin_w), f64(lin_b), rng=None)
    check(
        f"harmonic_source deterministic Tf={t_f} upp={upp}",
        gpu.harmonic_source(f0, upp, lin_w, lin_b),
        want,
        SHORT_REDUCTION_TOL,
    )


def _one_hot(h: int, n_harm: int = 9) -> np.ndarray:
    w = np.zeros((1, n_harm), np.float32)
    w[0, h] = 1.0
    return w


ZERO_BIAS = np.zeros(1, np.float32)


def test_harmonic_source_seeding(rng: np.random.Generator) -> None:
    f0 = _voiced_f0(rng, 50)
    lin_w = f32(rng.standard_normal((1, 9)) * 0.3)
    a = gpu.harmonic_source(f0, 300, lin_w, ZERO_BIAS, seed=1234)
    np.testing.assert_array_equal(a, gpu.harmonic_source(f0, 300, lin_w, ZERO_BIAS, seed=1234))
    b = gpu.harmonic_source(f0, 300, lin_w, ZERO_BIAS, seed=1235)
    assert np.all(np.isfinite(a)) and np.mean(a != b) > 0.99


@pytest.mark.parametrize("h", [0, 4, 8])
def test_harmonic_source_unvoiced_noise(h: int) -> None:
    """Unvoiced (f0 = 0): the output is tanh(noise) with noise ~ N(0, (sine_amp / 3)^2)."""
    f0 = np.zeros(200, np.float32)
    noise = np.arctanh(gpu.harmonic_source(f0, 300, _one_hot(h), ZERO_BIAS, seed=7 + h).astype(np.float64))
    n, sigma = noise.size, 0.1 / 3
    assert abs(noise.mean()) < 5 * sigma / math.sqrt(n)
    assert abs(noise.std() / sigma - 1) < 5 * math.sqrt(0.5 / n)
    z = np.sort(noise / sigma)  # Kolmogorov-Smirnov against the standard normal
    cdf = 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    ks = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
    assert ks < 1.95 / math.sqrt(n)  # 0.1 % level
    # The harmonics draw independent noise: their sum has variance 2 sigma^2.
    pair = np.zeros((1, 9), np.float32)
    pair[0, [h, (h + 1) % 9]] = 1.0
    both = np.arctanh(gpu.harmonic_source(f0, 300, pair, ZERO_BIAS, seed=99).astype(np.float64))
    assert abs(both.std() / (sigma * math.sqrt(2)) - 1) < 5 * math.sqrt(0.5 / n)


def test_harmonic_source_voiced_noise(rng: np.random.Generator) -> None:
    """Voiced: seeded minus deterministic output (through arctanh) is N(0, noise_std^2)."""
    f0 = f32(rng.uniform(100, 250, 200))
    w = _one_hot(2)
    clean = np.arctanh(gpu.harmonic_source(f0, 300, w, ZERO_BIAS).astype(np.float64))
    noisy = np.arctanh(gpu.harmonic_source(f0, 300, w, ZERO_BIAS, seed=3).astype(np.float64))
    noise = noisy - clean
    n, sigma = noise.size, 0.003
    assert abs(noise.mean()) < 5 * sigma / math.sqrt(n)
    assert abs(noise.std() / sigma - 1) < 5 * math.sqrt(0.5 / n) + 1e-3


def test_harmonic_source_initial_phases() -> None:
    """Initial phases: none for the fundamental, uniform [0, 1) cycles for harmonics 2..9.

    With upp = 1 the frame-rate integration keeps the phase added at sample 0;
    with f0 = 0 counted as voiced and no noise, harmonic h then outputs the
    constant tanh(sine_amp sin(2 pi phi_h)), so sin(2 pi phi) follows the
    arcsine law (CDF 1/2 + asin(s) / pi) if phi is uniform.
    """
    f0 = np.zeros(4, np.float32)
    kwargs: dict[str, float] = {"noise_std": 0.0, "voiced_threshold": -1.0, "sine_amp": 0.1}
    fundamental = gpu.harmonic_source(f0, 1, _one_hot(0), ZERO_BIAS, seed=5, **kwargs)
    np.testing.assert_array_equal(fundamental, np.zeros(4, np.float32))
    for h in (1, 8):
        s = np.array(
            [
                np.arctanh(
                    np.float64(gpu.harmonic_source(f0, 1, _one_hot(h), ZERO_BIAS, seed=seed, **kwargs)[0])
                )
                / 0.1
                for seed in range(400)
            ]
        )
        s = np.sort(np.clip(s, -1, 1))
        n = s.size
        cdf = 0.5 + np.arcsin(s) / np.pi
        ks = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
        assert ks < 1.95 / math.sqrt(n), f"harmonic {h + 1}: KS {ks:.3f}"
    # Different harmonics draw different phases.
    per_harmonic = {
        float(gpu.harmonic_source(f0, 1, _one_hot(h), ZERO_BIAS, seed=11, **kwargs)[0]) for h in range(1, 9)
    }
    assert len(per_harmonic) == 8
