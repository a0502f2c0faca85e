"""Fully connected layer (native/ops/linear.cu)."""

from __future__ import annotations

import numpy as np


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """``x @ w.T + b`` for rows ``x [..., in]``, ``w [out, in]``, ``b [out]`` or None."""
    y = x @ w.T
    if b is not None:
        y += b
    return y
