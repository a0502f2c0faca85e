"""The CPU backend's fused kernels (``kokoro_gpu._cpu``, built from native/cpu), when present.

Each kernel computes the same function as a NumPy reference in this package:
the ops use the kernel when the module is built (a C++ compiler at install)
and the reference otherwise, and the tests hold every kernel to its reference.
``native`` is the module, or None without it.
"""

from __future__ import annotations

from types import ModuleType


def _load() -> ModuleType | None:
    try:
        from .. import _cpu
    except ImportError:
        return None
    return _cpu


native = _load()
