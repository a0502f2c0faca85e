"""Conv1d with bf16 operands (the CPU backend's ``fast`` precision), computed directly as bf16 GEMMs.

The same function as ``conv1d(x, w, b, pad=pad, dilation=dilation)`` (stride 1),
with x and w rounded to bf16 and the products summed in float32
(:mod:`kokoro_gpu.ops.bf16`). Direct, not through the Winograd or DFT transforms
of :mod:`kokoro_gpu.ops.fast_conv`: with the GEMM 4 - 5x faster, the transforms'
own passes over the data cost more than the multiplications they save, and
they would add their rounding to bf16's.

The output is made in chunks of columns. Each chunk's input window (the
chunk's columns plus the d (K - 1) halo, zero padded at the ends) is rounded
into a bf16 buffer that stays in cache, then

- narrow inputs: copied out as im2col rows ``[Cin K, n]``, one GEMM with the
  weights laid out as ``[Cout, Cin K]``;
- wide inputs (and K = 1): one GEMM per tap on the window shifted by
  ``k d`` (an address, no copy), accumulating into the output: each tap's
  reduction over Cin is long enough on its own, and no im2col copy is made.

The chunks are split into one contiguous range of columns per worker thread.
"""

from __future__ import annotations

import itertools
from functools import partial

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .bf16 import bf16_array, gemm_bf16, to_bf16
from .conv import conv1d_out_len
from .parallel import run_parallel, worker_count

# Output columns of one chunk: the bf16 window and the im2col rows stay in the caches.
_CHUNK_COLUMNS = 2048
# Input channels from which the taps are separate GEMMs instead of one im2col GEMM (measured).
_TAPS_MIN_CHANNELS = 256
# Output columns from which a conv is split across worker threads.
_SPLIT_MIN_COLUMNS = 512
_BF16_BYTES, _F32_BYTES = 2, 4


class BF16Conv1d:
    """A stride-1 Conv1d with bf16 weights laid out once; called as ``conv(x) -> y``, float32.

    w [Cout, Cin, K] (PyTorch's layout, weight norm folded), b [Cout] or None;
    x [Cin, T] -> y [Cout, Tout], ``conv1d(x, w, b, pad=pad, dilation=dilation)``
    up to bf16 operand rounding.
    """

    def __init__(self, w: np.ndarray, b: np.ndarray | None = None, pad: int = 0, dilation: int = 1) -> None:
        self.c_out, self.c_in, self.k = w.shape
        self.pad, self.dilation = pad, dilation
        self.b = None if b is None else np.ascontiguousarray(b, dtype=np.float32)
        self.by_taps = self.c_in >= _TAPS_MIN_CHANNELS or self.k == 1
        if self.by_taps:
            self.w = bf16_array(w.transpose(2, 0, 1))  # [K, Cout, Cin]
        else:
            self.w = bf16_array(w.reshape(self.c_out, self.c_in * self.k))  # [Cout, Cin K], im2col's order

    def __call__(self, x: np.ndarray) -> np.ndarray:
        c_in, t_in = x.shape
        if c_in != self.c_in:
            raise ValueError(f"conv: x has {c_in} channels, the weights {self.c_in}")
        t_out = conv1d_out_len(t_in, self.k, 1, self.pad, self.dilation)
        if t_out <= 0:
            raise ValueError(f"conv: input of length {t_in} is too short for kernel {self.k} "
                             f"(dilation {self.dilation})")
        x = np.ascontiguousarray(x, dtype=np.float32)
        y = np.empty((self.c_out, t_out), dtype=np.float32)
        parts = max(1, min(worker_count(), t_out // _SPLIT_MIN_COLUMNS))
        bounds = np.linspace(0, t_out, parts + 1).astype(int)
        run_parallel([partial(self._columns, x, y, int(a), int(b)) for a, b in itertools.pairwise(bounds)])
        return y

    def _columns(self, x: np.ndarray, y: np.ndarray, first: int, last: int) -> None:
        """Output columns ``first`` .. ``last`` - 1 of y, chunk by chunk."""
        c_in, c_out, k, d = self.c_in, self.c_out, self.k, self.dilation
        t_in, t_out = x.shape[1], y.shape[1]
        halo = d * (k - 1)
        chunk = min(_CHUNK_COLUMNS, last - first)
        width = chunk + halo
        window = np.empty((c_in, width), dtype=np.uint16)  # bf16 inputs of one chunk
        scratch = np.empty((c_in, width), dtype=np.uint32)
        cols = None if self.by_taps else np.empty((c_in, k, chunk), dtype=np.uint16)
        w_addr, y_addr, window_addr = self.w.ctypes.data, y.ctypes.data, window.ctypes.data
        for s in range(first, last, chunk):
            n = min(chunk, last - s)
            lo = s - self.pad  # the window holds input samples lo .. lo + n + halo - 1
            start = min(max(-lo, 0), n + halo)  # window columns before and after x are zeros
            end = max(min(t_in - lo, n + halo), start)
            window[:, :start] = 0
            if end > start:
                to_bf16(x[:, lo + start : lo + end], window[:, start:end], scratch[:, : end - start])
            window[:, end : n + halo] = 0
            if self.b is not None:
                y[:, s : s + n] = self.b[:, None]
            accumulate = self.b is not None
            out_addr = y_addr + _F32_BYTES * s
            if self.by_taps:
                for j in range(k):
                    gemm_bf16(c_out, n, c_in, w_addr + _BF16_BYTES * j * c_out * c_in, c_in,
                              window_addr + _BF16_BYTES * j * d, width, out_addr, t_out, accumulate or j > 0)
                continue
            # cols[i, j, t] = window[i, t + j d]: the im2col rows, chunk wide, of which n are used.
            taps = as_strided(window, shape=(c_in, k, n), strides=(window.strides[0], d * _BF16_BYTES,
                                                                   _BF16_BYTES), writeable=False)
            cols[:, :, :n] = taps
            gemm_bf16(c_out, n, c_in * k, w_addr, c_in * k, cols.ctypes.data, chunk, out_addr, t_out,
                      accumulate)

