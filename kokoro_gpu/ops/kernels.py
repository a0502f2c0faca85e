"""The CPU backend's fused kernels (``kokoro_gpu._cpu``, built from native/cpu), when present.

Each kernel computes the same function as a NumPy reference in this package:
the ops use the kernel when the module is built (a C++ compiler at install)
and the reference otherwise, and the tests hold every kernel to its reference.
``native`` is the module, or None without it.

A source checkout never holds the built module: where kokoro_gpu was imported
from one (a checkout that is the working directory, as for a server started
there) and an installed copy beside it on ``sys.path`` has the module, that
one is used, so that every process of a run computes the same bits.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_PACKAGE = __name__.split(".")[0]


def _installed_copy() -> ModuleType | None:
    here = Path(__file__).resolve().parents[1]
    for entry in sys.path:
        folder = Path(entry or ".").resolve() / _PACKAGE
        if folder == here:
            continue
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = folder / f"_cpu{suffix}"
            if not path.is_file():
                continue
            spec = importlib.util.spec_from_file_location(f"{_PACKAGE}._cpu", path)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module
    return None


def _load() -> ModuleType | None:
    try:
        from .. import _cpu
    except ImportError:
        try:
            return _installed_copy()
        except ImportError:
            return None
    return _cpu


native = _load()
