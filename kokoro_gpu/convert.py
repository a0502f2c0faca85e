"""kokoro-convert: a .pth checkpoint or a kokoro-onnx .onnx model (and voice packs) -> .safetensors.

The checkpoint is validated against the layout of the config and written in
the OFFICIAL structure flattened to ``top.module.key`` names, so the output is
read by :func:`kokoro_gpu.checkpoint.load_checkpoint` like the original:

- a ``.pth`` keeps its tensors as stored (weight norm as ``weight_g`` / ``weight_v``);
- an ``.onnx`` holds weight norm folded (``w = g v / |v|``), so each such ``w``
  is written as ``weight_v = w`` and ``weight_g = |w|`` per channel (a channel
  that is all zeros as ``v = 1``, ``g = 0``), which folds back to ``w``; the
  ALBERT pooler, absent from the export and unused by inference, is zeros.

Voice packs (``--voices``: a directory of ``NAME.pt`` / ``.safetensors`` / ``.npy``
files or a ``voices-v1.0.bin`` archive, or such an archive itself) become
``NAME.safetensors`` holding one tensor ``voice``. Everything is read and
checked before the first file is written. Existing files are only replaced
with ``--overwrite``; every file is written to a temporary name in its
directory and renamed, and an error or a signal (SIGINT, SIGTERM, SIGHUP)
midway removes the temporary file and the outputs this run already wrote.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from .checkpoint import flatten_official, fold_official
from .config import ModelConfig
from .errors import CheckpointError, InputError, KokoroError, VoiceError
from .layout import official_layout, split_folded_name, weight_norm_names
from .onnx_weights import ONNX_SUFFIX, load_onnx_weights
from .output import Terminated, atomic_path, signals_unwind
from .pth import read_pth
from .voices import SAFETENSORS_KEY, VoiceStore

# Voice archives in kokoro-onnx's format (an npz of [510, 1, 256] arrays).
VOICE_ARCHIVE_SUFFIXES = (".bin", ".npz")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kokoro-convert",
        description="Convert a Kokoro .pth checkpoint or kokoro-onnx .onnx model (and voices) "
                    "to .safetensors.")
    p.add_argument("checkpoint", type=Path,
                   help="input: kokoro-v1_0.pth, or kokoro-onnx's kokoro-v1.0(.fp16|.int8).onnx")
    p.add_argument("output", type=Path, help="output file (.safetensors)")
    p.add_argument("--config", type=Path, help="the checkpoint's config.json (default: bundled v1.0)")
    p.add_argument("--voices", type=Path, metavar="PATH",
                   help="voice packs to convert: a directory (NAME.pt, ...) or a voices-v1.0.bin archive")
    p.add_argument("--voices-out", type=Path, metavar="DIR", help="where NAME.safetensors voice files go")
    p.add_argument("--overwrite", action="store_true", help="replace output files that already exist")
    return p


def _check_free(paths: Sequence[Path], overwrite: bool) -> None:
    taken = [str(p) for p in paths if p.exists()]
    if taken and not overwrite:
        shown = ", ".join(taken[:3]) + (f" and {len(taken) - 3} more" if len(taken) > 3 else "")
        raise InputError(f"output exists: {shown}; pass --overwrite to replace it")


def _write(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """Write via a temporary file in the same directory, then rename (never a half-written output)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def official_from_folded(weights: dict[str, np.ndarray], config: ModelConfig) -> dict[str, np.ndarray]:
    """Folded weights -> flat official ``top.module.key`` tensors, weight norm as (|w|, w) pairs."""
    wn = weight_norm_names(config)
    out: dict[str, np.ndarray] = {}
    for name, w in weights.items():
        top, rest = split_folded_name(name)
        if name not in wn:
            out[f"{top}.module.{rest}"] = np.ascontiguousarray(w, dtype=np.float32)
            continue
        flat = w.reshape(w.shape[0], -1).astype(np.float64)
        norm = np.sqrt(np.square(flat).sum(axis=1))
        # A zero channel has no direction; any v with g = 0 folds back to zeros.
        v = np.where((norm == 0)[:, None], 1.0, flat).reshape(w.shape)
        stem = f"{top}.module.{rest[: -len('.weight')]}"
        out[f"{stem}.weight_g"] = norm.astype(np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
        out[f"{stem}.weight_v"] = np.ascontiguousarray(v, dtype=np.float32)
    missing = sorted(set(official_layout(config)) - set(out))
    if missing:
        raise CheckpointError(f"the weights lack {len(missing)} tensors of the layout (e.g. {missing[0]})")
    return out


def _voice_packs(voices: Path) -> dict[str, np.ndarray]:
    """Every voice pack of a directory or a voices archive, read and validated."""
    if voices.is_file() and voices.suffix.lower() in VOICE_ARCHIVE_SUFFIXES:
        # Read by the store's bounded archive reader, as a model's voices-v1.0.bin is.
        store = VoiceStore(None, None, archive=voices)
    elif voices.is_dir():
        store = VoiceStore(voices, None)
    else:
        raise VoiceError(f"voices not found: {voices}; pass a directory of voice packs or a voices-v1.0.bin")
    packs = {name: store.load(name) for name in store.available()}
    if not packs:
        raise VoiceError(f"no voice packs (NAME.pt, .safetensors, .npy, voices-v1.0.bin) in {voices}")
    return packs


def convert(checkpoint: Path, output: Path, *, config: ModelConfig, voices: Path | None = None,
            voices_out: Path | None = None, overwrite: bool = False) -> list[Path]:
    """Convert; return the files written. Raises KokoroError / OSError, leaving no output on failure."""
    if output.suffix != ".safetensors":
        raise CheckpointError(f"output {output} must end in .safetensors")
    packs: dict[str, np.ndarray] = {}
    voice_files: dict[str, Path] = {}
    if voices is not None and voices_out is not None:
        packs = _voice_packs(voices)
        voice_files = {name: voices_out / f"{name}.safetensors" for name in packs}
    _check_free([output, *voice_files.values()], overwrite)

    if checkpoint.suffix.lower() == ONNX_SUFFIX:
        tensors = official_from_folded(load_onnx_weights(checkpoint, config), config)
        fold_official(tensors, config, source=str(checkpoint))  # the output reads back as the input
        fmt = "kokoro-official-from-onnx"
    else:
        state = flatten_official(read_pth(checkpoint), str(checkpoint))
        fold_official(state, config, source=str(checkpoint))  # validation only: the output keeps g / v
        tensors = {k: np.ascontiguousarray(v) for k, v in state.items()}
        fmt = "kokoro-official"

    written: list[Path] = []
    try:
        _write(output, tensors, {"format": fmt, "source": checkpoint.name})
        written.append(output)
        for name, path in voice_files.items():
            _write(path, {SAFETENSORS_KEY: packs[name]}, {"format": "kokoro-voice", "name": name})
            written.append(path)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.voices is None) != (args.voices_out is None):
        parser.error("--voices and --voices-out go together")
    try:
        with signals_unwind():
            written = convert(args.checkpoint, args.output, config=ModelConfig.load(args.config),
                              voices=args.voices, voices_out=args.voices_out, overwrite=args.overwrite)
    except (KokoroError, OSError) as e:
        print(f"kokoro-convert: error: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Terminated):
        print("kokoro-convert: interrupted; no output written", file=sys.stderr)
        return 130
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
