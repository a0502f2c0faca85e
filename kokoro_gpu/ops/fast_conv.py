"""Conv1d prepared once at load, computed with fewer multiplications (the CPU backend's hot path).

:func:`kokoro_gpu.ops.conv1d` is the readable definition; :class:`PreparedConv1d`
computes the same function (stride 1, any dilation and padding) by one of:

- ``"gemm"``: im2col and one GEMM, the weight laid out once as ``[Cout, Cin K]``;
- ``"winograd"``: Winograd's minimal filtering F(m, K) (Lavin & Gray, 2016): the
  output is cut into tiles of m samples, each tile's m + K - 1 inputs are mapped
  by B^T onto m + K - 1 points, every point is one GEMM of the transformed
  weights G w [Cout, Cin] with the transformed inputs, and A^T maps the points
  back to the m outputs: (m + K - 1) / (m K) of the direct multiplications;
- ``"fft"``: the same tiling with the real DFT of length L as the transform
  (overlap-save; scipy.fft, which transforms float32 in float32 and takes the
  tiles as a strided view): L / 2 + 1 complex points, each a complex GEMM of
  the kernel's conjugate spectrum; for large K it needs far fewer
  multiplications than the direct form (K = 11, L = 64: ~4x fewer) and keeps
  float32 rounding at the direct GEMM's level.

Dilation d is handled exactly: output sample ``r + d t`` only reads inputs
``r + d (t + i)``, so the d phases are d independent undilated convolutions,
tiled side by side as extra GEMM columns. The tiles, the GEMMs and the
inverse transform run in chunks of columns to bound memory on long inputs.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Literal

import numpy as np
import scipy.fft
from numpy.lib.stride_tricks import as_strided

from .conv import conv1d, conv1d_out_len
from .parallel import run_parallel, worker_count

Method = Literal["gemm", "winograd", "fft"]

# Elements of one chunk of input tiles: bounds the transform-domain buffers
# (a few times this) on long generator sequences while keeping GEMMs large.
_TILE_CHUNK_ELEMS = 1 << 21
# Output channels from which a "gemm" layer is split across worker threads.
_SPLIT_MIN_CHANNELS = 256
# Interpolation points of Winograd F(6, 3) (plus the point at infinity): the
# usual small, exactly representable set, accurate in float32.
_WINOGRAD_POINTS = {3: (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5)}


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


def choose_method(k: int, c_in: int, c_out: int) -> Method:
    """The method with the fewest operations for this shape (measured on AVX2/AVX-512 CPUs)."""
    if k == 3 and min(c_in, c_out) >= 64:
        return "winograd"
    if k >= 7 and min(c_in, c_out) >= 64:
        return "fft"
    return "gemm"


def _fft_length(k: int) -> int:
    """Tile length of the overlap-save DFT: ~5 K, a power of two (64 for K = 11, 32 for K = 7)."""
    return 1 << max(4, math.ceil(math.log2(4 * k)))


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
        self.b = None if b is None else np.ascontiguousarray(b[:, None])
        self.method = method or choose_method(self.k, self.c_in, self.c_out)
        w64 = w.astype(np.float64)
        if self.method == "gemm":
            # Large layers are split by output channels, one part per worker thread.
            parts = worker_count() if self.c_out >= _SPLIT_MIN_CHANNELS else 1
            self.w_parts = [np.ascontiguousarray(p) for p in np.array_split(w, parts)]
            return
        if self.method == "winograd":
            self.m = 6 if self.k == 3 else 2
            points = _WINOGRAD_POINTS[self.k]
            b_t, g, a_t = winograd_matrices(self.m, self.k, points)
            self.n = self.m + self.k - 1
            self.forward_t = b_t  # [n, n]
            self.inverse_t = a_t  # [m, n]
            point_w = np.einsum("pi,oci->poc", g, w64)  # [n, Cout, Cin]
        elif self.method == "fft":
            self.n = _fft_length(self.k)
            self.m = self.n - self.k + 1
            # Correlation: the tile's spectrum times the conjugate spectrum of the kernel.
            spec = np.conj(np.fft.rfft(w64, n=self.n, axis=-1)).transpose(2, 0, 1)  # [bins, Cout, Cin]
            self.point_w = np.ascontiguousarray(spec, dtype=np.result_type(self.dtype, np.complex64))
            return
        else:
            raise ValueError(f"unknown conv method {method!r}")
        self.forward_t = np.ascontiguousarray(self.forward_t, dtype=self.dtype)
        self.inverse_t = np.ascontiguousarray(self.inverse_t, dtype=self.dtype)
        self.point_w = np.ascontiguousarray(point_w, dtype=self.dtype)

    def _to_points(self, tiles: np.ndarray) -> np.ndarray:
        """Input tiles [n, Cin, cols...] -> their transform [points, Cin, cols]."""
        points = self.point_w.shape[0]
        if self.method == "fft":
            return scipy.fft.rfft(tiles, axis=0).reshape(points, self.c_in, -1)
        return (self.forward_t @ tiles.reshape(self.n, -1)).reshape(points, self.c_in, -1)

    def _from_points(self, out: np.ndarray) -> np.ndarray:
        """Products [points, Cout, cols] -> the tiles' m outputs [m, Cout, cols]."""
        if self.method == "fft":
            return scipy.fft.irfft(out, n=self.n, axis=0)[: self.m]
        return (self.inverse_t @ out.reshape(out.shape[0], -1)).reshape(self.m, self.c_out, -1)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.method == "gemm":
            parts = run_parallel([partial(conv1d, x, w, pad=self.pad, dilation=self.dilation)
                                  for w in self.w_parts])
            y = parts[0] if len(parts) == 1 else np.concatenate(parts)
        else:
            y = self._tiled(x)
        if self.b is not None:
            y += self.b
        return y

    def _tiled(self, x: np.ndarray) -> np.ndarray:
        c_in, t_in = x.shape
        if c_in != self.c_in:
            raise ValueError(f"conv: x has {c_in} channels, the weights {self.c_in}")
        d, m, n = self.dilation, self.m, self.n
        t_out = conv1d_out_len(t_in, self.k, 1, self.pad, d)
        if t_out <= 0:
            raise ValueError(f"conv: input of length {t_in} is too short for kernel {self.k} (dilation {d})")
        n_tiles = math.ceil(math.ceil(t_out / d) / m)  # tiles of m outputs per phase
        xp = np.zeros((c_in, d * (n_tiles * m + self.k - 1)), dtype=self.dtype)
        xp[:, self.pad : self.pad + t_in] = x
        y = np.empty((self.c_out, n_tiles * m * d), dtype=self.dtype)
        es = xp.itemsize
        step = max(1, _TILE_CHUNK_ELEMS // (c_in * n * d))
        for s in range(0, n_tiles, step):
            nt = min(step, n_tiles - s)
            # tiles[j, i, u, r] = xp[i, r + d ((s + u) m + j)]: tile input j of phase r, tile s + u.
            tiles = as_strided(xp[:, s * m * d :], shape=(n, c_in, nt, d),
                               strides=(d * es, xp.strides[0], m * d * es, es), writeable=False)
            yt = self._from_points(self.point_w @ self._to_points(tiles))  # [m, Cout, cols]
            y[:, s * m * d : (s + nt) * m * d].reshape(self.c_out, nt, m, d)[...] = (
                yt.reshape(m, self.c_out, nt, d).transpose(1, 2, 0, 3))
        return y[:, :t_out]
