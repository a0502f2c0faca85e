"""PEP 517 build backend: scikit-build-core, plus the cuBLAS wheel when nvcc needs it.

The native engine needs the cuBLAS headers and library. CUDA toolkits
installed without them (CI: nvcc only) would otherwise build a CPU-only
package and never compile the CUDA sources. So when an nvcc is found
(``CUDACXX``, ``PATH``, ``CUDA_HOME``/``CUDA_PATH``, /usr/local/cuda) whose
toolkit lacks ``cublas_v2.h``, the wheel build also requires
``nvidia-cublas`` (``nvidia-cublas-cu12`` for a CUDA 12 nvcc);
CMakeLists.txt then finds it through the build's Python.

The engine then loads cuBLAS from the same wheel at run time (its RPATH
points at it), so the built package also declares it as its own
dependency: the prepared metadata and the wheel's METADATA both get a
``Requires-Dist`` line for it, and one ``pip install .`` yields a working
engine. Without nvcc, with a full toolkit (RPATH to its libraries), or with
KOKORO_NATIVE=0 nothing is added and the build yields the package as it is.
Every other hook is scikit-build-core's.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

from scikit_build_core import build as _skbuild

build_sdist = _skbuild.build_sdist
get_requires_for_build_sdist = _skbuild.get_requires_for_build_sdist

_LIBRARY_HEADERS = ("cublas_v2.h",)


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
    """Whether a toolkit beside nvcc (or at CUDA_HOME, CUDA_PATH, /usr/local/cuda) has the library headers.

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
    """False where the build was told to skip the engine.

    That is KOKORO_NATIVE=0 in the environment or -Ccmake.define.KOKORO_NATIVE=OFF.
    """
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
    return list(_CUDA_WHEELS.get(major, ("nvidia-cublas",)))


# The wheels of each CUDA major version, pinned to the library version whose soname the
# engine links (CUDA 12: libcublas.so.12; CUDA 13: libcublas.so.13).
_CUDA_WHEELS = {
    12: ("nvidia-cublas-cu12",),
    13: ("nvidia-cublas>=13,<14",),
}


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    requires = _skbuild.get_requires_for_build_wheel(config_settings)
    return [*requires, *cuda_library_requirements(config_settings)]


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    requires = _skbuild.get_requires_for_build_editable(config_settings)
    return [*requires, *cuda_library_requirements(config_settings)]


# ------------------------------------------------- the libraries as run-time dependencies


def with_requirements(metadata: str, requirements: list[str]) -> str:
    """Core metadata text with a ``Requires-Dist`` line added for each requirement not already there."""
    head, sep, body = metadata.partition("\n\n")
    present = set(re.findall(r"^Requires-Dist: (.+)$", head, flags=re.MULTILINE))
    added = "".join(f"\nRequires-Dist: {r}" for r in requirements if r not in present)
    return head.rstrip("\n") + added + "\n" + (sep[1:] + body if sep else "")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def add_requirements_to_wheel(wheel: Path, requirements: list[str]) -> bool:
    """Rewrite ``wheel`` with the requirements in its METADATA (and RECORD) when it holds the engine.

    Returns whether it was rewritten: a wheel without ``kokoro_gpu/_native``
    (the build skipped the engine) needs no CUDA libraries.
    """
    with zipfile.ZipFile(wheel) as src:
        names = src.namelist()
        if not requirements or not any(n.startswith("kokoro_gpu/_native") for n in names):
            return False
        metadata_name = next(n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        record_name = metadata_name.removesuffix("METADATA") + "RECORD"
        metadata = with_requirements(src.read(metadata_name).decode("utf-8"), requirements).encode("utf-8")
        metadata_line = f"{metadata_name},{_record_hash(metadata)},{len(metadata)}"
        record = [
            metadata_line if line.startswith(metadata_name + ",") else line
            for line in src.read(record_name).decode("utf-8").splitlines()
        ]
        rewritten = wheel.with_name(wheel.name + ".part")
        with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                if info.filename == metadata_name:
                    dst.writestr(info, metadata)
                elif info.filename == record_name:
                    dst.writestr(info, "\n".join(record) + "\n")
                else:
                    dst.writestr(info, src.read(info))
    os.replace(rewritten, wheel)
    return True


def _prepare_metadata(
    prepare: Callable[[str, dict | None], str], metadata_directory: str, config_settings: dict | None
) -> str:
    name = prepare(metadata_directory, config_settings)
    requirements = cuda_library_requirements(config_settings)
    if requirements:
        path = Path(metadata_directory) / name / "METADATA"
        path.write_text(with_requirements(path.read_text(encoding="utf-8"), requirements), encoding="utf-8")
    return name


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: dict | None = None) -> str:
    return _prepare_metadata(_skbuild.prepare_metadata_for_build_wheel, metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: dict | None = None) -> str:
    prepare = _skbuild.prepare_metadata_for_build_editable
    return _prepare_metadata(prepare, metadata_directory, config_settings)


def build_wheel(
    wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None
) -> str:
    # scikit-build-core compares a prepared METADATA with its own, which lacks the added lines:
    # it builds without it, and the wheel gets the same lines afterwards.
    name = _skbuild.build_wheel(wheel_directory, config_settings, None)
    add_requirements_to_wheel(Path(wheel_directory) / name, cuda_library_requirements(config_settings))
    return name


def build_editable(
    wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None
) -> str:
    name = _skbuild.build_editable(wheel_directory, config_settings, None)
    add_requirements_to_wheel(Path(wheel_directory) / name, cuda_library_requirements(config_settings))
    return name
