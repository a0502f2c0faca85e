"""The NumPy reference ops against hand-computed values, naive loops and properties."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from kokoro_gpu import ops
from kokoro_gpu.ops import conv as conv_module
from kokoro_gpu.ops import fast_conv, kernels, norm, parallel, polyphase


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def _sig(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


# ------------------------------------------------------------------ linear


def test_linear_matches_loop(rng):
    x, w, b = rng.standard_normal((4, 3)), rng.standard_normal((5, 3)), rng.standard_normal(5)
    expected = np.array([[sum(x[r, i] * w[o, i] for i in range(3)) + b[o] for o in range(5)]
                         for r in range(4)])
    np.testing.assert_allclose(ops.linear(x, w, b), expected, rtol=1e-12)
    np.testing.assert_allclose(ops.linear(x, w), expected - b, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------- elementwise


def test_gelu_new_hand_values():
    xs = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 2.0])
    expected = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))) for v in xs]
    np.testing.assert_allclose(ops.gelu_new(xs), expected, rtol=1e-14)
    # The tanh form stays within 1e-3 of the exact erf GELU.
    exact = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in xs]
    np.testing.assert_allclose(ops.gelu_new(xs), exact, atol=1e-3)
    assert ops.gelu_new(np.float32([1.0])).dtype == np.float32


def test_leaky_relu_and_snake(rng):
    x = np.array([[-2.0, -0.5, 0.0, 3.0]])
    np.testing.assert_array_equal(ops.leaky_relu(x, 0.1), [[-0.2, -0.05, 0.0, 3.0]])
    x = rng.standard_normal((3, 6))
    alpha = np.array([0.5, 1.0, 2.0])
    expected = np.empty_like(x)
    for c in range(3):
        for t in range(6):
            expected[c, t] = x[c, t] + math.sin(alpha[c] * x[c, t]) ** 2 / alpha[c]
    np.testing.assert_allclose(ops.snake(x, alpha), expected, rtol=1e-13)


def test_sigmoid_extremes():
    z = np.array([-1000.0, -1.0, 0.0, 1.0, 1000.0])
    with np.errstate(over="raise"):
        np.testing.assert_allclose(ops.sigmoid(z), [0.0, _sig(-1.0), 0.5, _sig(1.0), 1.0], rtol=1e-15)


def test_durations_round_half_to_even_and_clamp():
    max_dur = 50
    # k logits at 0 (sigmoid exactly 0.5) and the rest at -inf (exactly 0): sum = k / 2.
    def logits_for(ks):
        out = np.full((len(ks), max_dur), -np.inf)
        for row, k in enumerate(ks):
            out[row, :k] = 0.0
        return out

    # 2.5 -> 2, 3.5 -> 4, 4.5 -> 4, 0.5 -> 0 -> clamped to 1, 0 -> 1, 3.0 -> 3
    dur = ops.durations_from_logits(logits_for([5, 7, 9, 1, 0, 6]), speed=1.0)
    assert dur.dtype == np.int64
    np.testing.assert_array_equal(dur, [2, 4, 4, 1, 1, 3])
    # speed divides before rounding: 3.0 / 2 = 1.5 -> 2, 5.0 / 2 = 2.5 -> 2, 4.5 / 0.5 = 9
    np.testing.assert_array_equal(ops.durations_from_logits(logits_for([6, 10]), 2.0), [2, 2])
    np.testing.assert_array_equal(ops.durations_from_logits(logits_for([9]), 0.5), [9])
    np.testing.assert_allclose(ops.durations_float(logits_for([5, 7]), 2.0), [1.25, 1.75])


def test_frame_token_index_and_expand_frames(rng):
    dur = np.array([2, 1, 3])
    idx = ops.frame_token_index(dur)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx, [0, 0, 1, 2, 2, 2])
    x = rng.standard_normal((4, 3))
    aln = np.zeros((3, 6))
    frame = 0
    for token, n in enumerate(dur):
        for _ in range(n):
            aln[token, frame] = 1.0
            frame += 1
    np.testing.assert_array_equal(ops.expand_frames(x, idx), x @ aln)


def test_upsample_nearest():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(ops.upsample_nearest(x, 3), [[1, 1, 1, 2, 2, 2], [3, 3, 3, 4, 4, 4]])


@pytest.mark.parametrize(
    ("x", "scale", "expected"),
    [
        # source (j + 0.5) / 2 - 0.5: 0 (clamped), .25, .75, ..., 3.25 (clamped to the last index)
        ([0.0, 10.0, 20.0, 30.0], 2.0, [0.0, 2.5, 7.5, 12.5, 17.5, 22.5, 27.5, 30.0]),
        # downsampling: source (j + 0.5) * 2 - 0.5 = 0.5, 2.5, 4.5
        ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 0.5, [0.5, 2.5, 4.5]),
        # floor(7 / 3) = 2 outputs at sources 1 and 4 (not the size ratio 7 / 2)
        ([0.0, 1.0, 4.0, 9.0, 16.0, 25.0, 36.0], 1 / 3, [1.0, 16.0]),
        # floor(3 * 1.5) = 4 outputs at sources 0 (clamped), 0.5, 7/6, 11/6
        ([0.0, 6.0, 12.0], 1.5, [0.0, 3.0, 7.0, 11.0]),
    ],
)
def test_interpolate_linear_pytorch_semantics(x, scale, expected):
    out = ops.interpolate_linear(np.array([x, np.negative(x)]), scale)
    np.testing.assert_allclose(out, [expected, np.negative(expected)], rtol=1e-12, atol=1e-12)


def test_reflection_pad():
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    np.testing.assert_array_equal(ops.reflection_pad(x, 2, 1), [[3, 2, 1, 2, 3, 4, 3]])
    np.testing.assert_array_equal(ops.reflection_pad(x, 1, 0), [[2, 1, 2, 3, 4]])


# -------------------------------------------------------------------- norm


def test_layer_norm_hand_values_and_affine():
    x = np.array([[1.0, 2.0, 3.0]])
    z = math.sqrt(1.5 / (1 + 1.5e-5))  # (x - 2) / sqrt(2/3 + eps)
    np.testing.assert_allclose(ops.layer_norm(x, eps=1e-5), [[-z, 0.0, z]], rtol=1e-12)
    gamma, beta = np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.0, -1.0])
    np.testing.assert_allclose(ops.layer_norm(x, -1, gamma, beta, eps=1e-5), [[0.5 - z, 0.0, 3 * z - 1]],
                               rtol=1e-12)
    # A constant row normalises to 0 (eps keeps it finite), shifted by beta.
    np.testing.assert_array_equal(ops.layer_norm(np.full((1, 3), 7.0), -1, gamma, beta), [beta])


def test_layer_norm_channels_axis(rng):
    x = rng.standard_normal((8, 5)) * 3 + 2
    y = ops.layer_norm(x, 0, eps=1e-12)
    np.testing.assert_allclose(y.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=0), 1, rtol=1e-9)
    np.testing.assert_allclose(y, ops.layer_norm(x.T, -1, eps=1e-12).T, rtol=1e-12)


def test_ada_layer_norm(rng):
    x = rng.standard_normal((6, 4))
    style = rng.standard_normal(8)
    ln = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ops.ada_layer_norm(x, style), (1 + style[:4]) * ln + style[4:], rtol=1e-12)


def test_instance_norm_and_adain(rng):
    x = rng.standard_normal((3, 50)) * np.array([[1.0], [5.0], [0.1]]) + 4
    y = ops.instance_norm(x)
    np.testing.assert_allclose(y.mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=1) * (x.var(axis=1) + 1e-5), x.var(axis=1), rtol=1e-12)
    gb = rng.standard_normal(6)
    plain = (1 + gb[:3, None]) * y + gb[3:, None]
    np.testing.assert_allclose(ops.adain(x, gb), plain, rtol=1e-12)
    leaky = np.where(plain >= 0, plain, 0.2 * plain)
    np.testing.assert_allclose(ops.adain(x, gb, "leaky_relu", slope=0.2), leaky)
    alpha = np.array([0.5, 1.0, 3.0])
    snaked = plain + np.sin(alpha[:, None] * plain) ** 2 / alpha[:, None]
    np.testing.assert_allclose(ops.adain(x, gb, "snake", alpha=alpha), snaked, rtol=1e-12)
    with pytest.raises(ValueError):
        ops.adain(x, gb, "snake")


@pytest.mark.parametrize("act", [None, "leaky_relu", "snake"])
def test_adain_blocks_of_channels_change_nothing(rng, monkeypatch, act):
    """Channel blocks (one channel each here) give exactly the one-block result, in float32."""
    x = (rng.standard_normal((5, 300)) * 3 + 1).astype(np.float32)
    gb = rng.standard_normal(10).astype(np.float32)
    alpha = (rng.random(5) + 0.2).astype(np.float32)
    monkeypatch.setattr(kernels, "native", None)  # the NumPy reference's blocks
    whole = ops.adain(x, gb, act, alpha=alpha)
    monkeypatch.setattr(norm, "_BLOCK_ELEMS", 1)
    blocked = ops.adain(x, gb, act, alpha=alpha)
    assert blocked.dtype == np.float32
    np.testing.assert_array_equal(blocked, whole)
    truth = ops.adain(x.astype(np.float64), gb.astype(np.float64), act, alpha=alpha.astype(np.float64))
    np.testing.assert_allclose(blocked, truth, rtol=1e-5, atol=1e-5)


# -------------------------------------------------------------------- conv


def _naive_conv1d(x, w, b, stride, pad, dilation, groups):
    t_in = x.shape[1]
    c_out, c_in_g, k = w.shape
    t_out = (t_in + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    y = np.zeros((c_out, t_out))
    per_group_out = c_out // groups
    for o in range(c_out):
        g = o // per_group_out
        for t in range(t_out):
            acc = 0.0 if b is None else b[o]
            for i in range(c_in_g):
                for j in range(k):
                    pos = t * stride + j * dilation - pad
                    if 0 <= pos < t_in:
                        acc += w[o, i, j] * x[g * c_in_g + i, pos]
            y[o, t] = acc
    return y


def _naive_conv_transpose1d(x, w, b, stride, pad, output_padding, groups):
    c_in, t_in = x.shape
    _, c_out_g, k = w.shape
    c_out = c_out_g * groups
    t_out = (t_in - 1) * stride - 2 * pad + k + output_padding
    y = np.zeros((c_out, t_out)) + (0.0 if b is None else b[:, None])
    c_in_g = c_in // groups
    for i in range(c_in):
        g = i // c_in_g
        for t in range(t_in):
            for o in range(c_out_g):
                for j in range(k):
                    pos = t * stride + j - pad
                    if 0 <= pos < t_out:
                        y[g * c_out_g + o, pos] += w[i, o, j] * x[i, t]
    return y


@pytest.mark.parametrize(
    ("c_in", "c_out", "k", "stride", "pad", "dilation", "groups", "bias"),
    [
        (3, 4, 3, 1, 1, 1, 1, True),
        (3, 5, 5, 1, 6, 3, 1, True),  # dilated "same" conv
        (4, 6, 4, 2, 1, 1, 2, True),  # strided, grouped
        (5, 5, 3, 1, 1, 2, 5, False),  # depthwise, dilated, no bias
        (2, 3, 12, 6, 3, 1, 1, True),  # the noise_convs[0] geometry
        (3, 2, 1, 1, 0, 1, 1, False),  # 1x1
    ],
)
def test_conv1d_matches_naive_loop(rng, c_in, c_out, k, stride, pad, dilation, groups, bias):
    x = rng.standard_normal((c_in, 23))
    w = rng.standard_normal((c_out, c_in // groups, k))
    b = rng.standard_normal(c_out) if bias else None
    y = ops.conv1d(x, w, b, stride=stride, pad=pad, dilation=dilation, groups=groups)
    expected = _naive_conv1d(x, w, b, stride, pad, dilation, groups)
    assert y.shape == expected.shape == (c_out, ops.conv1d_out_len(23, k, stride, pad, dilation))
    np.testing.assert_allclose(y, expected, rtol=1e-11, atol=1e-11)


def test_conv1d_chunked_im2col_matches_single_chunk(rng, monkeypatch):
    x = rng.standard_normal((4, 101)).astype(np.float32)
    w = rng.standard_normal((3, 4, 5)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    whole = ops.conv1d(x, w, b, stride=2, pad=2, dilation=2)
    monkeypatch.setattr(conv_module, "_IM2COL_CHUNK_ELEMS", 60)  # three output samples per chunk
    chunked = ops.conv1d(x, w, b, stride=2, pad=2, dilation=2)
    assert chunked.dtype == np.float32
    np.testing.assert_allclose(chunked, whole, rtol=1e-6, atol=1e-6)
    naive = _naive_conv1d(x.astype(np.float64), w, b, 2, 2, 2, 1)
    np.testing.assert_allclose(chunked, naive, rtol=1e-5, atol=1e-5)


_PREPARED_SHAPES = [  # (c_in, c_out, k, pad, dilation, t_len)
    (3, 4, 3, 1, 1, 23),  # "same"
    (4, 3, 3, 5, 5, 40),  # dilated "same"
    (2, 5, 7, 0, 3, 31),  # "valid", dilated
    (3, 3, 11, 25, 5, 9),  # input shorter than one tile
    (5, 2, 11, 3, 1, 200),  # several tiles, pad unlike "same"
]


@pytest.mark.parametrize(
    ("method", "c_in", "c_out", "k", "pad", "dilation", "t_len"),
    [(m, *shape) for m in ("gemm", "winograd", "dft") for shape in _PREPARED_SHAPES
     if m != "winograd" or shape[2] == 3],  # Winograd is prepared for K = 3
)
def test_prepared_conv1d_matches_naive_loop(rng, method, c_in, c_out, k, pad, dilation, t_len):
    x = rng.standard_normal((c_in, t_len))
    w = rng.standard_normal((c_out, c_in, k))
    b = rng.standard_normal(c_out)
    y = fast_conv.PreparedConv1d(w, b, pad=pad, dilation=dilation, method=method)(x)
    expected = _naive_conv1d(x, w, b, 1, pad, dilation, 1)
    assert y.shape == expected.shape and y.dtype == np.float64
    np.testing.assert_allclose(y, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    ("method", "c_in", "c_out", "k", "pad", "dilation", "t_len"),
    [(m, *shape) for m in ("gemm", "winograd", "dft") for shape in _PREPARED_SHAPES
     if m != "winograd" or shape[2] == 3],
)
def test_prepared_conv1d_padded_input(rng, method, c_in, c_out, k, pad, dilation, t_len):
    """An input written into the conv's padded buffer gives the same as the input passed as an array;
    the buffer's margins are zero whatever the memory held before."""
    x = rng.standard_normal((c_in, t_len))
    w = rng.standard_normal((c_out, c_in, k))
    b = rng.standard_normal(c_out)
    conv = fast_conv.PreparedConv1d(w, b, pad=pad, dilation=dilation, method=method)
    padded = conv.padded_input(t_len)
    assert padded.interior.shape == x.shape and np.shares_memory(padded.interior, padded.buffer)
    outside = np.ones(padded.buffer.shape, dtype=bool)
    outside[:, pad : pad + t_len] = False
    assert not padded.buffer[outside].any()
    padded.interior[...] = x
    np.testing.assert_array_equal(conv(padded), conv(x))
    too_short = (k - 1) * dilation - 2 * pad + 1  # no output: a clear error, as for an array
    if too_short > 0:
        with pytest.raises(ValueError, match="too short"):
            conv(conv.padded_input(too_short - 1) if method != "gemm" else np.zeros((c_in, too_short - 1)))


