"""Bidirectional multi-head self-attention core (native/ops/attention.cu)."""

from __future__ import annotations

import math

import numpy as np


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, valid_len: int | None = None
) -> np.ndarray:
    """``softmax(q k^T / sqrt(d) + mask) v`` per head on packed rows q, k, v [T, heads * d] -> [T, heads * d].

    Keys at positions >= ``valid_len`` get the additive mask HF uses (the
    dtype's most negative finite value), so they receive zero weight.
    """
    t_len, width = q.shape
    d = width // heads

    def split(a: np.ndarray) -> np.ndarray:
        return a.reshape(t_len, heads, d).transpose(1, 0, 2)  # [heads, T, d]

    scores = split(q) @ split(k).transpose(0, 2, 1) / q.dtype.type(math.sqrt(d))
    if valid_len is not None and valid_len < t_len:
        scores[:, :, valid_len:] += np.finfo(q.dtype).min
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return (p @ split(v)).transpose(1, 0, 2).reshape(t_len, width)
