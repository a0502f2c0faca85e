"""ConvTranspose1d prepared once at load, computed polyphase (the generator's upsampling layers).

:func:`kokoro_gpu.ops.conv_transpose1d` is the readable definition (one GEMM
onto every tap, then an overlap-add of K shifted rows). With stride s, output
sample ``u = q s + r - pad`` (phase r) only receives taps ``k = r + s j`` from
inputs ``q - j``, so every phase is an ordinary convolution of J = ceil(K / s)
taps: all s phases are one GEMM of the weights laid out as ``[s Cout, J Cin]``
with the J shifted copies of the input (a strided view), and the phases are
interleaved into time order. That writes every output once, instead of K
passes over an output of K times the input's columns, and it runs in chunks
of columns that stay in cache on long sequences.
"""

from __future__ import annotations

import itertools
import math
from functools import partial

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .conv import conv_transpose1d_out_len
from .parallel import run_parallel, worker_count

# Output elements of one chunk: the GEMM's result and its interleaved copy stay in cache.
_CHUNK_ELEMS = 1 << 18


class PreparedConvTranspose1d:
    """A ConvTranspose1d (groups 1) whose weights are laid out once by phase; ``conv(x) -> y``.

    w [Cin, Cout, K] (PyTorch's layout), b [Cout] or None; x [Cin, T] -> y [Cout, Tout],
    the same function as ``conv_transpose1d(x, w, b, stride, pad, output_padding)``.
    """

    def __init__(
        self, w: np.ndarray, b: np.ndarray | None, stride: int, pad: int = 0, output_padding: int = 0
    ) -> None:
        self.c_in, self.c_out, self.k = w.shape
        self.stride, self.pad, self.output_padding = stride, pad, output_padding
        self.taps = math.ceil(self.k / stride)
        # w_phase[r, o, jj, i] = w[i, o, r + s (J - 1 - jj)]: tap jj reads input q - (J - 1 - jj).
        padded = np.zeros((self.c_in, self.c_out, self.taps * stride), dtype=w.dtype)
        padded[:, :, : self.k] = w
        by_tap = padded.reshape(self.c_in, self.c_out, self.taps, stride)[:, :, ::-1, :]
        self.w_phase = np.ascontiguousarray(by_tap.transpose(3, 1, 2, 0)).reshape(
            stride * self.c_out, self.taps * self.c_in)
        self.b = None if b is None else np.ascontiguousarray(np.tile(b, stride)[:, None], dtype=w.dtype)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        c_in, t_in = x.shape
        if c_in != self.c_in:
            raise ValueError(f"conv_transpose: x has {c_in} channels, the weights {self.c_in}")
        s, taps = self.stride, self.taps
        t_out = conv_transpose1d_out_len(t_in, self.k, s, self.pad, self.output_padding)
        first = self.pad // s  # the input index q of output sample 0's phase block
        n_q = (t_out - 1 + self.pad) // s - first + 1
        # xp[i, taps - 1 + m] = x[i, first + m], zero outside x.
        xp = np.zeros((c_in, n_q + taps - 1), dtype=x.dtype)
        lo, hi = max(0, first - taps + 1), min(t_in, first + n_q)
        xp[:, lo - first + taps - 1 : hi - first + taps - 1] = x[:, lo:hi]
        full = np.empty((self.c_out, n_q, s), dtype=np.result_type(x, self.w_phase))
        # The columns are independent: one contiguous range of them per worker thread.
        bounds = np.linspace(0, n_q, min(worker_count(), n_q) + 1).astype(int)
        run_parallel([partial(self._columns, xp, full, int(a), int(b))
                      for a, b in itertools.pairwise(bounds)])
        start = self.pad - first * s
        return full.reshape(self.c_out, n_q * s)[:, start : start + t_out]

    def _columns(self, xp: np.ndarray, full: np.ndarray, first: int, last: int) -> None:
        """Input columns ``first`` .. ``last`` - 1 of xp into ``full [Cout, n_q, s]``, chunk by chunk."""
        s, taps, c_in = self.stride, self.taps, self.c_in
        es = xp.itemsize
        step = max(1, _CHUNK_ELEMS // (self.c_out * s))
        for q0 in range(first, last, step):
            n = min(step, last - q0)
            # cols[jj, i, m] = xp[i, q0 + m + jj]: the J shifted inputs, a view; reshape copies it.
            cols = as_strided(xp[:, q0:], shape=(taps, c_in, n), strides=(es, xp.strides[0], es),
                              writeable=False).reshape(taps * c_in, n)
            z = self.w_phase @ cols  # [s Cout, n], rows by phase then channel
            if self.b is not None:
                z += self.b
            full[:, q0 : q0 + n, :] = z.reshape(s, self.c_out, n).transpose(1, 2, 0)