@pytest.mark.parametrize(("method", "k"), [("winograd", 3), ("dft", 7), ("dft", 11)])
def test_prepared_conv1d_float32_chunked(rng, monkeypatch, method, k):
    """float32 within float32 rounding of the float64 truth, chunked or not. Chunks of columns change
    only the GEMMs' blocking (BLAS kernels may order their sums by the column count), so chunked and
    whole agree to the transforms' rounding: a few ulps amplified by Winograd's points (up to 2)."""
    x = rng.standard_normal((16, 700)).astype(np.float32)
    w = (rng.standard_normal((8, 16, k)) / np.sqrt(16 * k)).astype(np.float32)
    conv = fast_conv.PreparedConv1d(w, None, pad=3 * (k - 1) // 2, dilation=3, method=method)
    whole = conv(x)
    monkeypatch.setattr(fast_conv, "_CHUNK_COLUMNS", 60)  # a few tiles per chunk
    chunked = conv(x)
    assert chunked.dtype == np.float32
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=1e-5 * np.abs(whole).max())
    truth = ops.conv1d(x.astype(np.float64), w.astype(np.float64), pad=3 * (k - 1) // 2, dilation=3)
    assert np.linalg.norm(chunked - truth) / np.linalg.norm(truth) < 5e-6


def test_winograd_matrices_compute_correlation(rng):
    b_t, g, a_t = fast_conv.winograd_matrices(6, 3, (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5))
    assert b_t.shape == (8, 8) and g.shape == (8, 3) and a_t.shape == (6, 8)
    x, w = rng.standard_normal(8), rng.standard_normal(3)
    expected = [x[j : j + 3] @ w for j in range(6)]
    np.testing.assert_allclose(a_t @ ((g @ w) * (b_t @ x)), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):
        fast_conv.winograd_matrices(4, 3, (0.0, 1.0))


@pytest.mark.parametrize(("n", "k"), [(32, 11), (32, 7), (8, 3), (24, 5)])
def test_dft_matrices_compute_correlation(rng, n, k):
    b_t, g, a_t = fast_conv.dft_matrices(n, k)
    m, pairs = n - k + 1, n // 2 - 1
    assert b_t.shape == (n, n) and g.shape == (n + pairs, k) and a_t.shape == (m, n)
    x, w = rng.standard_normal(n), rng.standard_normal(k)
    points = np.empty(n + pairs)
    points[:n] = b_t @ x
    fast_conv.expand_points(points, pairs)
    y = a_t @ fast_conv.fold_products((g @ w) * points, pairs)
    expected = [x[j : j + k] @ w for j in range(m)]
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)


