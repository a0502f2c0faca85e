"""1-D convolutions (native/ops/conv.cu) on channels-first ``[C, T]`` inputs.

Weights in PyTorch's layout: Conv1d ``[Cout, Cin/groups, K]``, ConvTranspose1d
``[Cin, Cout/groups, K]``. Both are vectorised: conv1d as im2col (a strided
view copied chunk by chunk) times one (batched) GEMM; conv_transpose1d as one
GEMM onto every tap followed by an overlap-add over the K taps.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

# Elements of one im2col chunk: large enough for efficient GEMMs, small enough
# to stay in cache-friendly, bounded memory on long generator sequences.
_IM2COL_CHUNK_ELEMS = 1 << 22


def conv1d_out_len(t_in: int, k: int, stride: int = 1, pad: int = 0, dilation: int = 1) -> int:
    """Output length of Conv1d."""
    return (t_in + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def conv_transpose1d_out_len(
    t_in: int, k: int, stride: int = 1, pad: int = 0, output_padding: int = 0
) -> int:
    """Output length of ConvTranspose1d (dilation 1)."""
    return (t_in - 1) * stride - 2 * pad + (k - 1) + output_padding + 1


def conv1d(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    stride: int = 1,
    pad: int = 0,
    dilation: int = 1,
    groups: int = 1,
) -> np.ndarray:
    """Conv1d: ``y[o, t] = b[o] + sum_{i in group(o), k} w[o, i, k] * xpad[i, t * stride + k * dilation]``.

    x [Cin, Tin] (zero padded by ``pad`` on both sides), w [Cout, Cin/groups, K],
    b [Cout] or None -> y [Cout, Tout].
    """
    c_in, t_in = x.shape
    c_out, c_in_g, k = w.shape
    if c_in != c_in_g * groups or c_out % groups:
        raise ValueError(f"conv1d: x {x.shape} and w {w.shape} do not match groups={groups}")
    t_out = conv1d_out_len(t_in, k, stride, pad, dilation)
    if t_out <= 0:
        raise ValueError(f"conv1d: input of length {t_in} is too short for kernel {k} (dilation {dilation})")
    xp = np.ascontiguousarray(np.pad(x, ((0, 0), (pad, pad))) if pad else x)
    wg = w.reshape(groups, c_out // groups, c_in_g * k)
    y = np.empty((groups, c_out // groups, t_out), dtype=np.result_type(x, w))
    es = xp.itemsize
    step = max(1, _IM2COL_CHUNK_ELEMS // (c_in * k))
    for s in range(0, t_out, step):
        n = min(step, t_out - s)
        # cols[i, j, t] = xp[i, (s + t) * stride + j * dilation], a view; reshape copies it.
        view = as_strided(xp[:, s * stride :], shape=(c_in, k, n),
                          strides=(xp.strides[0], dilation * es, stride * es), writeable=False)
        cols = view.reshape(groups, c_in_g * k, n)
        y[:, :, s : s + n] = wg @ cols
    y = y.reshape(c_out, t_out)
    if b is not None:
        y += b[:, None]
    return y


def conv_transpose1d(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    stride: int = 1,
    pad: int = 0,
    output_padding: int = 0,
    groups: int = 1,
) -> np.ndarray:
    """ConvTranspose1d: input t adds ``w[i, o, k] * x[i, t]`` to output position ``t * stride + k - pad``.

    x [Cin, Tin], w [Cin, Cout/groups, K], b [Cout] or None -> y [Cout, Tout] with
    Tout = (Tin - 1) stride - 2 pad + K + output_padding; positions past the
    last tap (output_padding) get the bias only.
    """
    c_in, t_in = x.shape
    c_in_w, c_out_g, k = w.shape
    if c_in != c_in_w or c_in % groups:
        raise ValueError(f"conv_transpose1d: x {x.shape} and w {w.shape} do not match groups={groups}")
    c_out = c_out_g * groups
    t_out = conv_transpose1d_out_len(t_in, k, stride, pad, output_padding)
    # z[o, k, t] = sum_i w[i, o, k] x[i, t] within each group: one (batched) GEMM.
    wg = w.reshape(groups, c_in // groups, c_out_g * k).transpose(0, 2, 1)
    z = (wg @ x.reshape(groups, c_in // groups, t_in)).reshape(c_out, k, t_in)
    full = np.zeros((c_out, max((t_in - 1) * stride + k, pad + t_out)), dtype=z.dtype)
    span = stride * (t_in - 1) + 1
    for j in range(k):
        full[:, j : j + span : stride] += z[:, j, :]
    y = full[:, pad : pad + t_out]
    if b is not None:
        y = y + b[:, None]
    return np.ascontiguousarray(y)
