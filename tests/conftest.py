"""Shared test markers and fixtures.

Markers:

- ``gpu``: needs a usable CUDA GPU and the native engine. Without them the test
  is skipped with one short reason (``pytest -ra`` shows a single line per
  reason, not the engine's loader message per test).
- ``slow``: takes more than a few seconds; ``pytest -m "not slow"`` leaves it out.

Fixtures: ``cuda`` (the probed :class:`~kokoro_gpu.backends.CudaState`, one
probe per session), ``demo_model_dir`` (a random-weights model directory,
written once per worker session) and ``rng`` (a generator seeded by the test's name).

Parallel runs: pyproject's addopts run the suite on pytest-xdist workers
(``-n auto --dist loadfile``: each file on one worker, so module fixtures such as
a server or a Ray cluster are built once). :func:`pytest_xdist_auto_num_workers`
picks how many, :func:`pytest_collection_modifyitems` hands out the long files
first; ``-n 0`` runs everything in this process.
"""

from __future__ import annotations

import functools
import zlib
from pathlib import Path

import numpy as np
import pytest

from kokoro_gpu.backends import CudaState, cuda_state

# `-n auto` workers at most: past this the longest test files, not the cores, set the wall time.
MAX_WORKERS = 4


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Without pytest-xdist (pytest alone, as on a GPU machine without the test extra, or with
    ``-p no:xdist``), pyproject's ``-n`` / ``--dist`` options are accepted and everything runs in this
    process."""
    if pluginmanager.has_plugin("xdist"):
        return
    group = parser.getgroup("xdist", "pytest-xdist is not loaded: its options are accepted and ignored")
    # xdist registers -n through the same private call: pytest keeps lowercase short options for itself.
    group._addoption("-n", "--numprocesses", dest="numprocesses", default=None, help="ignored")
    group.addoption("--dist", dest="dist", default="no", help="ignored")
    group.addoption("--no-loadscope-reorder", dest="loadscopereorder", action="store_false", help="ignored")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for ``-n auto``: one per CPU this process may use (xdist's own default counts
    physical cores, one on a two-vCPU machine), at most MAX_WORKERS. None (all in this process)
    under ``-s``, whose prints workers would swallow, and for a run of one file, which
    ``--dist loadfile`` gives to a single worker anyway."""
    if config.option.capture == "no":
        return 0
    files = {arg.split("::")[0] for arg in config.args}
    if len(files) == 1 and Path(next(iter(files))).is_file():
        return 0
    from kokoro_gpu.ops.parallel import worker_count

    return min(MAX_WORKERS, worker_count())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist workers, the files holding slow or real-weights tests first (each file's own order
    kept): workers take files in collection order (--no-loadscope-reorder), so the long files start
    early and the short ones even out the end, instead of a long file starting last."""
    if not hasattr(config, "workerinput"):
        return
    heavy = {item.path for item in items if any(item.iter_markers("slow")) or any(item.iter_markers("real"))}
    items.sort(key=lambda item: item.path not in heavy)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a usable CUDA GPU and the native engine (skipped without)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds (deselect with -m 'not slow')")


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """Fresh random inputs per test, reproducible from the test's name alone (the native op tests':
    the seed does not depend on the file a test lives in)."""
    return np.random.default_rng(zlib.crc32(f"tests/test_native_ops.py::{request.node.name}".encode()))


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
