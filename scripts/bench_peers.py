"""The peers of the benchmarks (``scripts/bench.py`` and ``scripts/bench_cpu.py``): the official
PyTorch KModel (kokoro 0.9.4) built from a checkpoint, on CUDA or on the CPU, with CUDA events
around its generator; and kokoro-onnx's int8 ONNX file in an onnxruntime CPU session."""

from __future__ import annotations

import statistics
import sys
import tempfile
import types
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kokoro_gpu.config import ModelConfig

KOKORO_REPO_ID = "hexgrad/Kokoro-82M"


# ------------------------------------------------------------------ PyTorch


def import_torch() -> Any | None:
    """The torch module, or None where it is not importable."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _stub_misaki() -> None:
    """kokoro/__init__ imports misaki's G2P, unused here: stand-ins whose every public name is a class."""

    def placeholder(name: str) -> type:
        if name.startswith("_"):  # module protocol names (__file__, __path__) stay missing
            raise AttributeError(name)
        return type(name, (), {})

    misaki = types.ModuleType("misaki")
    for sub in ("en", "espeak"):
        module = types.ModuleType(f"misaki.{sub}")
        module.__getattr__ = placeholder  # type: ignore[method-assign]
        sys.modules.setdefault(f"misaki.{sub}", module)
        setattr(misaki, sub, sys.modules[f"misaki.{sub}"])
    sys.modules.setdefault("misaki", misaki)


def build_torch_model(
    torch: Any, config: ModelConfig, ckpt: Mapping[str, Mapping[str, np.ndarray]], device: str = "cuda"
) -> Any:
    """The official KModel on `device` with the checkpoint's weights, every tensor checked loaded."""
    _stub_misaki()
    from kokoro.model import KModel

    state = {top: {k: torch.from_numpy(np.array(v)) for k, v in sd.items()} for top, sd in ckpt.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kokoro-random.pth"
        torch.save(state, path)
        with warnings.catch_warnings():  # its deprecated weight_norm, LSTM dropout with one layer
            warnings.simplefilter("ignore")
            model = KModel(repo_id=KOKORO_REPO_ID, config=dict(config.raw), model=str(path))
    # KModel falls back to load_state_dict(strict=False): check every tensor arrived.
    for top, sd in state.items():
        loaded = getattr(model, top).state_dict()
        for key, value in sd.items():
            name = key.removeprefix("module.")
            if name not in loaded or not torch.equal(loaded[name].cpu(), value):
                raise RuntimeError(f"PyTorch KModel did not load {top}.{key}")
    return model.to(device).eval()


def torch_runner(config: ModelConfig, weights: dict[str, np.ndarray]) -> Callable[..., np.ndarray]:
    """The official KModel on the CPU with the weights of `weights` (weight norm re-split as
    g = |w|, v = w), default threading: ids, style row and speed to audio."""
    import torch

    from kokoro_gpu.convert import official_from_folded

    ckpt: dict[str, dict[str, np.ndarray]] = {}
    for name, arr in official_from_folded(weights, config).items():
        top, key = name.split(".", 1)
        ckpt.setdefault(top, {})[key] = arr
    model = build_torch_model(torch, config, ckpt, device="cpu")

    def run(ids: np.ndarray, ref_s: np.ndarray, speed: float) -> np.ndarray:
        with torch.no_grad():
            audio, _ = model.forward_with_tokens(
                torch.from_numpy(ids)[None], torch.from_numpy(ref_s)[None], speed)
        return audio.numpy().reshape(-1)

    return run


class GeneratorTimer:
    """CUDA events around every decoder.generator forward of a torch model."""

    def __init__(self, torch: Any, model: Any) -> None:
        self._torch = torch
        self._pending: list[tuple[Any, Any]] = []
        gen = model.decoder.generator
        gen.register_forward_pre_hook(self._start)
        gen.register_forward_hook(self._stop)

    def _start(self, *_: Any) -> None:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        self._pending.append((event, None))

    def _stop(self, *_: Any) -> None:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        self._pending[-1] = (self._pending[-1][0], event)

    def reset(self) -> None:
        self._pending.clear()

    def median_s(self) -> float | None:
        self._torch.cuda.synchronize()
        times = [a.elapsed_time(b) / 1e3 for a, b in self._pending if b is not None]
        return statistics.median(times) if times else None


# -------------------------------------------------------------- onnxruntime


def default_onnx(model: str) -> Path | None:
    """The int8 ONNX file of ``model`` when it names one (file or directory), else the real model's."""
    path = Path(model)
    candidates = [path] if path.suffix == ".onnx" else []
    if path.is_dir():
        candidates = sorted(path.glob("*int8*.onnx"))
    if not candidates:
        from kokoro_gpu.real_model import ONNX_FILENAME, real_model_dir

        candidates = [real_model_dir() / ONNX_FILENAME]
    return next((c for c in candidates if c.is_file()), None)


def onnx_runner(path: Path) -> Callable[[np.ndarray, np.ndarray, float], np.ndarray]:
    """kokoro-onnx's model at `path` in an onnxruntime CPU session (default threading): ids,
    style row and speed to audio."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(ids: np.ndarray, ref_s: np.ndarray, speed: float) -> np.ndarray:
        feeds = {"tokens": ids[None].astype(np.int64), "style": ref_s[None].astype(np.float32),
                 "speed": np.array([speed], dtype=np.float32)}
        return np.asarray(session.run(None, feeds)[0]).reshape(-1)

    return run
