"""Compute backends: one interface, one implementation per device, and device selection.

A backend runs the model's forward pass (token ids + style vector -> audio and
durations). The CPU backend is the NumPy model in ``kokoro_gpu.model``; the CUDA
backend drives the native engine (``kokoro_gpu._native``), which holds the
weights on the GPU and runs the whole forward pass there in one call.

Precision: ``"fp32"``: float32-level accuracy everywhere; ``"fast"``: rounded
FP16 operands and TF32 GEMMs in the text encoder, decoder and generator, with
float32-level accuracy kept wherever it reaches the durations or F0 (durations
identical to fp32, audio within 1.2e-2 of the float64 truth on the
golden fixtures; the engine's per-layer plan: docs/DESIGN.md). The CPU
backend's ``"fast"`` rounds the operands of the same parts' convolutions to
bf16 (:mod:`kokoro_gpu.ops.bf16_conv`); where bf16 GEMMs cannot run (no
``cpu-fast`` extra, or a CPU without BF16 instructions) it maps ``"fast"`` to
``"fp32"`` (and reports ``precision == "fp32"``), so that any device and
precision combination works.

Device selection: ``"cpu"``; ``"cuda"`` (a :class:`BackendError` saying why when
CUDA cannot be used); ``"auto"`` (CUDA when usable, else the CPU backend with
one logged line saying why: a warning where a GPU is there but cannot be used,
at INFO where the machine has no NVIDIA driver or GPU, whose CPU is then the
expected device). :func:`backend_info` reports what was found.
The NVIDIA driver and a GPU are looked for first, through the driver library
itself, so that a machine without them hears that, and not what the native
engine would need to load.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import secrets
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from .config import ModelConfig
from .errors import BackendError, InputError

logger = logging.getLogger("kokoro_gpu")

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "fast")
# One utterance of a batch: token ids int64 [T], style [256], speed, seed (None: fresh).
BatchItem = tuple[np.ndarray, np.ndarray, float, int | None]
# Called with (item index, audio, durations) as each result of a forward_on_lane call is ready.
ResultCallback = Callable[[int, np.ndarray, np.ndarray], None]
# The oldest GPU generation the native engine is compiled for (Ampere).
MIN_COMPUTE_CAPABILITY = (8, 0)
_NATIVE_MODULE = f"{__package__}._native"


class Backend(ABC):
    """What every backend provides: ``forward``, and ``forward_batch`` (one by one unless overridden).

    ``lanes``: how many ``forward_on_lane`` calls may run at once (the CUDA engine's lanes; 1 elsewhere).
    """

    device: str
    precision: str
    lanes: int = 1

    @abstractmethod
    def forward(
        self,
        input_ids: np.ndarray,
        ref_s: np.ndarray,
        speed: float,
        *,
        deterministic: bool,
        seed: int | None,
        trace: dict[str, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Token ids int64 [T] (boundary zeros included) and style [256] -> (audio float32, durations int64).

        ``trace``, when given, is filled with the intermediates of docs/DESIGN.md.
        """

    def forward_batch(
        self, items: Sequence[BatchItem], *, deterministic: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Many utterances in one call; result ``i`` equals ``forward`` of item ``i`` with its seed."""
        return [
            self.forward(ids, ref_s, speed, deterministic=deterministic, seed=seed)
            for ids, ref_s, speed, seed in items
        ]

    def phase_runs(self) -> dict[str, int] | None:
        """How the forward passes' phases ran so far: ``{"eager", "captured", "replayed"}`` counts
        (the CUDA engine's graphs); None for a backend without graphs."""
        return None

    def forward_on_lane(
        self,
        lane: int,
        items: Sequence[BatchItem],
        *,
        deterministic: bool,
        on_result: ResultCallback | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """``forward_batch`` on lane ``lane`` (0 .. ``lanes`` - 1); calls on different lanes may overlap.

        ``on_result(i, audio, durations)``, if given, gets each result as soon as it is ready, before
        the call returns them all; its first error is raised after the last item.
        """
        if on_result is None:
            return self.forward_batch(items, deterministic=deterministic)
        results: list[tuple[np.ndarray, np.ndarray]] = []
        error: BaseException | None = None
        for i, (ids, ref_s, speed, seed) in enumerate(items):
            pair = self.forward(ids, ref_s, speed, deterministic=deterministic, seed=seed)
            results.append(pair)
            if error is None:
                try:
                    on_result(i, *pair)
                except Exception as e:  # raised below, once the items are done
                    error = e
        if error is not None:
            raise error
        return results


class CPUBackend(Backend):
    """The NumPy forward pass, float32; ``precision="fast"``: bf16 convolutions where they can run."""

    device = "cpu"

    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray], precision: str = "fp32") -> None:
        from .model.kmodel import KModelCPU
        from .ops import bf16
        from .ops.memory import keep_freed_memory

        if precision not in PRECISIONS:
            raise InputError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
        why_not = bf16.unavailable_reason() if precision == "fast" else None
        if why_not is not None:
            logger.info("kokoro_gpu: the CPU backend's fast precision cannot run (%s); running fp32", why_not)
        self.precision = "fast" if precision == "fast" and why_not is None else "fp32"
        # First, so that every allocation after it (the prepared weights too) follows the settings.
        keep_freed_memory()  # the forward pass's large temporaries reuse mapped memory
        self._model = KModelCPU(config, weights, dtype=np.float32, fast=self.precision == "fast")

    def forward(
        self,
        input_ids: np.ndarray,
        ref_s: np.ndarray,
        speed: float,
        *,
        deterministic: bool,
        seed: int | None,
        trace: dict[str, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        from .ops.parallel import blas_single_threaded

        rng = None if deterministic else np.random.default_rng(seed)
        with blas_single_threaded():  # the model runs its own branches on threads
            return self._model.forward_with_tokens(input_ids, ref_s, speed, rng=rng, trace=trace)


# ------------------------------------------------------------------ CUDA state


# The CUDA driver API's codes that mean "nothing to run on" (cuda.h).
_CUDA_ERROR_NO_DEVICE = 100
_CUDA_ERROR_STUB_LIBRARY = 34


@functools.cache
def driver_problem() -> str | None:
    """Why this machine has no usable NVIDIA driver or GPU (None: the driver sees a GPU).

    Asks the driver library (``libcuda``) directly through ctypes: cheap, and it
    needs neither the native engine nor the CUDA libraries that it links.
    """
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        driver = ctypes.CDLL(name)
    except OSError:
        return f"no NVIDIA driver on this machine ({name} not found)"
    status = driver.cuInit(0)
    if status == _CUDA_ERROR_STUB_LIBRARY:
        return "no NVIDIA driver on this machine (only the CUDA toolkit's stub libcuda)"
    if status == _CUDA_ERROR_NO_DEVICE:
        return "no CUDA GPU on this machine"
    if status != 0:
        return f"the NVIDIA driver failed to start (cuInit error {status})"
    count = ctypes.c_int(0)
    if driver.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no CUDA GPU on this machine"
    return None


# cuBLAS sonames -> the CUDA major version whose wheel provides them.
_LIBRARY_CUDA = {"libcublas.so.12": 12, "libcublas.so.13": 13}


def _missing_library_hint(message: str) -> str:
    cuda = next((v for lib, v in _LIBRARY_CUDA.items() if lib in message), None)
    if cuda is None:
        if "libcublas" not in message:
            return ""
        return " (install cuBLAS: the CUDA toolkit's, or the nvidia-cublas wheel of its CUDA version)"
    suffix = "-cu12" if cuda == 12 else ""
    return (
        f" (the engine was built for CUDA {cuda}; install its libraries with"
        f" pip install nvidia-cublas{suffix}, or pip install 'kokoro-gpu[cuda{cuda}]',"
        " or put the CUDA toolkit's lib64 on LD_LIBRARY_PATH)"
    )


def _package_dir() -> Path:
    return Path(__file__).resolve().parent


def _installed_copy() -> tuple[Path | None, bool]:
    """(an installed kokoro_gpu other than the one imported, whether the install is editable)."""
    try:
        dist = importlib.metadata.distribution("kokoro-gpu")
    except importlib.metadata.PackageNotFoundError:
        return None, False
    direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
    editable = bool(direct_url.get("dir_info", {}).get("editable"))
    located = Path(str(dist.locate_file("kokoro_gpu")))
    if located.is_dir() and located.resolve() != _package_dir():
        return located.resolve(), editable
    return None, editable


def _not_built_reason() -> str:
    """Why the imported package has no engine: which copy was imported and how it was installed."""
    package = _package_dir()
    if not (package.parent / "pyproject.toml").is_file():
        return "native engine not built (the package was installed without nvcc, or with KOKORO_NATIVE=0)"
    installed, editable = _installed_copy()
    if installed is not None:
        return (
            f"imported {package} from the source tree (the current directory), which has no built engine, "
            f"instead of the installed copy in {installed}; run from another directory"
        )
    if editable:
        return (
            f"imported {package}, an editable install built without the engine (no nvcc, or "
            "KOKORO_NATIVE=0); reinstall with nvcc on the PATH: pip install -e ."
        )
    return (
        f"imported {package} from the source tree, which has no built engine; "
        "run from another directory or pip install ."
    )


def load_native() -> tuple[ModuleType | None, str | None]:
    """Import the native engine: (module, None), or (None, why it cannot be used)."""
    try:
        return importlib.import_module(_NATIVE_MODULE), None
    except ModuleNotFoundError as e:
        if e.name == _NATIVE_MODULE:
            return None, _not_built_reason()
        return None, f"native engine cannot be loaded: {e}"
    except ImportError as e:  # built, but a shared library (libcublas) is missing
        return None, f"native engine cannot be loaded: {e}{_missing_library_hint(str(e))}"


def _native_built() -> bool:
    try:
        return importlib.util.find_spec(_NATIVE_MODULE) is not None
    except ImportError:
        return False


def _version(v: int) -> str | None:
    """CUDA's integer versions (13000) as text ("13.0"); None for 0 (absent)."""
    return f"{v // 1000}.{(v % 1000) // 10}" if v > 0 else None


@dataclass
class CudaState:
    """What the native engine and the CUDA runtime report, and the verdict."""

    native: ModuleType | None
    usable: bool
    reason: str | None
    device_index: int | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    driver_version: str | None = None
    runtime_version: str | None = None


def _capability(device: dict[str, Any]) -> str:
    major, minor = device["compute_capability"]
    return f"{major}.{minor}"


def _unusable_reason(status: dict[str, Any], devices: list[dict[str, Any]]) -> str | None:
    if status.get("driver_version", 0) == 0:
        return "CUDA driver not detected"
    error = status.get("error")
    if error == "cudaErrorInsufficientDriver":
        return (
            f"CUDA driver too old: driver {_version(status['driver_version'])}, "
            f"runtime {_version(status.get('runtime_version', 0))}"
        )
    if error == "cudaErrorNoDevice" or (error is None and status.get("device_count", 0) == 0):
        return "no GPU devices found"
    if error is not None:
        return f"CUDA initialisation failed: {status.get('message') or error}"
    if not any(tuple(d["compute_capability"]) >= MIN_COMPUTE_CAPABILITY for d in devices):
        found = ", ".join(f"{d['name']} ({_capability(d)})" for d in devices)
        return f"no GPU of compute capability 8.0 or newer (found {found})"
    return None


def cuda_state() -> CudaState:
    """Probe the driver, then the native engine and the GPUs (cheap; nothing starts beyond the runtime)."""
    problem = driver_problem()
    if problem is not None:
        return CudaState(native=None, usable=False, reason=problem)
    native, error = load_native()
    if native is None:
        return CudaState(native=None, usable=False, reason=error)
    status = native.cuda_status()
    devices = [{**d, "compute_capability": tuple(d["compute_capability"])} for d in native.devices()]
    reason = _unusable_reason(status, devices)
    index = next((d["index"] for d in devices if d["compute_capability"] >= MIN_COMPUTE_CAPABILITY), None)
    return CudaState(
        native=native,
        usable=reason is None,
        reason=reason,
        device_index=index if reason is None else None,
        devices=devices,
        driver_version=_version(status.get("driver_version", 0)),
        runtime_version=_version(status.get("runtime_version", 0)),
    )


def backend_info() -> dict[str, Any]:
    """What this installation can run on, and why not CUDA when it cannot.

    Keys: ``native_built`` (the extension exists), ``native_loaded`` (it
    imports), ``native_error`` (why it does not: which copy of the package was
    imported and why it has no engine, or the library it lacks; None when it
    loads), ``cuda_architectures`` (compiled for), ``cuda_available``,
    ``reason`` (why not, else None), ``device_index`` (the GPU the CUDA
    backend uses), ``devices`` (index, name, compute_capability,
    total_memory_bytes, multiprocessors), ``driver_version``,
    ``runtime_version`` ("13.0"; None when absent).
    """
    state = cuda_state()
    # Without a driver the probe never imports the engine; import it here to say whether it loads.
    native, native_error = (state.native, None) if state.native is not None else load_native()
    return {
        "native_built": _native_built(),
        "native_loaded": native is not None,
        "native_error": native_error,
        "cuda_architectures": getattr(native, "cuda_architectures", None),
        "cuda_available": state.usable,
        "reason": state.reason,
        "device_index": state.device_index,
        "devices": [{**d, "compute_capability": _capability(d)} for d in state.devices],
        "driver_version": state.driver_version,
        "runtime_version": state.runtime_version,
    }


# ----------------------------------------------------------------- CUDA backend


def _engine_config(config: ModelConfig) -> dict[str, Any]:
    """The config.json fields the native engine reads."""
    return {
        "n_token": config.n_token,
        "hidden_dim": config.hidden_dim,
        "style_dim": config.style_dim,
        "n_layer": config.n_layer,
        "max_dur": config.max_dur,
        "text_encoder_kernel_size": config.text_encoder_kernel_size,
        "plbert": dict(config.plbert),
        "istftnet": dict(config.istftnet),
    }


def _engine_seed(deterministic: bool, seed: int | None) -> int:
    """The engine's 64-bit seed: 0 when deterministic (unused), fresh when None."""
    if deterministic:
        return 0
    return (secrets.randbits(64) if seed is None else int(seed)) % 2**64


class CUDABackend(Backend):
    """The native engine on one GPU: weights uploaded once, one call per utterance (or batch)."""

    device = "cuda"

    def __init__(
        self,
        config: ModelConfig,
        weights: dict[str, np.ndarray],
        precision: str = "fp32",
        state: CudaState | None = None,
    ) -> None:
        if precision not in PRECISIONS:
            raise InputError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
        state = state or cuda_state()
        if not state.usable or state.native is None or state.device_index is None:
            raise BackendError(f"CUDA is unavailable: {state.reason}")
        self.precision = precision
        self.device_index = state.device_index
        self.device_name = next(d["name"] for d in state.devices if d["index"] == state.device_index)
        self._engine = state.native.Engine(_engine_config(config), weights, state.device_index, precision)
        self.lanes = int(self._engine.batch_lanes)

    def forward(
        self,
        input_ids: np.ndarray,
        ref_s: np.ndarray,
        speed: float,
        *,
        deterministic: bool,
        seed: int | None,
        trace: dict[str, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        audio, durations, intermediates = self._engine.forward(
            _ids(input_ids),
            _style(ref_s),
            float(speed),
            deterministic,
            _engine_seed(deterministic, seed),
            trace is not None,
        )
        if trace is not None:
            trace.update(intermediates)
        return audio, durations

    def forward_batch(
        self, items: Sequence[BatchItem], *, deterministic: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The utterances run concurrently on the engine's lanes (streams with their own workspaces)."""
        return [
            tuple(pair)
            for pair in self._engine.forward_batch(_engine_items(items, deterministic), deterministic)
        ]

    def phase_runs(self) -> dict[str, int] | None:
        return {run: int(count) for run, count in self._engine.phase_runs.items()}

    def forward_on_lane(
        self,
        lane: int,
        items: Sequence[BatchItem],
        *,
        deterministic: bool,
        on_result: ResultCallback | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The utterances on one lane, concurrently with other lanes' calls (a scheduler thread per lane).

        The engine hands each result to ``on_result`` as soon as its audio is in host memory, while the
        lane runs the rest of the call (a group's short chunks do not wait for its long ones).
        """
        pairs = self._engine.forward_on_lane(
            lane, _engine_items(items, deterministic), deterministic, on_result
        )
        return [tuple(pair) for pair in pairs]


def _engine_items(
    items: Sequence[BatchItem], deterministic: bool
) -> list[tuple[np.ndarray, np.ndarray, float, int]]:
    return [
        (_ids(ids), _style(ref_s), float(speed), _engine_seed(deterministic, seed))
        for ids, ref_s, speed, seed in items
    ]


def _ids(input_ids: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(input_ids).reshape(-1), dtype=np.int64)


def _style(ref_s: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(ref_s).reshape(-1), dtype=np.float32)


# -------------------------------------------------------------------- selection


def resolve_device(device: str) -> str:
    """Map ``"auto"`` to a concrete device; check the name and, for ``"cuda"``, that CUDA is usable.

    ``"auto"`` without usable CUDA logs one line saying why (a warning, or INFO on a machine
    without an NVIDIA driver or GPU) and yields ``"cpu"``.
    """
    if device not in DEVICES:
        raise InputError(f"unknown device {device!r}; use one of {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    state = cuda_state()
    if state.usable:
        return "cuda"
    if device == "cuda":
        raise BackendError(f"device='cuda' was requested but CUDA is unavailable: {state.reason}")
    level = logging.INFO if driver_problem() is not None else logging.WARNING
    logger.log(level, "kokoro_gpu: using the CPU backend: %s", state.reason)
    return "cpu"


def create_backend(
    device: str, config: ModelConfig, weights: dict[str, np.ndarray], precision: str = "fp32"
) -> Backend:
    """Build the backend for ``device`` (``"auto"``, ``"cpu"`` or ``"cuda"``) and ``precision``.

    Under ``"auto"`` a CUDA engine that fails to start (out of memory, a
    broken driver) also falls back to the CPU backend, with one warning.
    """
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    if resolve_device(device) == "cuda":
        try:
            return CUDABackend(config, weights, precision)
        except BackendError as e:
            if device == "cuda":
                raise
            logger.warning("kokoro_gpu: using the CPU backend: the CUDA engine failed to start: %s", e)
    return CPUBackend(config, weights, precision)
