"""Backend selection and fallback, without a GPU: the native module is replaced by fakes.

Covers device names, the reasons CUDA is unusable (no driver or GPU, found
before the native engine is looked at; no native engine, and which copy of
the package was imported; its missing libraries; an old driver, no device, an
old GPU, a failed query), the one
warning of the ``"auto"`` fallback, BackendError under ``"cuda"``, the engine
failing to start, seeds and traces passed to the engine, and backend_info's
shape on this machine.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest

import kokoro_gpu
from kokoro_gpu import backends
from kokoro_gpu.backends import CPUBackend
from kokoro_gpu.checkpoint import fold_official
from kokoro_gpu.config import ModelConfig
from kokoro_gpu.errors import BackendError, InputError
from kokoro_gpu.random_weights import random_checkpoint

H200 = {
    "index": 0,
    "name": "NVIDIA H200",
    "compute_capability": (9, 0),
    "total_memory_bytes": 150 << 30,
    "multiprocessors": 132,
}
T4 = {
    "index": 0,
    "name": "Tesla T4",
    "compute_capability": (7, 5),
    "total_memory_bytes": 16 << 30,
    "multiprocessors": 40,
}
OK_STATUS = {
    "driver_version": 13000,
    "runtime_version": 13000,
    "device_count": 1,
    "error": None,
    "message": None,
}


class FakeEngine:
    """Records the calls the CUDA backend makes; returns silence."""

    calls: ClassVar[list[dict[str, Any]]] = []
    batch_lanes = 4

    def __init__(
        self, config: dict[str, Any], weights: dict[str, np.ndarray], device: int, precision: str = "fp32"
    ) -> None:
        self.config, self.device, self.precision = config, device, precision

    def forward(
        self, ids: np.ndarray, ref_s: np.ndarray, speed: float, deterministic: bool, seed: int, trace: bool
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray] | None]:
        FakeEngine.calls.append({"ids": ids, "ref_s": ref_s, "deterministic": deterministic, "seed": seed})
        durations = np.ones(ids.size, dtype=np.int64)
        return np.zeros(600 * ids.size, np.float32), durations, ({"pred_dur": durations} if trace else None)


class FailingEngine(FakeEngine):
    def __init__(self, *args: Any) -> None:
        raise BackendError("allocating 123 bytes of GPU memory for the model weights failed: out of memory")


class StubCPU:
    device = "cpu"
    precision = "fp32"

    def __init__(self, *args: Any) -> None:
        pass


def fake_native(status: dict[str, Any], devices: list[dict[str, Any]], engine: type = FakeEngine) -> Any:
    return SimpleNamespace(
        cuda_status=lambda: dict(status),
        devices=lambda: [dict(d) for d in devices],
        Engine=engine,
        cuda_architectures="80-real 86-real 89-real 90",
    )


@pytest.fixture
def config() -> ModelConfig:
    return ModelConfig.load()


@pytest.fixture(autouse=True)
def _stub_cpu_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "CPUBackend", StubCPU)


def use_native(monkeypatch: pytest.MonkeyPatch, native: Any, error: str | None = None) -> None:
    """A machine whose driver sees a GPU, with ``native`` (or ``error``) as the engine's import."""
    monkeypatch.setattr(backends, "driver_problem", lambda: None)
    monkeypatch.setattr(backends, "load_native", lambda: (native, error))


class FakeDriver:
    """libcuda through ctypes: cuInit's status and the device count."""

    def __init__(self, init_status: int, count: int) -> None:
        self.init_status, self.count = init_status, count

    def cuInit(self, flags: int) -> int:
        return self.init_status

    def cuDeviceGetCount(self, out: Any) -> int:
        out._obj.value = self.count
        return 0


@pytest.mark.parametrize(
    ("driver", "reason"),
    [
        (None, "no NVIDIA driver on this machine (libcuda.so.1 not found)"),
        (FakeDriver(34, 0), "no NVIDIA driver on this machine (only the CUDA toolkit's stub libcuda)"),
        (FakeDriver(100, 0), "no CUDA GPU on this machine"),
        (FakeDriver(0, 0), "no CUDA GPU on this machine"),
        (FakeDriver(999, 0), "the NVIDIA driver failed to start (cuInit error 999)"),
        (FakeDriver(0, 2), None),
    ],
)
def test_driver_and_gpu_are_found_without_the_engine(
    monkeypatch: pytest.MonkeyPatch, driver: FakeDriver | None, reason: str | None
) -> None:
    def cdll(name: str) -> FakeDriver:
        assert name == "libcuda.so.1"
        if driver is None:
            raise OSError(f"{name}: cannot open shared object file")
        return driver

    monkeypatch.setattr(backends.sys, "platform", "linux")
    monkeypatch.setattr(backends.ctypes, "CDLL", cdll)
    backends.driver_problem.cache_clear()
    try:
        assert backends.driver_problem() == reason
    finally:
        backends.driver_problem.cache_clear()


