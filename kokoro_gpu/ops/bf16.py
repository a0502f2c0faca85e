"""bfloat16 GEMMs on the CPU: the CPU backend's ``fast`` precision.

One call, oneMKL's ``cblas_gemm_bf16bf16f32``: bf16 operands (8 significant
bits), products summed in float32, float32 out. On CPUs with AMX (Intel
Sapphire Rapids and later) it runs about 4 - 5x the float32 GEMM's rate a core,
on AVX-512 BF16 about twice. oneMKL comes from the optional ``mkl`` wheel
(``pip install "kokoro-gpu[cpu-fast]"``), loaded with ctypes, single-threaded:
the CPU backend runs its own branches on the cores. :func:`unavailable_reason`
says why the fast precision cannot run: no wheel, or a CPU on which oneMKL has
no bf16 kernels (one without AMX or AVX-512 BF16, or not Intel's: oneMKL takes
its generic paths elsewhere, slower than OpenBLAS's float32).

Rounding to bf16 is to nearest, ties away from zero (the float32's upper half
after adding half of its lower half's range); inputs are finite.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata

import numpy as np

# CBLAS enumerations (mkl_cblas.h).
_ROW_MAJOR = 101
_NO_TRANS = 111
_MKL_THREADING_SEQUENTIAL = 1
# CPU flags (/proc/cpuinfo) of the instructions oneMKL's bf16 GEMM runs on.
_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def _cpu_info() -> tuple[str, set[str]]:
    """(vendor, flags) of the first CPU in /proc/cpuinfo; empty where there is none (not Linux)."""
    vendor, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id":
                    vendor = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return vendor, flags


def _mkl_library_path() -> str | None:
    """The ``mkl`` wheel's libmkl_rt, or None where the wheel is not installed."""
    try:
        dist = importlib.metadata.distribution("mkl")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name.startswith("libmkl_rt.so"):
            return str(dist.locate_file(file))
    return None


@functools.cache
def _load() -> tuple[ctypes.CDLL | None, str | None]:
    """(oneMKL with its bf16 GEMM's signature set, None), or (None, why not)."""
    vendor, flags = _cpu_info()
    if vendor != "GenuineIntel" or not any(flag in flags for flag in _BF16_FLAGS):
        return None, "oneMKL's bf16 GEMM is fast only on Intel CPUs with AMX or AVX-512 BF16"
    path = _mkl_library_path()
    if path is None:
        return None, 'oneMKL is not installed (pip install "kokoro-gpu[cpu-fast]")'
    try:
        mkl = ctypes.CDLL(path)
        mkl.MKL_Set_Threading_Layer.argtypes = (ctypes.c_int,)
        gemm = mkl.cblas_gemm_bf16bf16f32
    except (OSError, AttributeError) as e:
        return None, f"oneMKL could not be loaded from {path}: {e}"
    # Before any other oneMKL call: its own threads would compete with the backend's.
    mkl.MKL_Set_Threading_Layer(_MKL_THREADING_SEQUENTIAL)
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    gemm.argtypes = (i, i, i, i, i, i, f, p, i, p, i, f, p, i)
    gemm.restype = None
    return mkl, None


def unavailable_reason() -> str | None:
    """None where bf16 GEMMs can run here, else why not (one line)."""
    return _load()[1]


def to_bf16(x: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """Round float32 ``x`` to bf16 bit patterns in uint16 ``out``; ``scratch``: uint32, all of x's shape."""
    np.add(x.view(np.uint32), np.uint32(0x8000), out=scratch)
    out[...] = scratch.view(np.uint16)[..., 1::2]  # the upper halves (little-endian)


def bf16_array(x: np.ndarray) -> np.ndarray:
    """A new contiguous uint16 array of ``x`` rounded to bf16 (weights, once at load)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.uint16)
    to_bf16(x, out, np.empty(x.shape, dtype=np.uint32))
    return out


def gemm_bf16(m: int, n: int, k: int, a: int, lda: int, b: int, ldb: int,
              c: int, ldc: int, accumulate: bool = False) -> None:
    """``C = A B`` (``C += A B`` when ``accumulate``), row-major, by address.

    A: bf16 [m, k] with row stride lda; B: bf16 [k, n], row stride ldb;
    C: float32 [m, n], row stride ldc (strides in elements). Addresses, so that
    the callers can hand over shifted windows of one buffer without views.
    """
    mkl, why = _load()
    if mkl is None:
        raise RuntimeError(why)
    mkl.cblas_gemm_bf16bf16f32(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, 1.0, a, lda, b, ldb,
                               1.0 if accumulate else 0.0, c, ldc)
