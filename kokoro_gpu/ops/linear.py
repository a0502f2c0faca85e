"""Fully connected layer (native/ops/linear.cu)."""

from __future__ import annotations

import itertools
from functools import partial

import numpy as np

from .parallel import run_parallel, worker_count

# Weights from which a prepared linear layer is split across worker threads (ALBERT's 768 x 768 and up).
_SPLIT_MIN_WEIGHTS = 1 << 19


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """``x @ w.T + b`` for rows ``x [..., in]``, ``w [out, in]``, ``b [out]`` or None."""
    y = x @ w.T
    if b is not None:
        y += b
    return y


class PreparedLinear:
    """``linear(x, w, b)`` with the output features split into one part per worker thread.

    Large layers only: each part is an independent GEMM on the same rows, so
    the parts run on separate cores (BLAS itself runs single-threaded).
    """

    def __init__(self, w: np.ndarray, b: np.ndarray | None = None) -> None:
        parts = worker_count() if w.size >= _SPLIT_MIN_WEIGHTS else 1
        bounds = np.linspace(0, w.shape[0], parts + 1).astype(int)
        self.parts = [(np.ascontiguousarray(w[lo:hi]), None if b is None else np.ascontiguousarray(b[lo:hi]))
                      for lo, hi in itertools.pairwise(bounds)]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        ys = run_parallel([partial(linear, x, w, b) for w, b in self.parts])
        return ys[0] if len(ys) == 1 else np.concatenate(ys, axis=-1)