def test_no_driver_is_said_before_the_engine_is_imported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, config: ModelConfig
) -> None:
    """A CPU-only machine hears that it has no GPU, never which CUDA library the engine lacks."""

    def engine_import() -> Any:
        raise AssertionError("the engine must not be imported without a driver")

    no_driver = "no NVIDIA driver on this machine (libcuda.so.1 not found)"
    monkeypatch.setattr(backends, "driver_problem", lambda: no_driver)
    monkeypatch.setattr(backends, "load_native", engine_import)
    with caplog.at_level(logging.INFO, logger="kokoro_gpu"):
        assert backends.create_backend("auto", config, {}).device == "cpu"
    # The CPU is what such a machine runs on: said at INFO (kokoro-speak -v), not warned on every run.
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, f"kokoro_gpu: using the CPU backend: {no_driver}")
    ]


@pytest.mark.parametrize(
    ("status", "devices", "reason"),
    [
        (
            {**OK_STATUS, "driver_version": 0, "error": "cudaErrorInsufficientDriver"},
            [],
            "CUDA driver not detected",
        ),
        (
            {**OK_STATUS, "driver_version": 12020, "error": "cudaErrorInsufficientDriver"},
            [],
            "CUDA driver too old",
        ),
        ({**OK_STATUS, "device_count": 0, "error": "cudaErrorNoDevice"}, [], "no GPU devices found"),
        ({**OK_STATUS, "device_count": 0}, [], "no GPU devices found"),
        ({**OK_STATUS, "error": "cudaErrorUnknown", "message": "unknown error"}, [], "initialisation failed"),
        (OK_STATUS, [T4], "compute capability 8.0 or newer"),
    ],
)
def test_unusable_cuda_falls_back_under_auto_and_raises_under_cuda(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    config: ModelConfig,
    status: dict[str, Any],
    devices: list[dict[str, Any]],
    reason: str,
) -> None:
    use_native(monkeypatch, fake_native(status, devices))
    with caplog.at_level(logging.WARNING, logger="kokoro_gpu"):
        backend = backends.create_backend("auto", config, {})
    assert backend.device == "cpu"
    assert len(caplog.records) == 1 and reason in caplog.records[0].getMessage()
    with pytest.raises(BackendError, match=reason):
        backends.create_backend("cuda", config, {})
    info = backends.backend_info()
    assert info["cuda_available"] is False and reason in info["reason"]


def test_native_engine_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, config: ModelConfig
) -> None:
    use_native(monkeypatch, None, "native engine not built")
    with caplog.at_level(logging.WARNING, logger="kokoro_gpu"):
        assert backends.create_backend("auto", config, {}).device == "cpu"
    assert [r.getMessage() for r in caplog.records] == [
        "kokoro_gpu: using the CPU backend: native engine not built"
    ]
    with pytest.raises(BackendError, match="native engine not built"):
        backends.resolve_device("cuda")


