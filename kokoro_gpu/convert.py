"""kokoro-convert: a .pth checkpoint (and voice packs) -> .safetensors, without torch.

The checkpoint is read by the restricted reader, validated against the layout
of the config, and written in the OFFICIAL structure flattened to
``top.module.key`` names with weight norm kept as stored, so the output is a
faithful conversion that :func:`kokoro_gpu.checkpoint.load_checkpoint` reads
like the original. Voice packs become ``NAME.safetensors`` holding one tensor
``voice``. Existing files are only replaced with ``--overwrite``; every file is
written to a temporary name first and renamed into place.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from .checkpoint import flatten_official, fold_official
from .config import ModelConfig
from .errors import CheckpointError, InputError, KokoroError, VoiceError
from .pth import read_pth
from .voices import SAFETENSORS_KEY, VoiceStore


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kokoro-convert",
        description="Convert a Kokoro .pth checkpoint (and voice packs) to .safetensors.")
    p.add_argument("checkpoint", type=Path, help="input checkpoint (.pth), e.g. kokoro-v1_0.pth")
    p.add_argument("output", type=Path, help="output file (.safetensors)")
    p.add_argument("--config", type=Path, help="the checkpoint's config.json (default: bundled v1.0)")
    p.add_argument("--voices", type=Path, metavar="DIR", help="directory of voice packs (NAME.pt) to convert")
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
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        save_file(tensors, tmp, metadata=metadata)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def convert(checkpoint: Path, output: Path, *, config: ModelConfig, voices: Path | None = None,
            voices_out: Path | None = None, overwrite: bool = False) -> list[Path]:
    """Convert; return the files written. Raises KokoroError / OSError."""
    if output.suffix != ".safetensors":
        raise CheckpointError(f"output {output} must end in .safetensors")
    store = VoiceStore(voices, None)
    voice_files: dict[str, Path] = {}
    if voices is not None and voices_out is not None:
        if not voices.is_dir():
            raise VoiceError(f"voices directory not found: {voices}")
        voice_files = {name: voices_out / f"{name}.safetensors" for name in store.available()}
        if not voice_files:
            raise VoiceError(f"no voice packs (NAME.pt, .safetensors, .npy) in {voices}")
    _check_free([output, *voice_files.values()], overwrite)

    state = flatten_official(read_pth(checkpoint), str(checkpoint))
    fold_official(state, config, source=str(checkpoint))  # validation only: the output keeps g / v
    tensors = {k: np.ascontiguousarray(v) for k, v in state.items()}
    _write(output, tensors, {"format": "kokoro-official", "source": checkpoint.name})
    written = [output]

    for name, path in voice_files.items():
        _write(path, {SAFETENSORS_KEY: store.load(name)}, {"format": "kokoro-voice", "name": name})
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.voices is None) != (args.voices_out is None):
        parser.error("--voices and --voices-out go together")
    try:
        written = convert(args.checkpoint, args.output, config=ModelConfig.load(args.config),
                          voices=args.voices, voices_out=args.voices_out, overwrite=args.overwrite)
    except (KokoroError, OSError) as e:
        print(f"kokoro-convert: error: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
