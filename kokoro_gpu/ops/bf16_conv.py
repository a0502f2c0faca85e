"""Conv1d with bf16 operands (the CPU backend's ``fast`` precision), computed directly as bf16 GEMMs.

The same function as ``conv1d(x, w, b, pad=pad, dilation=dilation)`` (stride 1),
with x and w rounded to bf16 and the products summed in float32
(:mod:`kokoro_gpu.ops.bf16`). Direct, not through the Winograd or DFT transforms
of :mod:`kokoro_gpu.ops.fast_conv`: with the GEMM 4 - 5x faster, the transforms'
own passes over the data cost more than the multiplications they save, and
they would add their rounding to bf16's.

The output is made in chunks of columns. Each chunk's input window (the
chunk's columns plus the d (K - 1) halo, zero padded at the ends) is rounded
into a bf16 buffer that stays in cache; the chunk's output starts as the bias
and every tap adds one GEMM of its weights ``[Cout, Cin]`` with the window
shifted by ``k d`` (an address: no im2col copy, which measured slower than
the taps' repeated passes over the output chunk). The chunks are split into
one contiguous range of columns per worker thread.

An input can also come already rounded, as a :class:`BF16Sequence` with the
conv's padding as zero margins (:func:`adain_bf16`, the AdaIN before the
generator's convs, rounds each block of channels while it is in cache): then
the taps' GEMMs read it in place and the float32 sequence is never written.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import partial
from typing import Literal

import numpy as np

from .bf16 import bf16_array, gemm_bf16, to_bf16
from .conv import conv1d_out_len
from .norm import adain_blocks
from .parallel import run_parallel, worker_count

# Output columns of one chunk (measured): with fewer than 256 input channels a tap's GEMM does
# little work per pass over the output chunk, which then has to stay in L2.
_CHUNK_COLUMNS = 1024
_WIDE_CHUNK_COLUMNS = 4096
_WIDE_CHANNELS = 256
# Output columns from which a conv is split across worker threads.
_SPLIT_MIN_COLUMNS = 512
_BF16_BYTES, _F32_BYTES = 2, 4


@dataclass(frozen=True)
class BF16Sequence:
    """A sequence ``[C, T]`` rounded to bf16: uint16 ``bits [C, margin + T + margin]``, zero margins."""

    bits: np.ndarray
    margin: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.bits.shape[0], self.bits.shape[1] - 2 * self.margin


def adain_bf16(
    x: np.ndarray,
    style_gb: np.ndarray,
    margin: int,
    act: Literal["leaky_relu", "snake"] | None = None,
    slope: float = 0.2,
    alpha: np.ndarray | None = None,
) -> BF16Sequence:
    """``adain(x, style_gb, act, slope, alpha)`` (float32 x) rounded to bf16, with ``margin`` zero columns."""
    c, t = x.shape
    bits = np.empty((c, margin + t + margin), dtype=np.uint16)
    bits[:, :margin] = 0
    bits[:, margin + t :] = 0

    def block_out(rows: slice) -> np.ndarray:
        return np.empty((rows.stop - rows.start, t), dtype=np.float32)

    def block_done(rows: slice, block: np.ndarray) -> None:
        to_bf16(block, bits[rows, margin : margin + t], block.view(np.uint32))  # in place: a scratch block

    adain_blocks(x, style_gb, block_out, act, slope, alpha, block_done=block_done)
    return BF16Sequence(bits, margin)


class BF16Conv1d:
    """A stride-1 Conv1d with bf16 weights laid out once; called as ``conv(x) -> y``, float32.

    w [Cout, Cin, K] (PyTorch's layout, weight norm folded), b [Cout] or None;
    x [Cin, T] -> y [Cout, Tout], ``conv1d(x, w, b, pad=pad, dilation=dilation)``
    up to bf16 operand rounding; x float32, or a :class:`BF16Sequence` whose
    margins are the padding.
    """

    def __init__(self, w: np.ndarray, b: np.ndarray | None = None, pad: int = 0, dilation: int = 1) -> None:
        self.c_out, self.c_in, self.k = w.shape
        self.pad, self.dilation = pad, dilation
        self.b = None if b is None else np.ascontiguousarray(b, dtype=np.float32)
        self.w = bf16_array(w.transpose(2, 0, 1))  # [K, Cout, Cin]: one GEMM's weights per tap

    def __call__(self, x: np.ndarray | BF16Sequence) -> np.ndarray:
        c_in, t_in = x.shape
        if c_in != self.c_in:
            raise ValueError(f"conv: x has {c_in} channels, the weights {self.c_in}")
        t_out = conv1d_out_len(t_in, self.k, 1, self.pad, self.dilation)
        if t_out <= 0:
            raise ValueError(f"conv: input of length {t_in} is too short for kernel {self.k} "
                             f"(dilation {self.dilation})")
        if isinstance(x, BF16Sequence):
            if x.margin != self.pad:
                raise ValueError(f"conv: the bf16 input's margins are {x.margin}, the padding {self.pad}")
            columns = partial(self._rounded_columns, x.bits)
        else:
            columns = partial(self._columns, np.ascontiguousarray(x, dtype=np.float32))
        y = np.empty((self.c_out, t_out), dtype=np.float32)
        parts = max(1, min(worker_count(), t_out // _SPLIT_MIN_COLUMNS))
        bounds = np.linspace(0, t_out, parts + 1).astype(int)
        run_parallel([partial(columns, y, int(a), int(b)) for a, b in itertools.pairwise(bounds)])
        return y

    def _chunk(self, y: np.ndarray, s: int, n: int, x_addr: int, ld: int) -> None:
        """Output columns s .. s + n - 1 from bf16 inputs at x_addr (its column s - pad), row stride ld."""
        c_in, c_out, d = self.c_in, self.c_out, self.dilation
        if self.b is not None:
            y[:, s : s + n] = self.b[:, None]
        for j in range(self.k):
            gemm_bf16(c_out, n, c_in, self.w.ctypes.data + _BF16_BYTES * j * c_out * c_in, c_in,
                      x_addr + _BF16_BYTES * j * d, ld, y.ctypes.data + _F32_BYTES * s, y.shape[1],
                      accumulate=self.b is not None or j > 0)

    def _rounded_columns(self, bits: np.ndarray, y: np.ndarray, first: int, last: int) -> None:
        """Output columns ``first`` .. ``last`` - 1 of y from a rounded input with the padding as margins."""
        chunk = self._chunk_columns()
        for s in range(first, last, chunk):
            self._chunk(y, s, min(chunk, last - s), bits.ctypes.data + _BF16_BYTES * s, bits.shape[1])

    def _chunk_columns(self) -> int:
        return _WIDE_CHUNK_COLUMNS if self.c_in >= _WIDE_CHANNELS else _CHUNK_COLUMNS

    def _columns(self, x: np.ndarray, y: np.ndarray, first: int, last: int) -> None:
        """Output columns ``first`` .. ``last`` - 1 of y, chunk by chunk, rounding x's windows."""
        c_in, t_in = x.shape
        halo = self.dilation * (self.k - 1)
        chunk = min(self._chunk_columns(), last - first)
        width = chunk + halo
        window = np.empty((c_in, width), dtype=np.uint16)  # bf16 inputs of one chunk
        scratch = np.empty((c_in, width), dtype=np.uint32)
        for s in range(first, last, chunk):
            n = min(chunk, last - s)
            lo = s - self.pad  # the window holds input samples lo .. lo + n + halo - 1
            start = min(max(-lo, 0), n + halo)  # window columns before and after x are zeros
            end = max(min(t_in - lo, n + halo), start)
            window[:, :start] = 0
            if end > start:
                to_bf16(x[:, lo + start : lo + end], window[:, start:end], scratch[:, : end - start])
            window[:, end : n + halo] = 0
            self._chunk(y, s, n, window.ctypes.data, width)

