"""Bidirectional multi-head self-attention core (native/ops/attention.cu)."""

from __future__ import annotations

import itertools
import math
from functools import partial

import numpy as np

from .parallel import run_parallel, worker_count


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, valid_len: int | None = None
) -> np.ndarray:
    """``softmax(q k^T / sqrt(d) + mask) v`` per head on packed rows q, k, v [T, heads * d] -> [T, heads * d].

    Keys at positions >= ``valid_len`` get the additive mask HF uses (the
    dtype's most negative finite value), so they receive zero weight. The
    heads are independent: one group of them per worker thread.
    """
    t_len, width = q.shape
    d = width // heads
    out = np.empty((t_len, heads, d), dtype=np.result_type(q, k, v))

    def split(a: np.ndarray, first: int, last: int) -> np.ndarray:
        return a.reshape(t_len, heads, d)[:, first:last].transpose(1, 0, 2)  # [heads, T, d]

    def head_group(first: int, last: int) -> None:
        scores = split(q, first, last) @ split(k, first, last).transpose(0, 2, 1) / q.dtype.type(math.sqrt(d))
        if valid_len is not None and valid_len < t_len:
            scores[:, :, valid_len:] += np.finfo(q.dtype).min
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        out[:, first:last] = (p @ split(v, first, last)).transpose(1, 0, 2)

    bounds = np.linspace(0, heads, min(worker_count(), heads) + 1).astype(int)
    run_parallel([partial(head_group, int(a), int(b)) for a, b in itertools.pairwise(bounds)])
    return out.reshape(t_len, width)
