"""PEP 517 build backend: scikit-build-core, plus the CUDA library wheels when nvcc needs them.

The native engine needs cuFFT and cuBLAS headers and libraries. CUDA
toolkits installed without them (CI: nvcc only) would otherwise build a
CPU-only package and never compile the CUDA sources. So when an nvcc is
found (``CUDACXX``, ``PATH``, ``CUDA_HOME``/``CUDA_PATH``, /usr/local/cuda)
whose toolkit lacks ``cufft.h`` or ``cublas_v2.h``, the wheel build also
requires ``nvidia-cufft`` and ``nvidia-cublas`` (their ``-cu12`` names for a
CUDA 12 nvcc); CMakeLists.txt then finds them through the build's Python.
Without nvcc nothing is added and the build yields the CPU-only package.
Every hook is scikit-build-core's; only the wheel requirements are extended.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from scikit_build_core import build as _skbuild

build_sdist = _skbuild.build_sdist
build_wheel = _skbuild.build_wheel
build_editable = _skbuild.build_editable
get_requires_for_build_sdist = _skbuild.get_requires_for_build_sdist
prepare_metadata_for_build_wheel = _skbuild.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _skbuild.prepare_metadata_for_build_editable

_LIBRARY_HEADERS = ("cufft.h", "cublas_v2.h")


def _find_nvcc() -> Path | None:
    candidates = [os.environ.get("CUDACXX"), shutil.which("nvcc")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", "nvcc"))
    candidates.append("/usr/local/cuda/bin/nvcc")
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return Path(c).resolve()
    return None


def _nvcc_major(nvcc: Path) -> int | None:
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.", out)
    return int(m.group(1)) if m else None


def _toolkit_has_libraries(nvcc: Path) -> bool:
    """Whether a toolkit beside nvcc (or at CUDA_HOME, CUDA_PATH, /usr/local/cuda) has both headers.

    nvcc may be a wrapper script outside its toolkit, hence the usual roots too.
    """
    roots = [nvcc.parent.parent, Path("/usr/local/cuda")]
    roots += [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    for root in roots:
        include_dirs = [root / "include", *root.glob("targets/*/include")]
        if all(any((d / h).is_file() for d in include_dirs) for h in _LIBRARY_HEADERS):
            return True
    return False


def _native_requested(config_settings: dict | None) -> bool:
    """False where the build was told to skip the engine (KOKORO_NATIVE=0 or -Ccmake.define.KOKORO_NATIVE=OFF)."""
    if os.environ.get("KOKORO_NATIVE") == "0":
        return False
    value = str((config_settings or {}).get("cmake.define.KOKORO_NATIVE", "ON")).upper()
    return value not in ("OFF", "0", "FALSE", "NO")


def cuda_library_requirements(config_settings: dict | None = None) -> list[str]:
    """The CUDA library wheels this machine's build needs (empty without nvcc or with a full toolkit)."""
    if not _native_requested(config_settings):
        return []
    nvcc = _find_nvcc()
    if nvcc is None or _toolkit_has_libraries(nvcc):
        return []
    major = _nvcc_major(nvcc)
    if major is None or major < 12:
        return []
    suffix = "-cu12" if major == 12 else ""
    return [f"nvidia-cufft{suffix}", f"nvidia-cublas{suffix}"]


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return [*_skbuild.get_requires_for_build_wheel(config_settings), *cuda_library_requirements(config_settings)]


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    return [*_skbuild.get_requires_for_build_editable(config_settings), *cuda_library_requirements(config_settings)]
