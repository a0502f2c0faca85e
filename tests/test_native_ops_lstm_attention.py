"""CUDA LSTMs (bidirectional, stacked recurrences) and attention (SGEMM and split FP16) against
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
    LONG_REDUCTION_TOL,
    SHORT_REDUCTION_TOL,
    check,
    f32,
    f64,
    gpu,
    rel_error,
    round_half,
)

from kokoro_gpu import ops as ref
from kokoro_gpu.errors import BackendError

pytestmark = pytest.mark.gpu


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
