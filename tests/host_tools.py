"""The native engine's host-only code built into small drivers (native/tools/) by the system C++
compiler, for the tests that check it without a GPU: the precision plan, the conv weight relayouts
and the conv launch plan."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CXX = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
CUDA_HEADERS = ("cuda_fp16.h", "cublas_v2.h")


def _cuda_include_dirs() -> list[str] | None:
    """Directories holding CUDA_HEADERS (the toolkit's, else the nvidia wheels'); None if one is missing."""
    candidates = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")]
    try:
        import nvidia

        for root in nvidia.__path__:
            candidates += glob.glob(os.path.join(root, "*", "include"))
    except ImportError:
        pass
    found: list[str] = []
    for header in CUDA_HEADERS:
        where = next((d for d in candidates if os.path.isfile(os.path.join(d, header))), None)
        if where is None:
            return None
        if where not in found:
            found.append(where)
    # The toolkit's runtime headers first: a wheel's may be of another CUDA version.
    return sorted(found, key=lambda d: "nvidia" in d)


CUDA_INCLUDES = _cuda_include_dirs()
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler")
needs_cxx_and_cuda_headers = pytest.mark.skipif(
    CXX is None or CUDA_INCLUDES is None,
    reason=f"no C++ compiler or no CUDA headers ({', '.join(CUDA_HEADERS)})",
)


def build_tool(out: Path, sources: list[str], *, cuda_headers: bool = False) -> Path:
    """`sources` (paths relative to the repository, .cu files compiled as C++) into the program
    `out`, warnings as errors, with native/include (and the CUDA headers' directories) on the path."""
    flags = [
        "-std=c++17",
        "-x",
        "c++",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-O1",
        "-I",
        str(ROOT / "native/include"),
    ]
    includes = [f"-I{d}" for d in CUDA_INCLUDES or []] if cuda_headers else []
    paths = [str(ROOT / s) for s in sources]
    subprocess.run([str(CXX), *flags, *includes, *paths, "-o", str(out)], check=True)
    return out
