"""Shared helpers of the CUDA op tests (tests/test_native_ops_*.py).

Tolerances follow float32 rounding (unit roundoff 6e-8): pure data movement is exact; pointwise
maths within 1e-6 (libm vs CUDA ulp differences, fused multiply-adds); reductions within 1e-5 up
to ~1000 terms and 3e-5 beyond (error growth ~ sqrt(n) u with headroom); recurrences and the
exp/atan2 spectral paths get the looser bound where noted. Errors are normwise: max |gpu - ref|
over max |ref|.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kokoro_gpu.backends import cuda_state

SHORT_REDUCTION_TOL = 1e-5  # up to ~1000 terms per output
LONG_REDUCTION_TOL = 3e-5  # longer reductions (e.g. 1090 channels x 3 taps)
POINTWISE_TOL = 1e-6


def _load_native_ops() -> Any:
    state = cuda_state()
    if not state.usable:
        pytest.skip(f"CUDA unavailable: {state.reason}", allow_module_level=True)
    if not hasattr(state.native, "ops"):
        pytest.skip(
            "the native module was built without its test bindings "
            "(-Ccmake.define.KOKORO_OPS_BINDINGS=ON builds them)",
            allow_module_level=True,
        )
    return state.native.ops


gpu = _load_native_ops()


def f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def f64(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.asarray(a, dtype=np.float64)


def rel_error(got: np.ndarray, want: np.ndarray, scale: float | None = None) -> float:
    """max |got - want| / scale, scale defaulting to max |want| (0 when both are zero)."""
    if not want.size:
        return 0.0
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    scale = float(np.max(np.abs(want))) if scale is None else scale
    return err / scale if scale > 0 else err


def check(name: str, got: np.ndarray, want: np.ndarray, tol: float, scale: float | None = None) -> None:
    """Shape, no NaN left from the poisoning, and the normwise relative error within tol."""
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    assert np.all(np.isfinite(got)), f"{name}: non-finite output (unwritten element?)"
    err = rel_error(got, np.asarray(want, dtype=np.float64), scale)
    print(f"[native-ops] {name}: max rel err {err:.2e} (tol {tol:.0e})")
    assert err <= tol, f"{name}: max relative error {err:.3e} > {tol:.0e}"


def reduction_tol(n: int) -> float:
    return SHORT_REDUCTION_TOL if n <= 1024 else LONG_REDUCTION_TOL


# TF32 / FP16 round each operand to 11 significant bits: the normwise error of
# a long random dot product lands near 3e-4.
HALF_OPERAND_TOL = 1e-3


def round_half(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(np.float64)


def check_partials(y: np.ndarray, parts: np.ndarray) -> None:
    """Statistics partials of y [C, T] as a conv hands them on: they tile the time axis in
    order, alike for every channel, each with its piece's count, sum (within 1e-6 of the
    piece's absolute sum: fp32 sums) and squared deviations about its own mean (1e-5)."""
    c_out, t_out = y.shape
    assert parts.shape[0] == c_out and parts.shape[1] >= 1 and parts.shape[2] == 3
    counts = parts[:, :, 0]
    assert np.all(counts == counts[0]) and np.all(counts >= 1) and counts[0].sum() == t_out
    lengths = counts[0].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    y64 = f64(y)
    sums = np.add.reduceat(y64, starts, axis=1)
    abs_sums = np.add.reduceat(np.abs(y64), starts, axis=1)
    assert np.all(np.abs(parts[:, :, 1] - sums) <= 1e-6 * abs_sums)
    piece_means = np.repeat(sums / counts, lengths, axis=1)
    m2 = np.add.reduceat((y64 - piece_means) ** 2, starts, axis=1)
    np.testing.assert_allclose(parts[:, :, 2], m2, rtol=1e-5)


# Precision "fast": dense stride-1 convs run the FP16 implicit-GEMM tensor-core
# kernel on half rows (math="fp16": wgmma on Hopper builds with sm_90a, else
# mma.sync; math="fp16_mma_sync" forces the latter, so a Hopper run checks both
# kernels; K = 1: the decoder's and N stack's shortcuts), strided ones cuBLAS in TF32
# (math="tf32", which the bindings also offer for stride 1). (Cin, Cout,
# Tin, K, pad, dilation): every K / dilation the model uses, T and channels
# off the tile sizes, T = 1, Cin % 8 != 0 (padded half rows), lengths that
# take the wide (128) and the narrow (64) time tile, and grids too small for
# the GPU (the reduction split over blocks, partial sums added after).
FAST_CONV1D_CASES = [
    (64, 48, 101, 3, 1, 1),
    (64, 48, 101, 3, 3, 3),
    (36, 29, 53, 3, 5, 5),
    (37, 29, 53, 3, 5, 5),
    (64, 64, 97, 7, 3, 1),
    (33, 40, 61, 7, 9, 3),
    (40, 40, 61, 7, 15, 5),
    (45, 31, 89, 11, 5, 1),
    (48, 31, 89, 11, 15, 3),
    (128, 128, 1001, 11, 25, 5),  # many time tiles, halo of 50
    (256, 256, 333, 3, 1, 1),  # two Cout tiles, eight reduction chunks
    (130, 200, 1, 3, 1, 1),  # T = 1
    (512, 512, 13, 5, 2, 1),  # text encoder k5
    (1090, 100, 33, 3, 1, 1),  # decoder k3, Cin % 8 == 2; one tile: reduction split 18 ways
    (1090, 1024, 92, 3, 1, 1),  # decoder on a short input: split reduction
    (128, 22, 257, 7, 3, 1),  # conv_post (the wgmma kernel's narrow tile: Cout <= 32)
    (128, 22, 30011, 7, 3, 1),  # conv_post on wide time tiles
    (1090, 20, 33, 3, 1, 1),  # narrow tile, reduction split
    (128, 128, 34001, 7, 9, 3),  # wide time tiles (enough of them for every SM twice)
    (64, 48, 34001, 2, 1, 1),  # wide tiles, K = 2 (wgmma: no MMAs left in flight)
    (256, 256, 20011, 3, 1, 1),  # wide tiles, two Cout tiles
    (64, 40, 34001, 7, 90, 30),  # wide tiles, windows of 308 steps: two TMA boxes (wgmma)
    (1090, 1024, 473, 1, 0, 1),  # pointwise (a third window): the decoder's shortcut, split
    (64, 48, 34001, 1, 0, 1),  # pointwise on wide tiles (three weight stages: two blocks per SM)
    (37, 29, 53, 1, 0, 1),  # pointwise on the narrow Cout tile
    (64, 136, 1500, 5, 200, 100),  # 64-step tiles, windows of 464 steps: two boxes
    (64, 136, 34001, 5, 200, 100),  # wide tiles, windows of 528 steps: three boxes
]
