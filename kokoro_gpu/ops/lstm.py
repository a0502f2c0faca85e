"""Bidirectional single-layer LSTM (native/ops/lstm.cu; on the CPU native/cpu/lstm.cpp where built)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import numpy as np

from . import kernels
from .elementwise import sigmoid
from .parallel import run_parallel


def lstm_bidirectional(x: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PyTorch ``nn.LSTM(bidirectional=True)`` over x [T, In], zero initial state -> [T, 2H].

    w_ih [2, 4H, In], w_hh [2, 4H, H], b [2, 4H] (b_ih + b_hh); index 0 is the
    forward direction, 1 the reverse one. Gate order i, f, g, o:
    c = f c + i g, h = o tanh(c). Output: forward h then reverse h per step.
    Both directions advance together, the reverse one reading x backwards
    (in float32 where the CPU kernels are built: each direction's recurrence
    in one native call, the two on two threads; the loop below is their
    reference).
    """
    # Input projection for every step and both directions at once: [2, T, 4H], C-contiguous.
    projection = np.einsum("ti,dgi->dtg", x, w_ih, optimize=True)
    gx = np.add(projection, b[:, None, :], out=np.empty(projection.shape, np.result_type(projection, b)))
    w_hh_t = np.ascontiguousarray(w_hh.transpose(0, 2, 1))  # [2, H, 4H]
    if kernels.native is not None and gx.dtype == np.float32:
        h_dim = w_hh.shape[-1]
        y = np.empty((x.shape[0], 2 * h_dim), dtype=np.float32)
        run_parallel([partial(kernels.native.lstm_recurrence, gx[0], w_hh_t[0], y[:, :h_dim]),
                      partial(kernels.native.lstm_recurrence, gx[1], w_hh_t[1], y[:, h_dim:], reverse=True)])
        return y
    gx[1] = gx[1, ::-1]
    out = _recurrence(gx, w_hh_t)
    return np.concatenate([out[0], out[1, ::-1]], axis=1)


def _recurrence(gx: np.ndarray, w_hh_t: np.ndarray) -> np.ndarray:
    """Both directions' steps: gx [2, T, 4H] in step order, w_hh_t [2, H, 4H] -> h per step [2, T, H]."""
    t_len = gx.shape[1]
    h_dim = w_hh_t.shape[1]
    h = np.zeros((2, 1, h_dim), dtype=gx.dtype)
    c = np.zeros((2, 1, h_dim), dtype=gx.dtype)
    out = np.empty((2, t_len, h_dim), dtype=gx.dtype)
    for t in range(t_len):
        g = gx[:, t : t + 1, :] + h @ w_hh_t
        i_g = sigmoid(g[..., :h_dim])
        f_g = sigmoid(g[..., h_dim : 2 * h_dim])
        c_g = np.tanh(g[..., 2 * h_dim : 3 * h_dim])
        o_g = sigmoid(g[..., 3 * h_dim :])
        c = f_g * c + i_g * c_g
        h = o_g * np.tanh(c)
        out[:, t] = h[:, 0]
    return out


def pack_lstm(
    weights: Mapping[str, np.ndarray], prefix: str, dtype: type[np.floating] = np.float32
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack the PyTorch-named parameters of LSTM ``prefix``: (w_ih [2,4H,In], w_hh [2,4H,H], b [2,4H])."""
    suffixes = ("l0", "l0_reverse")

    def stack(kind: str) -> np.ndarray:
        return np.stack([np.asarray(weights[f"{prefix}.{kind}_{s}"], dtype=np.float64) for s in suffixes])

    b = stack("bias_ih") + stack("bias_hh")
    return tuple(np.ascontiguousarray(a, dtype=dtype) for a in (stack("weight_ih"), stack("weight_hh"), b))
