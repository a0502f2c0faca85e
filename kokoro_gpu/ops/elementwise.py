"""Pointwise and index ops (native/ops/elementwise.cu).

Sequences are channels-first ``[C, T]`` as in the native engine.
"""

from __future__ import annotations

import math

import numpy as np


def gelu_new(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (HF ``gelu_new``): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    c = x.dtype.type(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * (x * x * x))))


def leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    """``x`` where ``x >= 0``, else ``slope * x`` (slope in [0, 1]: the larger of the two)."""
    return np.maximum(x, x * x.dtype.type(slope))


def snake(x: np.ndarray, alpha: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Snake activation ``x + sin(alpha x)^2 / alpha`` with one alpha per channel: x [C, T], alpha [C].

    Written into ``out`` (not ``x``) when given.
    """
    a = alpha.reshape(-1, 1)
    # In place on one array: each pass over a long generator sequence costs memory bandwidth.
    y = np.multiply(a, x, out=out)
    np.sin(y, out=y)
    np.square(y, out=y)
    y *= 1.0 / a
    y += x
    return y


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function, written to avoid overflow in exp for large negative inputs."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def durations_from_logits(logits: np.ndarray, speed: float) -> np.ndarray:
    """Duration head: ``max(1, round_half_even(sum_j sigmoid(logits[t, j]) / speed))`` -> int64 [T]."""
    return np.maximum(np.round(durations_float(logits, speed)), 1).astype(np.int64)


def durations_float(logits: np.ndarray, speed: float) -> np.ndarray:
    """The duration head before rounding: ``sum_j sigmoid(logits[t, j]) / speed`` -> [T]."""
    return sigmoid(logits).sum(axis=-1) / logits.dtype.type(speed)


def frame_token_index(dur: np.ndarray) -> np.ndarray:
    """Token index of every frame: token i covers ``dur[i]`` consecutive frames -> int64 [sum(dur)]."""
    return np.repeat(np.arange(len(dur), dtype=np.int64), np.asarray(dur, dtype=np.int64))


def expand_frames(x: np.ndarray, frame_token: np.ndarray) -> np.ndarray:
    """``x [C, T] @ aln [T, F]`` for the hard alignment, as a gather: out[:, f] = x[:, frame_token[f]]."""
    return np.ascontiguousarray(x[:, frame_token])


def upsample_nearest(x: np.ndarray, scale: int) -> np.ndarray:
    """Nearest-neighbour upsampling along time: [C, T] -> [C, T * scale]."""
    return np.repeat(x, scale, axis=-1)


def interpolate_linear(x: np.ndarray, scale: float) -> np.ndarray:
    """``F.interpolate(x, scale_factor=scale, mode="linear", align_corners=False)`` on x [C, T].

    Output length ``floor(T * scale)``. Output index j reads source position
    ``(j + 0.5) / scale - 0.5`` clamped at 0 (the given scale, not the size
    ratio), linearly between its floor and the next index (the last index
    repeats at the right edge). Positions are computed in float64.
    """
    t_in = x.shape[-1]
    t_out = math.floor(t_in * scale)
    src = np.maximum((np.arange(t_out, dtype=np.float64) + 0.5) / scale - 0.5, 0.0)
    i0 = np.minimum(src.astype(np.int64), t_in - 1)
    i1 = np.minimum(i0 + 1, t_in - 1)
    w1 = (src - i0).astype(x.dtype)
    return x[..., i0] * (1 - w1) + x[..., i1] * w1


def reflection_pad(x: np.ndarray, left: int, right: int) -> np.ndarray:
    """``ReflectionPad1d((left, right))`` along the last axis (the edge sample is not repeated)."""
    width = [(0, 0)] * (x.ndim - 1) + [(left, right)]
    return np.pad(x, width, mode="reflect")
