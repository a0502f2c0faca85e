"""Normalisations (native/ops/norm.cu): layer norm, AdaLayerNorm, instance norm, AdaIN.

Variances are biased (divide by n), as in PyTorch's normalisation layers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from typing import Literal

import numpy as np

from . import kernels
from .elementwise import snake
from .parallel import run_parallel, worker_count

# Elements of one block of channels in adain: the block and its temporaries stay in cache.
_BLOCK_ELEMS = 1 << 17
# Elements from which the fused kernel's rows are split across the worker threads.
_SPLIT_ELEMS = 1 << 16


def _normalize(x: np.ndarray, axis: int, eps: float) -> np.ndarray:
    mean = x.mean(axis=axis, keepdims=True)
    xc = x - mean
    var = (xc * xc).mean(axis=axis, keepdims=True)
    return xc / np.sqrt(var + x.dtype.type(eps))


def _along(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """Reshape a per-feature vector to broadcast along ``axis`` of an ``ndim`` array."""
    shape = [1] * ndim
    shape[axis] = -1
    return v.reshape(shape)


def layer_norm(
    x: np.ndarray,
    axis: int = -1,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    eps: float = 1e-5,
) -> np.ndarray:
    """Normalise ``x`` over ``axis`` to zero mean and unit variance, then ``* gamma + beta`` if given."""
    y = _normalize(x, axis, eps)
    if gamma is not None:
        y *= _along(gamma, x.ndim, axis)
    if beta is not None:
        y += _along(beta, x.ndim, axis)
    return y


def _split_style(style_gb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = style_gb.shape[-1] // 2
    return style_gb[:c], style_gb[c:]


def ada_layer_norm(x: np.ndarray, style_gb: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """AdaLayerNorm on rows ``x [T, C]``: ``(1 + gamma) * LN(x) + beta``, style_gb = [gamma; beta] [2C]."""
    gamma, beta = _split_style(style_gb)
    return (1 + gamma) * _normalize(x, -1, eps) + beta


def instance_norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Instance norm of ``x [C, T]``: each channel normalised over time (no affine)."""
    return _normalize(x, -1, eps)


def _row_blocks(shape: tuple[int, int]) -> list[slice]:
    """Ranges of channels (rows) of ``[C, T]`` holding about ``_BLOCK_ELEMS`` elements each."""
    channels, t_len = shape
    rows = max(1, _BLOCK_ELEMS // max(1, t_len))
    return [slice(c, min(c + rows, channels)) for c in range(0, channels, rows)]


def adain(
    x: np.ndarray,
    style_gb: np.ndarray,
    act: Literal["leaky_relu", "snake"] | None = None,
    slope: float = 0.2,
    alpha: np.ndarray | None = None,
    eps: float = 1e-5,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """AdaIN1d on ``x [C, T]``: ``(1 + gamma[c]) * instance_norm(x) + beta[c]``, then an optional activation.

    ``style_gb [2C]`` holds gamma then beta (the style projection ``fc(s)``).
    ``act="leaky_relu"`` uses ``slope``; ``act="snake"`` uses ``alpha [C]``.
    The result goes to ``out`` when given (x's shape and dtype; a view, such as a
    conv's padded input, will do), else to a new array.
    Computed block by block of whole channels: every step of a block (its
    statistics, the normalisation, the activation) runs while the block is in
    cache, so the sequence is read once and written once; on the generator's
    long sequences each pass over memory costs more than the math. In float32
    the fused kernel (:mod:`.kernels`) does it row by row; this is its reference.
    """
    if out is None:
        out = np.empty(x.shape, dtype=x.dtype)
    elif out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"adain: out {out.shape} {out.dtype} does not match x {x.shape} {x.dtype}")
    result = out
    adain_blocks(x, style_gb, lambda rows: result[rows], act, slope, alpha, eps)
    return out


def adain_blocks(
    x: np.ndarray,
    style_gb: np.ndarray,
    block_out: Callable[[slice], np.ndarray],
    act: Literal["leaky_relu", "snake"] | None = None,
    slope: float = 0.2,
    alpha: np.ndarray | None = None,
    eps: float = 1e-5,
    block_done: Callable[[slice, np.ndarray], None] | None = None,
) -> None:
    """:func:`adain` block by block of channels: rows ``rows`` of the result go to ``block_out(rows)``.

    ``block_out`` returns an array of x's dtype and the block's shape (a view
    of the result, or a scratch block); ``block_done(rows, block)``, when
    given, is then called with it (the fast precision rounds it to bf16 there).
    """
    if act not in (None, "leaky_relu", "snake"):
        raise ValueError(f"unknown activation {act!r}")
    if act == "snake" and alpha is None:
        raise ValueError("adain with act='snake' needs alpha")
    gamma, beta = _split_style(style_gb)
    if kernels.native is not None and x.dtype == np.float32 and block_done is None:
        # The fused kernel (native/cpu/adain.cpp): each row read from cache three times, written once.
        if x.strides[-1] != x.itemsize:
            x = np.ascontiguousarray(x)

        def run_rows(rows: slice) -> None:
            kernels.native.adain_rows(x[rows], block_out(rows), gamma[rows], beta[rows], act or "none",
                                      slope, None if alpha is None else alpha[rows], eps)

        parts = min(worker_count(), x.shape[0]) if x.size >= _SPLIT_ELEMS else 1
        bounds = np.linspace(0, x.shape[0], parts + 1).astype(int)
        run_parallel([partial(run_rows, slice(int(a), int(b))) for a, b in itertools.pairwise(bounds)])
        return
    one, eps_t, slope_t = x.dtype.type(1), x.dtype.type(eps), x.dtype.type(slope)

    def run_blocks(blocks: list[slice]) -> None:
        for rows in blocks:
            dst = block_out(rows)
            # (x - mean) * ((1 + gamma) / std) + beta, on one temporary; dst holds the squares meanwhile.
            y = np.subtract(x[rows], x[rows].mean(axis=-1, keepdims=True))
            var = np.square(y, out=dst).mean(axis=-1, keepdims=True)  # pairwise summation, as mean's
            y *= (one + gamma[rows, None]) / np.sqrt(var + eps_t)
            y += beta[rows, None]
            if act == "leaky_relu":
                np.maximum(y, np.multiply(y, slope_t, out=dst), out=dst)
            elif act == "snake":
                snake(y, alpha[rows], out=dst)
            else:
                dst[...] = y
            if block_done is not None:
                block_done(rows, dst)

    blocks = _row_blocks(x.shape)
    workers = min(worker_count(), len(blocks))
    run_parallel([partial(run_blocks, blocks[i::workers]) for i in range(workers)])