def test_choose_method_by_shape():
    assert fast_conv.choose_method(3, 128, 128) == "winograd"
    assert fast_conv.choose_method(11, 256, 256) == "dft"
    assert fast_conv.choose_method(7, 22, 128) == "gemm"  # few input channels: direct
    assert fast_conv.choose_method(5, 512, 512) == "gemm"


def test_run_parallel_order_errors_and_nesting():
    assert parallel.run_parallel([lambda i=i: i * i for i in range(5)]) == [0, 1, 4, 9, 16]

    def nested() -> list[int]:  # a branch that itself branches runs inline, no deadlock
        return parallel.run_parallel([lambda: 1, lambda: 2])

    assert parallel.run_parallel([nested, nested, nested]) == [[1, 2]] * 3
    assert parallel.spawn(lambda: 7).result() == 7

    def fail() -> None:
        raise RuntimeError("branch failed")

    with pytest.raises(RuntimeError, match="branch failed"):
        parallel.run_parallel([lambda: 0, fail])


def test_run_parallel_takes_back_tasks_no_worker_started():
    """With every worker busy elsewhere, the caller runs its queued tasks itself instead of waiting."""
    release = threading.Event()
    blockers = [parallel.spawn(lambda: release.wait(10)) for _ in range(parallel.worker_count())]
    try:
        t0 = time.perf_counter()
        assert parallel.run_parallel([lambda: 1, lambda: 2, lambda: 3]) == [1, 2, 3]
        assert time.perf_counter() - t0 < 5
    finally:
        release.set()
    assert all(b.result() for b in blockers)


