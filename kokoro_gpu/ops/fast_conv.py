"""Conv1d prepared once at load, computed with fewer multiplications (the CPU backend's hot path).

:func:`kokoro_gpu.ops.conv1d` is the readable definition; :class:`PreparedConv1d`
computes the same function (stride 1, any dilation and padding) by one of:

- ``"gemm"``: im2col and one GEMM, the weight laid out once as ``[Cout, Cin K]``;
- a fast transform (Lavin & Gray, 2016): the output is cut into tiles of m
  samples; each tile's n = m + K - 1 inputs are mapped by a matrix B^T onto P
  points, every point is one GEMM of the transformed weights ``(G w)[p]``
  [Cout, Cin] with the transformed inputs, and A^T maps the P products back
  to the m outputs, so that ``y = A^T ((G w) * (B^T x))`` tile by tile:

  - ``"winograd"``: Winograd's minimal filtering F(6, 3), P = n = 8 points:
    8 / 18 of the direct multiplications for K = 3;
  - ``"dft"``: overlap-save with the real DFT of length n as the transform, each
    complex product of a bin done as three real ones (Gauss's trick, so every
    point is a real GEMM like Winograd's): P = 3 n / 2 - 1 points, for K = 11
    and n = 32 a fifth of the direct multiplications, with float32 rounding
    at the direct GEMM's level (the DFT is orthogonal up to scale). B^T and
    A^T are n x n: the third product's input (a sum) and the three products'
    combination are elementwise steps on the points (``expand_points``,
    ``fold_products``), cheaper than the GEMM rows they replace.

In NumPy (:func:`forward_tiles`, :func:`inverse_tiles`: the readable
references) both transforms run as GEMMs on contiguous data: the tiles are
copied out as rows [Cin tiles, n] (an overlapping strided view, read in runs
of n samples), ``B^T`` multiplies them transposed, so the points come out as
[P, Cin tiles] ready for the per-point GEMMs, and ``A^T`` multiplies the
products transposed, so the outputs come out as [Cout tiles, m], already in
time order. No step transposes data in memory, which is what costs most on
long sequences. In float32 with the CPU kernels built (:mod:`.kernels`), each
transform with its elementwise step, the bias and the dilation's interleave
is one pass of native/cpu/conv_transform.cpp instead, which writes neither
the tiles nor the outputs [Cout tiles, m] as arrays.

An input can also be written straight into the conv's padded buffer
(:meth:`PreparedConv1d.padded_input`: the AdaIN before each of the
generator's convs writes its result there), which saves allocating and
copying the padded sequence.

Dilation d is handled exactly: output sample ``r + d t`` only reads inputs
``r + d (t + i)``, so the d phases are d independent undilated convolutions,
tiled side by side as extra GEMM columns. Everything runs in chunks of tiles
that bound memory (and stay in cache) on long inputs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import partial
from typing import Literal

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import kernels
from .conv import conv1d, conv1d_out_len
from .parallel import run_parallel, worker_count

Method = Literal["gemm", "winograd", "dft"]

# Output columns (tiles x m x dilation) of one chunk: the points of a chunk
# (P x C of them per tile) stay within the caches while keeping GEMMs large.
_CHUNK_COLUMNS = 1 << 12
# Tiles below which a conv's tile range is not split across worker threads: parts of fewer tiles
# run GEMMs of few columns (a range split in two: 1.34x the work at 90 tiles, 1.08x at 387, 1.00x
# at 536, one core), and where convs are that short the generator's other branches keep the second
# core busy.
_MIN_PART_TILES = 256
# Output channels from which a "gemm" layer is split across worker threads.
_SPLIT_MIN_CHANNELS = 256
# Interpolation points of Winograd F(6, 3) (plus the point at infinity): the
# usual small, exactly representable set, accurate in float32.
_WINOGRAD_POINTS = {3: (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)}
# DFT tile length per kernel size: the fewest multiplications counting the
# transforms' (B^T and A^T grow with n, the points per output shrink).
_DFT_LENGTH = {7: 32, 11: 32}


@dataclass(frozen=True)
class PaddedInput:
    """A conv's input ``[Cin, T]`` in the conv's padded buffer: write ``interior``, zero elsewhere."""

    buffer: np.ndarray
    interior: np.ndarray


def winograd_matrices(m: int, r: int, points: tuple[float, ...]) -> tuple[np.ndarray, ...]:
    """(B^T [n, n], G [n, r], A^T [m, n]) of F(m, r), n = m + r - 1, from n - 1 finite points and infinity.

    ``y[j] = sum_i w[i] x[j + i]`` for j < m equals ``A^T ((G w) * (B^T x))``.
    A^T evaluates the output polynomial at the points and G the kernel's
    Lagrange-scaled values; B^T is the unique solution of the bilinear identity
    ``sum_p A^T[j, p] G[p, i] B^T[p, l] = [l == j + i]`` (float64).
    """
    n = m + r - 1
    if len(points) != n - 1:
        raise ValueError(f"F({m}, {r}) needs {n - 1} finite points, got {len(points)}")
    a = np.asarray(points, dtype=np.float64)
    a_t = np.zeros((m, n))
    g = np.zeros((n, r))
    for p, ap in enumerate(a):
        scale = np.prod([ap - aq for q, aq in enumerate(a) if q != p])
        a_t[:, p] = ap ** np.arange(m)
        g[p] = ap ** np.arange(r) / scale
    a_t[m - 1, n - 1] = 1.0
    g[n - 1, r - 1] = 1.0
    system = np.einsum("jp,pi->jip", a_t, g).reshape(m * r, n)
    target = np.zeros((m, r, n))
    for j in range(m):
        for i in range(r):
            target[j, i, j + i] = 1.0
    b_t = np.linalg.lstsq(system, target.reshape(m * r, n), rcond=None)[0]
    return b_t, g, a_t


def dft_matrices(n: int, r: int) -> tuple[np.ndarray, ...]:
    """(B^T [n, n], G [P, r], A^T [m, n]) of overlap-save correlation with the real DFT of length n.

    ``y[j] = sum_i w[i] x[j + i]`` for j < m = n - r + 1 equals
    ``A^T fold((G w) * expand(B^T x))`` (:func:`expand_points`, :func:`fold_products`).
    B^T gives bins 0 and n / 2 (real), then the real parts xr and the
    imaginary parts xi of bins 1 .. n / 2 - 1; ``expand`` appends xr + xi.
    Each bin's product with the kernel's conjugate spectrum ``vr + i vi`` is
    taken as three real ones (Gauss's trick): ``t1 = vr xr``, ``t2 = vi xi``,
    ``t3 = (vr + vi)(xr + xi)``, so P = 3 n / 2 - 1; ``fold`` turns them into
    the real part ``t1 - t2`` and minus the imaginary part ``t1 + t2 - t3``,
    which A^T maps back as the inverse real DFT. float64.
    """
    m = n - r + 1
    bins = np.arange(1, n // 2)[:, None]
    ends = np.array([[0], [n // 2]])

    def cos(b: np.ndarray, length: int) -> np.ndarray:
        return np.cos(2 * np.pi * b * np.arange(length) / n)

    def sin(b: np.ndarray, length: int) -> np.ndarray:
        return np.sin(2 * np.pi * b * np.arange(length) / n)

    b_t = np.concatenate([cos(ends, n), cos(bins, n), -sin(bins, n)])
    # The kernel's conjugate spectrum: vr = sum w cos, vi = sum w sin.
    g = np.concatenate([cos(ends, r), cos(bins, r), sin(bins, r), cos(bins, r) + sin(bins, r)])
    # (2 / n) Re(y e^{i theta}) = (2 / n) (yr cos theta - yi sin theta); bins 0 and n / 2 count once.
    a_t = np.concatenate([cos(ends, m) / n, 2 / n * cos(bins, m), 2 / n * sin(bins, m)]).T
    return b_t, g, a_t


def expand_points(points: np.ndarray, pairs: int) -> None:
    """Set the last ``pairs`` rows of ``points`` to the sums of the two ``pairs``-row blocks before them."""
    if pairs:
        lead = points.shape[0] - 3 * pairs
        np.add(points[lead : lead + pairs], points[lead + pairs : lead + 2 * pairs], out=points[-pairs:])


def fold_products(products: np.ndarray, pairs: int) -> np.ndarray:
    """Blocks t1, t2, t3 of ``pairs`` rows each (after the leading rows) -> t1 - t2, t1 + t2 - t3, in place.

    Returns the rows that A^T reads (all of them when ``pairs`` is 0).
    """
    if not pairs:
        return products
    lead = products.shape[0] - 3 * pairs
    t1, t2, t3 = (products[lead + i * pairs : lead + (i + 1) * pairs] for i in range(3))
    np.subtract(t1, t3, out=t3)
    np.subtract(t1, t2, out=t1)
    np.add(t3, t2, out=t2)
    return products[: lead + 2 * pairs]


def forward_tiles(xp: np.ndarray, forward_t: np.ndarray, pairs: int, x_points: np.ndarray, m: int,
                  dilation: int) -> None:
    """``x_points`` [P, Cin, d nt] = B^T of the tiles of ``xp`` [Cin, ...] (from a chunk's first sample).

    Phase r's tile u, column r nt + u of the points, reads inputs
    ``xp[:, r + d (u m + j)]`` for j < n; the last ``pairs`` rows are the Gauss
    sums (:func:`expand_points`). In float32 with the CPU kernels built (n 8,
    16 or 32), one pass of native/cpu/conv_transform.cpp, which sums in
    another order than the GEMM: equal to float32 rounding.
    """
    c_in, n, d = xp.shape[0], forward_t.shape[1], dilation
    nt = x_points.shape[2] // d
    native = kernels.native
    if native is not None and x_points.dtype == np.float32 and n in (8, 16, 32):
        native.conv_forward_tiles(xp, forward_t, x_points, pairs, m, d)
        return
    es = xp.itemsize
    # tiles[i, r, u, j] = xp[i, r + d (u m + j)]: tile input j of phase r, tile u.
    tiles = as_strided(xp, shape=(c_in, d, nt, n), strides=(xp.strides[0], es, m * d * es, d * es),
                       writeable=False)
    rows = x_points.reshape(len(x_points), c_in * d * nt)
    np.matmul(forward_t, tiles.reshape(c_in * d * nt, n).T, out=rows[:n])
    expand_points(rows, pairs)


def inverse_tiles(products: np.ndarray, pairs: int, inverse_t: np.ndarray, b: np.ndarray | None,
                  dst: np.ndarray, dilation: int) -> None:
    """``dst`` [Cout, nt m d] = A^T of the folded ``products`` [P, Cout, d nt] plus ``b``, in time order.

    Phase r's tile u is column r nt + u of the products; its sample j is output
    r + d (u m + j). ``products`` is scratch (NumPy folds the Gauss blocks in
    place). In float32 with the CPU kernels built (m up to 32), one pass of
    native/cpu/conv_transform.cpp, which sums in another order than the GEMM:
    equal to float32 rounding.
    """
    c_out, m, d = products.shape[1], inverse_t.shape[1], dilation
    nt = products.shape[2] // d
    native = kernels.native
    if native is not None and products.dtype == np.float32 and m <= native.conv_max_tile_outputs:
        native.conv_inverse_tiles(products, inverse_t, b, dst, pairs, d)
        return
    folded = fold_products(products, pairs)
    out = folded.reshape(len(folded), c_out * d * nt).T @ inverse_t  # [Cout d nt, m]
    if b is not None:
        out.reshape(c_out, -1)[...] += b[:, None]
    if d == 1:
        dst[...] = out.reshape(c_out, nt * m)
    else:  # phase r's sample j of tile u is output r + d (u m + j)
        dst.reshape(c_out, nt, m, d)[...] = out.reshape(c_out, d, nt, m).transpose(0, 2, 3, 1)


def choose_method(k: int, c_in: int, c_out: int) -> Method:
    """The method with the fewest operations for this shape (measured on AVX2/AVX-512 CPUs)."""
    if k == 3 and min(c_in, c_out) >= 64:
        return "winograd"
    if k in _DFT_LENGTH and min(c_in, c_out) >= 64:
        return "dft"
    return "gemm"


class PreparedConv1d:
    """A stride-1 Conv1d whose weights are laid out once for ``method``; called as ``conv(x) -> y``.

    w [Cout, Cin, K] (PyTorch's layout, weight norm folded), b [Cout] or None;
    x [Cin, T] -> y [Cout, Tout] in the weights' dtype, the same function as
    ``conv1d(x, w, b, pad=pad, dilation=dilation)``.
    """

    def __init__(
        self,
        w: np.ndarray,
        b: np.ndarray | None = None,
        pad: int = 0,
        dilation: int = 1,
        method: Method | None = None,
    ) -> None:
        self.c_out, self.c_in, self.k = w.shape
        self.dtype = w.dtype
        self.pad, self.dilation = pad, dilation
        self.b = None if b is None else np.ascontiguousarray(b, dtype=w.dtype)
        self.method = method or choose_method(self.k, self.c_in, self.c_out)
        if self.method == "gemm":
            # Large layers are split by output channels, one part per worker thread.
            parts = worker_count() if self.c_out >= _SPLIT_MIN_CHANNELS else 1
            self.w_parts = [np.ascontiguousarray(p) for p in np.array_split(w, parts)]
            return
        if self.method == "winograd":
            b_t, g, a_t = winograd_matrices(6, self.k, _WINOGRAD_POINTS[self.k])
        elif self.method == "dft":
            b_t, g, a_t = dft_matrices(_DFT_LENGTH.get(self.k, 1 << math.ceil(math.log2(3 * self.k))), self.k)
        else:
            raise ValueError(f"unknown conv method {method!r}")
        self.m, self.n = a_t.shape[0], b_t.shape[1]
        self.pairs = g.shape[0] - b_t.shape[0]  # the DFT's Gauss points; none for Winograd
        self.forward_t = np.ascontiguousarray(b_t, dtype=self.dtype)  # [P - pairs, n]
        self.inverse_t = np.ascontiguousarray(a_t.T, dtype=self.dtype)  # [P - pairs, m]
        self.point_w = np.ascontiguousarray(np.einsum("pi,oci->poc", g, w.astype(np.float64)),
                                            dtype=self.dtype)  # [P, Cout, Cin]

    def padded_input(self, t_in: int) -> PaddedInput:
        """A buffer for an input of length ``t_in``: its margins zeroed, its interior left to the caller."""
        if self.method == "gemm":
            length = t_in + 2 * self.pad
        else:
            t_out = conv1d_out_len(t_in, self.k, 1, self.pad, self.dilation)
            if t_out <= 0:
                raise ValueError(f"conv: input of length {t_in} is too short for kernel {self.k} "
                                 f"(dilation {self.dilation})")
            length = self.dilation * (self._tiles(t_out) * self.m + self.k - 1)
        buffer = np.empty((self.c_in, length), dtype=self.dtype)
        buffer[:, : self.pad] = 0
        buffer[:, self.pad + t_in :] = 0
        return PaddedInput(buffer, buffer[:, self.pad : self.pad + t_in])

    def _tiles(self, t_out: int) -> int:
        """Tiles of m outputs per phase."""
        return math.ceil(math.ceil(t_out / self.dilation) / self.m)

    def __call__(self, x: np.ndarray | PaddedInput) -> np.ndarray:
        if self.method != "gemm":
            return self._tiled(x)
        # conv1d pads an array itself; a padded input holds its margins already.
        source, pad = (x.buffer, 0) if isinstance(x, PaddedInput) else (x, self.pad)
        parts = run_parallel([partial(conv1d, source, w, pad=pad, dilation=self.dilation)
                              for w in self.w_parts])
        y = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if self.b is not None:
            y += self.b[:, None]
        return y

    def _tiled(self, x: np.ndarray | PaddedInput) -> np.ndarray:
        c_in, t_in = x.interior.shape if isinstance(x, PaddedInput) else x.shape
        if c_in != self.c_in:
            raise ValueError(f"conv: x has {c_in} channels, the weights {self.c_in}")
        d, m, c_out = self.dilation, self.m, self.c_out
        if not isinstance(x, PaddedInput):
            padded = self.padded_input(t_in)
            padded.interior[...] = x
            x = padded
        xp = x.buffer
        t_out = conv1d_out_len(t_in, self.k, 1, self.pad, d)
        n_tiles = self._tiles(t_out)
        y = np.empty((c_out, n_tiles * m * d), dtype=self.dtype)
        # The tiles are independent: one contiguous range of them per worker thread, if long enough.
        parts = max(1, min(worker_count(), n_tiles * d // _MIN_PART_TILES))
        bounds = np.linspace(0, n_tiles, parts + 1).astype(int)
        run_parallel([partial(self._tile_range, xp, y, int(a), int(b))
                      for a, b in itertools.pairwise(bounds)])
        return y[:, :t_out]

    def _tile_range(self, xp: np.ndarray, y: np.ndarray, first: int, last: int) -> None:
        """Tiles ``first`` .. ``last`` - 1 of padded input xp into their columns of y, chunk by chunk."""
        d, m, c_in = self.dilation, self.m, self.c_in
        points = self.point_w.shape[0]
        step = max(1, _CHUNK_COLUMNS // (m * d))
        for s in range(first, last, step):
            nt = min(step, last - s)
            x_points = np.empty((points, c_in, d * nt), dtype=self.dtype)
            forward_tiles(xp[:, s * m * d :], self.forward_t, self.pairs, x_points, m, d)
            products = self.point_w @ x_points  # [P, Cout, d nt]
            inverse_tiles(products, self.pairs, self.inverse_t, self.b, y[:, s * m * d : (s + nt) * m * d], d)
