"""Shared test markers and fixtures.

Markers:

- ``gpu``: needs a usable CUDA GPU and the native engine. Without them the test
  is skipped with one short reason (``pytest -ra`` shows a single line per
  reason, not the engine's loader message per test).
- ``slow``: takes more than a few seconds; ``pytest -m "not slow"`` leaves it out.

Fixtures: ``cuda`` (the probed :class:`~kokoro_gpu.backends.CudaState`, one
probe per session) and ``demo_model_dir`` (a random-weights model directory,
written once per session).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from kokoro_gpu.backends import CudaState, cuda_state


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a usable CUDA GPU and the native engine (skipped without)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds (deselect with -m 'not slow')")


@functools.cache
def _cuda() -> CudaState:
    return cuda_state()


def gpu_skip_reason() -> str | None:
    """One line saying why GPU tests cannot run here (None when they can)."""
    state = _cuda()
    return None if state.usable else f"needs a CUDA GPU: {state.reason}"


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Skipped from here, so that ``pytest -ra`` counts every GPU test under one line.
    if item.get_closest_marker("gpu") is not None:
        reason = gpu_skip_reason()
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture(scope="session")
def cuda() -> CudaState:
    return _cuda()


@pytest.fixture(scope="session")
def demo_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete model directory with seeded random weights and the default voices."""
    from kokoro_gpu.random_weights import write_model_dir

    return write_model_dir(tmp_path_factory.mktemp("models") / "demo-model")