def test_conv1d_rejects_short_input_and_bad_groups(rng):
    with pytest.raises(ValueError):
        ops.conv1d(rng.standard_normal((2, 3)), rng.standard_normal((2, 2, 7)))
    with pytest.raises(ValueError):
        ops.conv1d(rng.standard_normal((3, 9)), rng.standard_normal((2, 2, 3)), groups=2)


@pytest.mark.parametrize(
    ("c_in", "c_out", "k", "stride", "pad", "output_padding", "groups", "bias"),
    [
        (3, 4, 20, 10, 5, 0, 1, True),  # the ups[0] geometry
        (4, 3, 12, 6, 3, 0, 1, True),  # the ups[1] geometry
        (5, 5, 3, 2, 1, 1, 5, True),  # AdainResBlk1d's depthwise pool
        (4, 6, 3, 2, 0, 1, 2, False),  # grouped; output_padding past the last tap
        (2, 3, 4, 1, 2, 0, 1, True),
    ],
)
def test_conv_transpose1d_matches_naive_loop(rng, c_in, c_out, k, stride, pad, output_padding, groups, bias):
    x = rng.standard_normal((c_in, 9))
    w = rng.standard_normal((c_in, c_out // groups, k))
    b = rng.standard_normal(c_out) if bias else None
    y = ops.conv_transpose1d(x, w, b, stride=stride, pad=pad, output_padding=output_padding, groups=groups)
    expected = _naive_conv_transpose1d(x, w, b, stride, pad, output_padding, groups)
    t_out = ops.conv_transpose1d_out_len(9, k, stride, pad, output_padding)
    assert y.shape == expected.shape == (c_out, t_out)
    np.testing.assert_allclose(y, expected, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize(
    ("c_in", "c_out", "k", "stride", "pad", "output_padding", "t_len"),
    [
        (3, 4, 20, 10, 5, 0, 9),  # the ups[0] geometry
        (4, 3, 12, 6, 3, 0, 9),  # the ups[1] geometry
        (4, 6, 3, 2, 0, 1, 9),  # output_padding past the last tap
        (3, 2, 7, 3, 4, 2, 7),  # K not a multiple of the stride, pad beyond a phase
        (2, 3, 4, 1, 2, 0, 1),  # one input sample
    ],
)
def test_polyphase_conv_transpose1d_matches_naive_loop(rng, monkeypatch, c_in, c_out, k, stride, pad,
                                                      output_padding, t_len):
    x = rng.standard_normal((c_in, t_len))
    w = rng.standard_normal((c_in, c_out, k))
    b = rng.standard_normal(c_out)
    conv = polyphase.PreparedConvTranspose1d(w, b, stride, pad, output_padding)
    expected = _naive_conv_transpose1d(x, w, b, stride, pad, output_padding, 1)
    y = conv(x)
    assert y.shape == expected.shape and y.dtype == np.float64
    np.testing.assert_allclose(y, expected, rtol=1e-11, atol=1e-11)
    monkeypatch.setattr(polyphase, "_CHUNK_ELEMS", 1)  # one input column per chunk
    np.testing.assert_allclose(conv(x), y, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(("k", "stride", "pad", "groups"), [(5, 2, 2, 1), (4, 3, 1, 1), (3, 2, 1, 4)])
def test_conv_transpose_is_adjoint_of_conv(rng, k, stride, pad, groups):
    c_a, c_b, t_in = 4, 8, 20
    w = rng.standard_normal((c_b, c_a // groups, k))
    x = rng.standard_normal((c_a, t_in))
    y = ops.conv1d(x, w, stride=stride, pad=pad, groups=groups)
    u = rng.standard_normal(y.shape)
    # Pick output_padding so the transposed conv returns to t_in samples.
    op = t_in - ops.conv_transpose1d_out_len(y.shape[1], k, stride, pad)
    v = ops.conv_transpose1d(u, w, stride=stride, pad=pad, output_padding=op, groups=groups)
    assert v.shape == x.shape
    np.testing.assert_allclose(np.vdot(y, u), np.vdot(x, v), rtol=1e-10)


# -------------------------------------------------------------------- lstm


def _naive_lstm_direction(x, w_ih, w_hh, b_ih, b_hh, reverse):
    hid = w_hh.shape[1]
    h, c = np.zeros(hid), np.zeros(hid)
    out = np.zeros((x.shape[0], hid))
    order = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    for t in order:
        z = w_ih @ x[t] + b_ih + w_hh @ h + b_hh
        i, f, g, o = z[:hid], z[hid : 2 * hid], z[2 * hid : 3 * hid], z[3 * hid :]
        c = _sig(f) * c + _sig(i) * np.tanh(g)
        h = _sig(o) * np.tanh(c)
        out[t] = h
    return out


def _torch_named_lstm(rng, n_in, hid, prefix):
    names = {}
    for sfx in ("l0", "l0_reverse"):
        names[f"{prefix}.weight_ih_{sfx}"] = rng.standard_normal((4 * hid, n_in)) * 0.5
        names[f"{prefix}.weight_hh_{sfx}"] = rng.standard_normal((4 * hid, hid)) * 0.5
        names[f"{prefix}.bias_ih_{sfx}"] = rng.standard_normal(4 * hid) * 0.5
        names[f"{prefix}.bias_hh_{sfx}"] = rng.standard_normal(4 * hid) * 0.5
    return names


def test_lstm_bidirectional_matches_step_loop(rng):
    n_in, hid, t_len = 5, 3, 7
    p = _torch_named_lstm(rng, n_in, hid, "enc.lstm")
    w_ih, w_hh, b = ops.pack_lstm(p, "enc.lstm", np.float64)
    assert w_ih.shape == (2, 4 * hid, n_in) and w_hh.shape == (2, 4 * hid, hid) and b.shape == (2, 4 * hid)
    np.testing.assert_allclose(b[1], p["enc.lstm.bias_ih_l0_reverse"] + p["enc.lstm.bias_hh_l0_reverse"])
    x = rng.standard_normal((t_len, n_in))
    out = ops.lstm_bidirectional(x, w_ih, w_hh, b)
    kinds = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    fwd = _naive_lstm_direction(x, *(p[f"enc.lstm.{n}_l0"] for n in kinds), reverse=False)
    bwd = _naive_lstm_direction(x, *(p[f"enc.lstm.{n}_l0_reverse"] for n in kinds), reverse=True)
    np.testing.assert_allclose(out, np.concatenate([fwd, bwd], axis=1), rtol=1e-12, atol=1e-14)
    packed32 = ops.pack_lstm(p, "enc.lstm")
    assert all(a.dtype == np.float32 for a in packed32)


def test_lstm_time_reversal_swaps_directions(rng):
    p = _torch_named_lstm(rng, 4, 6, "l")
    w_ih, w_hh, b = ops.pack_lstm(p, "l", np.float64)
    x = rng.standard_normal((9, 4))
    out = ops.lstm_bidirectional(x, w_ih, w_hh, b)
    swapped = ops.lstm_bidirectional(x[::-1], w_ih[::-1], w_hh[::-1], b[::-1])[::-1]
    np.testing.assert_allclose(np.concatenate([swapped[:, 6:], swapped[:, :6]], axis=1), out, rtol=1e-12)


# --------------------------------------------------------------- attention


def _naive_attention(q, k, v, heads, valid_len):
    t_len, width = q.shape
    d = width // heads
    out = np.zeros_like(q)
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        for i in range(t_len):
            scores = np.array([q[i, cols] @ k[j, cols] / math.sqrt(d) for j in range(valid_len)])
            p = np.exp(scores - scores.max())
            p /= p.sum()
            out[i, cols] = sum(p[j] * v[j, cols] for j in range(valid_len))
    return out


@pytest.mark.parametrize("valid_len", [None, 6, 3])
def test_attention_matches_naive_loop(rng, valid_len):
    t_len, heads, d = 6, 3, 4
    q, k, v = (rng.standard_normal((t_len, heads * d)) * 2 for _ in range(3))
    out = ops.attention(q, k, v, heads, valid_len)
    expected = _naive_attention(q, k, v, heads, t_len if valid_len is None else valid_len)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_attention_masked_keys_do_not_matter(rng):
    q, k, v = (rng.standard_normal((5, 8)).astype(np.float32) for _ in range(3))
    k2, v2 = k.copy(), v.copy()
    k2[3:] += 100.0
    v2[3:] -= 50.0
    np.testing.assert_array_equal(ops.attention(q, k, v, 2, 3), ops.attention(q, k2, v2, 2, 3))


# -------------------------------------------------------------------- stft


def _naive_stft(x, n_fft, hop):
    half = n_fft // 2
    n = len(x)

    def sample(p):  # reflect padding without repeating the edge sample
        p -= half
        if p < 0:
            return x[-p]
        if p >= n:
            return x[2 * (n - 1) - p]
        return x[p]

    window = [0.5 - 0.5 * math.cos(2 * math.pi * i / n_fft) for i in range(n_fft)]
    frames = n // hop + 1
    bins = n_fft // 2 + 1
    spec = np.zeros((bins, frames), dtype=complex)
    for f in range(frames):
        for kb in range(bins):
            spec[kb, f] = sum(
                window[i] * sample(f * hop + i) * complex(math.cos(2 * math.pi * kb * i / n_fft),
                                                          -math.sin(2 * math.pi * kb * i / n_fft))
                for i in range(n_fft)
            )
    return spec


def test_stft_matches_direct_dft(rng):
    x = rng.standard_normal(47)
    out = ops.stft_mag_phase(x, n_fft=20, hop=5)
    spec = _naive_stft(x, 20, 5)
    assert out.shape == (22, 47 // 5 + 1)
    np.testing.assert_allclose(out[:11], np.abs(spec), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.cos(out[11:]) * np.abs(spec), spec.real, atol=1e-10)
    np.testing.assert_allclose(np.sin(out[11:]) * np.abs(spec), spec.imag, atol=1e-10)
    assert ops.stft_mag_phase(x.astype(np.float32)).dtype == np.float32


def _naive_istft(spec, n_fft, hop):
    bins, frames = spec.shape
    window = [0.5 - 0.5 * math.cos(2 * math.pi * i / n_fft) for i in range(n_fft)]
    total = n_fft + hop * (frames - 1)
    sig, env = np.zeros(total), np.zeros(total)
    for f in range(frames):
        for i in range(n_fft):
            # Real inverse DFT of a Hermitian spectrum from its first n_fft/2+1 bins
            # (n_fft even); the imaginary parts of DC and Nyquist do not contribute.
            val = spec[0, f].real + spec[bins - 1, f].real * math.cos(math.pi * i)
            for kb in range(1, bins - 1):
                angle = 2 * math.pi * kb * i / n_fft
                val += 2 * (spec[kb, f].real * math.cos(angle) - spec[kb, f].imag * math.sin(angle))
            sig[f * hop + i] += window[i] * val / n_fft
            env[f * hop + i] += window[i] ** 2
    half = n_fft // 2
    return sig[half : total - half] / env[half : total - half]


def test_istft_from_logits_matches_direct_inverse(rng):
    logits = rng.standard_normal((22, 9))
    spec = np.exp(logits[:11]) * np.exp(1j * np.sin(logits[11:]))
    audio = ops.istft_from_logits(logits, n_fft=20, hop=5)
    assert audio.shape == (5 * 8,)
    np.testing.assert_allclose(audio, _naive_istft(spec, 20, 5), rtol=1e-10, atol=1e-12)


def test_stft_istft_round_trip(rng):
    # The head only reaches phases sin(.) in [-1, 1], so write each complex bin as
    # a e^{+i} + b e^{-i} (a, b real) and use linearity: the inverse of each signed
    # part is an istft of log|part| with phase logit +-pi/2.
    x = rng.standard_normal(200)
    mp = ops.stft_mag_phase(x, 20, 5)
    z = mp[:11] * np.exp(1j * mp[11:])
    s = (z.real / math.cos(1.0) + 1j * z.imag / math.sin(1.0)) / 2
    a, b = s.real + s.imag, s.real - s.imag  # z = a e^{i} + b e^{-i}
    rec = np.zeros(200)
    for coef, phase_logit in ((a, math.pi / 2), (b, -math.pi / 2)):
        for sign in (1.0, -1.0):
            part = np.maximum(sign * coef, 1e-300)
            logits = np.concatenate([np.log(part), np.full_like(part, phase_logit)])
            rec += sign * ops.istft_from_logits(logits, 20, 5)
    np.testing.assert_allclose(rec, x, atol=1e-9)


# ------------------------------------------------------------------ source


def test_harmonic_source_unvoiced_is_constant():
    f0 = np.zeros(4, dtype=np.float32)
    lin_w = np.ones((1, 9), dtype=np.float32)
    lin_b = np.array([0.3], dtype=np.float32)
    out = ops.harmonic_source(f0, 30, lin_w, lin_b)
    assert out.shape == (120,) and out.dtype == np.float32
    np.testing.assert_allclose(out, np.tanh(0.3), rtol=1e-6)


def test_harmonic_source_constant_f0_hand_derived():
    # Constant f0, one harmonic: rad = f0/sr per sample; at the frame rate the
    # phase after frame j is 2 pi upp rad (j + 1), and linear upsampling at source
    # (n + 0.5)/upp - 0.5 gives 2 pi rad (n + 0.5 + upp / 2) between the clamped ends.
    upp, frames, f0_hz, sr = 20, 6, 230.0, 24000
    f0 = np.full(frames, f0_hz)
    out = ops.harmonic_source(f0, upp, np.ones((1, 1)), np.zeros(1), n_harm=1, sample_rate=sr)
    n = np.arange(upp * frames)
    expected = np.tanh(0.1 * np.sin(2 * math.pi * f0_hz / sr * (n + 0.5 + upp / 2)))
    inner = slice(upp // 2, upp * frames - upp // 2)
    np.testing.assert_allclose(out[inner], expected[inner], rtol=1e-12, atol=1e-14)
    # Before the first frame centre the source position clamps to frame 0.
    clamped = np.tanh(0.1 * np.sin(2 * math.pi * f0_hz / sr * upp))
    np.testing.assert_allclose(out[: upp // 2], clamped, rtol=1e-12)


def test_harmonic_source_harmonic_k_runs_k_times_faster():
    upp, frames = 10, 8
    f0 = np.full(frames, 100.0)
    sel = np.zeros((1, 3))
    sel[0, 2] = 1.0
    third = ops.harmonic_source(f0, upp, sel, np.zeros(1), n_harm=3)
    first = ops.harmonic_source(3 * f0, upp, np.eye(1, 3), np.zeros(1), n_harm=3)
    np.testing.assert_allclose(third, first, rtol=1e-12, atol=1e-14)


def test_harmonic_source_noise_levels_and_seeding():
    upp, frames = 50, 400
    f0 = np.where(np.arange(frames) < frames // 2, 0.0, 180.0)  # unvoiced then voiced
    w1 = np.eye(1, 9)  # the fundamental only: no random initial phase
    det = ops.harmonic_source(f0, upp, w1, np.zeros(1))
    noisy = ops.harmonic_source(f0, upp, w1, np.zeros(1), rng=np.random.default_rng(7))
    again = ops.harmonic_source(f0, upp, w1, np.zeros(1), rng=np.random.default_rng(7))
    other = ops.harmonic_source(f0, upp, w1, np.zeros(1), rng=np.random.default_rng(8))
    np.testing.assert_array_equal(noisy, again)
    assert not np.array_equal(noisy, other)
    noise = np.arctanh(noisy) - np.arctanh(det)
    half = upp * frames // 2
    assert np.std(noise[:half]) == pytest.approx(0.1 / 3, rel=0.03)
    assert np.std(noise[half:]) == pytest.approx(0.003, rel=0.03)
    np.testing.assert_array_equal(det[:half], 0.0)


def test_harmonic_source_random_initial_phase():
    # The initial phases are added to sample 0 only. The frame-rate resampling
    # reads the two middle samples of each block of upp, so as in the official
    # SineGen they only show for upp <= 2; with upp = 1 they shift harmonics 2.. only.
    f0 = np.full(64, 200.0)
    lin_b = np.zeros(1)
    second, first = np.eye(1, 9, 1), np.eye(1, 9)

    def run(w, upp, seed):
        rng = None if seed is None else np.random.default_rng(seed)
        return ops.harmonic_source(f0, upp, w, lin_b, rng=rng, noise_std=0.0)

    assert np.abs(run(second, 1, 3) - run(second, 1, None)).max() > 1e-3
    np.testing.assert_allclose(run(first, 1, 3), run(first, 1, None), atol=1e-15)
    np.testing.assert_allclose(run(second, 40, 3), run(second, 40, None), atol=1e-15)


_THREAD_ALLOCATIONS = """
import resource, sys, threading
import numpy as np
from kokoro_gpu.ops.memory import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "kept" else False
faults = []
def work():
    for _ in range(4):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        block = np.ones(100 << 18, dtype=np.float32)  # 100 MB, as a long utterance's sequences
        del block
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
thread = threading.Thread(target=work)
thread.start()
thread.join()
print(took, *faults)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and RUSAGE_THREAD")
def test_kept_memory_is_reused_by_worker_threads_without_faulting_it_in_again():
    """A worker thread's large block, freed and allocated again, reuses mapped pages (not fresh ones)."""
    def faults(mode: str) -> tuple[bool, list[int]]:
        out = subprocess.run([sys.executable, "-c", _THREAD_ALLOCATIONS, mode], capture_output=True,
                             text=True, check=True).stdout.split()
        return out[0] == "True", [int(f) for f in out[1:]]

    took, kept = faults("kept")
    if not took:
        pytest.skip("not glibc: malloc's parameters cannot be set")
    _, default = faults("default")
    assert kept[0] > 0 and default[0] > 0  # the first block is faulted in either way
    # glibc's default maps a worker's 100 MB block afresh each time; kept, it comes back mapped.
    assert sum(default[1:]) >= 2 * default[0]
    assert sum(kept[1:]) <= kept[0] // 10


_HEAP_TOP = """
import resource
import numpy as np
from kokoro_gpu.ops.memory import keep_freed_memory
took = keep_freed_memory()
faults = []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [np.ones(500 << 18, dtype=np.float32) for _ in range(3)]  # 3 x 500 MB from the heap
    del blocks  # 1.5 GB free at the heap's top, as at the end of a long utterance
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(took, *faults)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_kept_memory_is_not_trimmed_when_more_than_a_gigabyte_is_freed():
    """A long utterance frees over 1 GiB at the heap's top: the next pass finds it still mapped."""
    out = subprocess.run([sys.executable, "-c", _HEAP_TOP], capture_output=True, text=True,
                         check=True).stdout.split()
    if out[0] != "True":
        pytest.skip("not glibc: malloc's parameters cannot be set")
    first, second = int(out[1]), int(out[2])
    assert first > 0 and second <= first // 10, (first, second)