def test_native_engine_without_its_libraries_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A native engine built against the cuBLAS wheel that the running Python lacks: the
    reason names the missing library and what to install."""

    def missing(name: str) -> Any:
        raise ImportError("libcublas.so.13: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(backends.importlib, "import_module", missing)
    native, reason = backends.load_native()
    assert native is None and reason is not None
    # libcublas.so.13 is cuBLAS 13, which ships with CUDA 13: the wheel without a -cu12 suffix.
    assert reason.startswith("native engine cannot be loaded: libcublas.so.13: cannot open")
    assert "built for CUDA 13" in reason and "pip install nvidia-cublas," in reason
    assert "kokoro-gpu[cuda13]" in reason


def test_cuda_12_libraries_get_their_wheel_names(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Any:
        raise ImportError("libcublas.so.12: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(backends.importlib, "import_module", missing)
    _, reason = backends.load_native()
    assert reason is not None and "built for CUDA 12" in reason
    assert "pip install nvidia-cublas-cu12," in reason and "kokoro-gpu[cuda12]" in reason


def _not_built(monkeypatch: pytest.MonkeyPatch, package: Any, installed: Any, editable: bool) -> str | None:
    def not_built(name: str) -> Any:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(backends.importlib, "import_module", not_built)
    monkeypatch.setattr(backends, "_package_dir", lambda: package)
    monkeypatch.setattr(backends, "_installed_copy", lambda: (installed, editable))
    return backends.load_native()[1]


def test_engine_not_built_names_the_copy_imported(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    source = tmp_path / "checkout" / "kokoro_gpu"
    source.mkdir(parents=True)
    (source.parent / "pyproject.toml").write_text("")
    site = tmp_path / "site-packages" / "kokoro_gpu"
    # Python started in the checkout imports it instead of the installed package.
    reason = _not_built(monkeypatch, source, site, False)
    assert reason == (
        f"imported {source} from the source tree (the current directory), which has no built engine, "
        f"instead of the installed copy in {site}; run from another directory"
    )
    reason = _not_built(monkeypatch, source, None, False)
    assert reason == (
        f"imported {source} from the source tree, which has no built engine; "
        "run from another directory or pip install ."
    )
    assert _not_built(monkeypatch, source, None, True).startswith(f"imported {source}, an editable install")
    # An installed package (no pyproject.toml beside it) was built without the engine.
    assert _not_built(monkeypatch, site, None, False).startswith("native engine not built (")


def test_cpu_never_probes_cuda(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, config: ModelConfig
) -> None:
    def boom() -> Any:
        raise AssertionError("device='cpu' must not look for CUDA")

    monkeypatch.setattr(backends, "load_native", boom)
    with caplog.at_level(logging.WARNING, logger="kokoro_gpu"):
        assert backends.create_backend("cpu", config, {}).device == "cpu"
    assert not caplog.records


def test_bad_names_are_input_errors(config: ModelConfig) -> None:
    with pytest.raises(InputError, match="unknown device 'gpu'"):
        backends.create_backend("gpu", config, {})
    with pytest.raises(InputError, match="unknown precision"):
        backends.create_backend("cpu", config, {}, precision="fp8")


def test_usable_cuda_gives_the_cuda_backend(monkeypatch: pytest.MonkeyPatch, config: ModelConfig) -> None:
    use_native(monkeypatch, fake_native(OK_STATUS, [T4, {**H200, "index": 1}]))
    assert backends.resolve_device("auto") == "cuda"
    backend = backends.create_backend("auto", config, {})
    assert isinstance(backend, backends.CUDABackend)
    assert backend.device == "cuda" and backend.device_index == 1 and backend.device_name == "NVIDIA H200"
    assert backend.lanes == 4, "the scheduler runs a worker per engine lane"
    assert backend._engine.config["plbert"]["hidden_size"] == 768


def test_engine_failing_to_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, config: ModelConfig
) -> None:
    use_native(monkeypatch, fake_native(OK_STATUS, [H200], engine=FailingEngine))
    with caplog.at_level(logging.WARNING, logger="kokoro_gpu"):
        assert backends.create_backend("auto", config, {}).device == "cpu"
    assert len(caplog.records) == 1 and "out of memory" in caplog.records[0].getMessage()
    with pytest.raises(BackendError, match="123 bytes"):
        backends.create_backend("cuda", config, {})


def test_seeds_and_trace_reach_the_engine(monkeypatch: pytest.MonkeyPatch, config: ModelConfig) -> None:
    use_native(monkeypatch, fake_native(OK_STATUS, [H200]))
    backend = backends.create_backend("cuda", config, {})
    FakeEngine.calls.clear()
    ids, ref_s = np.array([0, 5, 6, 0]), np.zeros((1, 256))
    trace: dict[str, np.ndarray] = {}
    audio, durations = backend.forward(ids, ref_s, 1.0, deterministic=False, seed=7, trace=trace)
    backend.forward(ids, ref_s, 1.0, deterministic=False, seed=None)
    backend.forward(ids, ref_s, 1.0, deterministic=False, seed=None)
    backend.forward(ids, ref_s, 1.0, deterministic=True, seed=5)
    seeds = [c["seed"] for c in FakeEngine.calls]
    assert seeds[0] == 7 and seeds[1] != seeds[2] and seeds[3] == 0
    assert [c["deterministic"] for c in FakeEngine.calls] == [False, False, False, True]
    call = FakeEngine.calls[0]
    assert (
        call["ids"].dtype == np.int64 and call["ref_s"].dtype == np.float32 and call["ref_s"].shape == (256,)
    )
    assert audio.dtype == np.float32 and durations.dtype == np.int64
    np.testing.assert_array_equal(trace["pred_dur"], durations)


def test_backend_info_with_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    use_native(monkeypatch, fake_native(OK_STATUS, [H200]))
    info = backends.backend_info()
    assert info["cuda_available"] is True and info["reason"] is None and info["device_index"] == 0
    assert info["devices"] == [{**H200, "compute_capability": "9.0"}]
    assert info["driver_version"] == "13.0" and info["runtime_version"] == "13.0"
    assert info["cuda_architectures"] == "80-real 86-real 89-real 90"


def test_backend_info_on_this_machine() -> None:
    info = kokoro_gpu.backend_info()
    assert set(info) == {
        "native_built",
        "native_loaded",
        "native_error",
        "cuda_architectures",
        "cuda_available",
        "reason",
        "device_index",
        "devices",
        "driver_version",
        "runtime_version",
    }
    assert isinstance(info["native_built"], bool) and isinstance(info["native_loaded"], bool)
    assert isinstance(info["devices"], list)
    if not info["cuda_available"]:
        assert isinstance(info["reason"], str) and info["reason"]
        assert info["device_index"] is None
    if not info["native_loaded"]:
        assert isinstance(info["native_error"], str) and info["native_error"]
        if not info["native_built"]:
            assert str(Path(kokoro_gpu.__file__).parent) in info["native_error"] or (
                info["native_error"].startswith("native engine not built")
            )


def test_fast_precision_reaches_the_engine(monkeypatch: pytest.MonkeyPatch, config: ModelConfig) -> None:
    use_native(monkeypatch, fake_native(OK_STATUS, [H200]))
    backend = backends.create_backend("cuda", config, {}, precision="fast")
    assert backend.precision == "fast" and backend._engine.precision == "fast"


def test_cpu_backend_without_bf16_maps_fast_to_fp32(
    monkeypatch: pytest.MonkeyPatch, config: ModelConfig
) -> None:
    """Where bf16 GEMMs cannot run, "fast" runs (and reports) fp32, bit for bit."""
    from kokoro_gpu.ops import bf16

    monkeypatch.setattr(bf16, "unavailable_reason", lambda: "no oneMKL here")
    weights = fold_official(random_checkpoint(config, 0), config)
    fast, exact = CPUBackend(config, weights, "fast"), CPUBackend(config, weights, "fp32")
    assert fast.precision == "fp32"
    ids, ref_s = np.array([0, 5, 17, 43, 9, 0]), np.full(256, 0.1, dtype=np.float32)
    got, got_dur = fast.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    want, want_dur = exact.forward(ids, ref_s, 1.0, deterministic=True, seed=None)
    np.testing.assert_array_equal(got_dur, want_dur)
    assert got.tobytes() == want.tobytes()
    with pytest.raises(InputError, match="unknown precision"):
        CPUBackend(config, weights, "bf16")


def test_bf16_unavailable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from kokoro_gpu.ops import bf16

    monkeypatch.setattr(bf16, "_cpu_info", lambda: ("AuthenticAMD", {"avx512_bf16", "avx512f"}))
    bf16._load.cache_clear()
    assert "Intel CPUs with AMX or AVX-512 BF16" in (bf16.unavailable_reason() or "")
    monkeypatch.setattr(bf16, "_cpu_info", lambda: ("GenuineIntel", {"amx_bf16"}))
    monkeypatch.setattr(bf16, "_mkl_library_path", lambda: None)
    bf16._load.cache_clear()
    assert "kokoro-gpu[cpu-fast]" in (bf16.unavailable_reason() or "")
    with pytest.raises(RuntimeError, match="cpu-fast"):
        bf16.gemm_bf16(1, 1, 1, 0, 1, 0, 1, 0, 1)
    monkeypatch.undo()
    bf16._load.cache_clear()  # the real answer again for the tests after this one


def test_cpu_fast_precision_rounds_only_after_the_durations(config: ModelConfig) -> None:
    """bf16 convs in the text encoder, decoder and generator: the durations and F0 stay fp32's exactly."""
    from kokoro_gpu.ops import bf16

    if bf16.unavailable_reason() is not None:
        pytest.skip(f"bf16 GEMMs unavailable: {bf16.unavailable_reason()}")
    weights = fold_official(random_checkpoint(config, 0), config)
    fast, exact = CPUBackend(config, weights, "fast"), CPUBackend(config, weights, "fp32")
    assert fast.precision == "fast"
    ids, ref_s = np.array([0, 5, 17, 43, 9, 21, 30, 0]), np.full(256, 0.1, dtype=np.float32)
    traces: dict[str, dict[str, np.ndarray]] = {"fast": {}, "fp32": {}}
    got, got_dur = fast.forward(ids, ref_s, 1.0, deterministic=True, seed=None, trace=traces["fast"])
    want, want_dur = exact.forward(ids, ref_s, 1.0, deterministic=True, seed=None, trace=traces["fp32"])
    np.testing.assert_array_equal(got_dur, want_dur)
    for key in ("bert", "d", "F0", "N"):
        assert traces["fast"][key].tobytes() == traces["fp32"][key].tobytes(), key
    t_en = traces["fp32"]["t_en"]
    t_en_err = np.linalg.norm(traces["fast"]["t_en"] - t_en) / np.linalg.norm(t_en)
    assert 1e-5 < t_en_err < 1e-2  # rounded (bf16), not fp32, yet close
    assert got.shape == want.shape and np.isfinite(got).all()
