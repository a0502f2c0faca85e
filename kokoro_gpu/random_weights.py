"""Seeded random checkpoints in the exact official layout, for tests and benchmarks.

Real weights cannot be assumed present, so parity and performance are measured on
random weights. Plain i.i.d. noise makes a network that behaves unlike a trained
one in exactly the places that matter numerically (docs REFERENCE "Numerical
traps"): the F0 comes out near 0 Hz (unvoiced), every token gets the same
duration, activations drift. The scales below keep activations of order one
through every block, give a voiced F0 that moves between tokens (100..250 Hz),
durations of roughly 1..6 frames (mean ~3) and audio of a sane amplitude.

Every tensor draws from its own generator seeded by ``(seed, crc32(name))``, so a
tensor's values do not depend on which other tensors the layout holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from .checkpoint import flatten_official as _flatten
from .config import ModelConfig
from .layout import official_layout, split_folded_name

__all__ = [
    "PHASE_INPUT_CHANNELS",
    "checkpoint_digest",
    "flatten_official",
    "random_checkpoint",
    "random_voice_pack",
    "write_model_dir",
]

Checkpoint = dict[str, dict[str, np.ndarray]]

# Input channels of generator.noise_convs.* that carry the source STFT phase
# (the 22 channels are n_fft/2 + 1 = 11 magnitudes, then 11 phases).
PHASE_INPUT_CHANNELS = slice(11, 22)

# Voice packs: style vectors of this standard deviation, drifting slowly over the rows.
_STYLE_STD = 0.2
_STYLE_DRIFT = 0.05
# AdaIN / AdaLayerNorm fc: gamma and beta of about 0.15 for styles of _STYLE_STD.
_FC_STD = 0.15 / (_STYLE_STD * np.sqrt(128.0))
# Predicted F0 (Hz): mean and spread over time, set through F0_proj.
_F0_MEAN_HZ = 170.0
_F0_STD_HZ = 20.0
# Durations: sum over max_dur sigmoids of (bias + shared per-token shift); bias -3
# gives ~3 frames per token, the shift (std ~0.6 over tokens) spreads it over ~1..6.
_DUR_BIAS = -3.0
_DUR_SHIFT_GAIN = 4.0
# conv_post: log-magnitude channels (the first 11) centred here and scaled by the
# filter norm, so the iSTFT output has an amplitude of ~0.1 and rarely exceeds 1.
_LOG_MAG_BIAS = -1.5
_CONV_POST_GAIN = 0.7
# ALBERT applies one post-LayerNorm layer 12 times; branches at full scale average
# the tokens into one vector (rank collapse), a trained model keeps them distinct.
_ALBERT_BRANCH_GAIN = 0.15
# generator.ups.i weight-norm magnitudes (per input channel): an output sums
# Cin * K / stride taps of v / ||v|| (||v|| over Cout * K), so g = sqrt(Cout * stride / Cin)
# keeps the variance; v1.0: 512 -> 256 stride 10, 256 -> 128 stride 6.
_UPS_GAIN = {0: np.sqrt(5.0), 1: np.sqrt(3.0)}


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float, mean: float = 0.0) -> np.ndarray:
    return (mean + std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(np.float32)


def _weight_g(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Filter norms: ~1 (unit-variance output) except where the input scale or stride differs."""
    if ".generator.ups." in name:
        gain = float(_UPS_GAIN.get(int(name.split(".ups.")[1].split(".")[0]), 1.0))
    elif name.endswith(".pool.weight_g"):
        gain = float(np.sqrt(2.0))  # depthwise k3 stride 2: 1.5 taps per output on average
    elif ".generator.conv_post." in name:
        gain = _CONV_POST_GAIN
    elif "decoder.module.F0_conv" in name:
        gain = 0.005  # its input is F0 in Hz (~170): bring it to order one
    elif ".generator.resblocks." in name or ".generator.noise_res." in name:
        gain = 0.5  # residual branches added three times per block
    else:
        gain = 1.0
    return _uniform(rng, shape, 0.8 * gain, 1.2 * gain)


def _lstm(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    k = 1.0 / np.sqrt(shape[0] // 4)  # PyTorch's default LSTM init: U(-1/sqrt(H), 1/sqrt(H))
    return _uniform(rng, shape, -k, k)


def _duration_proj(shape: tuple[int, ...], rng: np.random.Generator, bias: bool) -> np.ndarray:
    """All max_dur outputs share one direction, so a token's sigmoids move together."""
    if bias:
        return _normal(rng, shape, 0.3, _DUR_BIAS)
    n_out, n_in = shape
    direction = rng.standard_normal(n_in)
    direction /= np.linalg.norm(direction)
    per_output = 1.0 + 0.2 * rng.standard_normal(n_out)
    shared = _DUR_SHIFT_GAIN * np.outer(per_output, direction)
    return (shared + 0.02 * rng.standard_normal(shape)).astype(np.float32)


def _tensor(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """One official tensor (``top.module.key``), drawn by what the layer does."""
    rng = _rng(seed, name)
    leaf = name.rsplit(".", 1)[1]
    if leaf == "weight_v":
        return _normal(rng, shape, 1.0)
    if leaf == "weight_g":
        return _weight_g(name, shape, rng)
    if name.endswith(".generator.conv_post.bias"):
        bias = _normal(rng, shape, 0.02)
        bias[: PHASE_INPUT_CHANNELS.start] += _LOG_MAG_BIAS
        return bias
    if leaf.startswith(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")):
        return _lstm(shape, rng)
    if ".duration_proj." in name:
        return _duration_proj(shape, rng, bias=leaf == "bias")
    if name.endswith(".F0_proj.weight"):
        # Shared LSTM + AdainResBlk stack leave ~unit activations over 256 channels.
        return _normal(rng, shape, _F0_STD_HZ / np.sqrt(shape[1]))
    if name.endswith(".F0_proj.bias"):
        return np.full(shape, _F0_MEAN_HZ, dtype=np.float32)
    if ".alpha1." in name or ".alpha2." in name:
        return _uniform(rng, shape, 0.6, 1.4)  # Snake frequencies: positive, ~1
    if "LayerNorm" in name or "layer_norm" in name or leaf in ("gamma", "beta"):
        is_scale = leaf in ("weight", "gamma")
        return _normal(rng, shape, 0.05, 1.0) if is_scale else _normal(rng, shape, 0.02)
    if "_embeddings." in name:
        return _normal(rng, shape, 0.02)  # ALBERT's init; a LayerNorm follows
    if name.endswith("text_encoder.module.embedding.weight"):
        return _normal(rng, shape, 1.0)
    if leaf == "bias":
        return _normal(rng, shape, 0.02)
    if name.endswith(".fc.weight"):
        return _normal(rng, shape, _FC_STD)
    if name.endswith("l_linear.weight"):
        return _normal(rng, shape, 1.0)  # 9 harmonics of amplitude 0.1 -> source of ~0.3
    if name.endswith(("attention.dense.weight", "ffn_output.weight")):
        return _normal(rng, shape, _ALBERT_BRANCH_GAIN / np.sqrt(shape[1]))
    if leaf == "weight":
        # Linear, or a convolution without weight norm: variance preserving.
        return _normal(rng, shape, 1.0 / np.sqrt(np.prod(shape[1:])))
    raise AssertionError(f"random_weights has no rule for {name} {shape}")


def random_checkpoint(config: ModelConfig, seed: int, *, zero_phase_inputs: bool = False) -> Checkpoint:
    """A checkpoint in the official structure ``{top: {"module.<key>": float32 array}}``.

    ``zero_phase_inputs`` zeroes the phase-input channels of every
    ``decoder.generator.noise_convs.*`` weight: the source STFT phase is rounding
    noise where its magnitude is ~0, and these channels carry it into the audio.
    """
    out: Checkpoint = {}
    for name, shape in official_layout(config).items():
        top, key = split_folded_name(name)
        arr = _tensor(name, shape, seed)
        if zero_phase_inputs and ".generator.noise_convs." in name and name.endswith(".weight"):
            arr[:, PHASE_INPUT_CHANNELS, :] = 0.0
        out.setdefault(top, {})[key] = arr
    return out


def flatten_official(ckpt: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``{top: {key: array}}`` -> ``{"top.key": array}`` (the .safetensors naming)."""
    return _flatten(ckpt, "random checkpoint")


def checkpoint_digest(ckpt: Mapping[str, Mapping[str, np.ndarray]]) -> str:
    """SHA-256 over names, shapes and float32 bytes: detects any drift in the generator."""
    h = hashlib.sha256()
    for name, arr in sorted(flatten_official(ckpt).items()):
        a = np.ascontiguousarray(arr, dtype=np.float32)
        h.update(f"{name}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def random_voice_pack(seed: int) -> np.ndarray:
    """A voice pack float32 ``[510, 1, 256]``: one style plus a slow drift over the rows."""
    rng = np.random.default_rng([seed, zlib.crc32(b"voice")])
    base = rng.standard_normal(256) * _STYLE_STD
    drift = rng.standard_normal(256) * _STYLE_DRIFT
    rows = np.linspace(-1.0, 1.0, 510)[:, None]
    return (base + rows * drift).astype(np.float32).reshape(510, 1, 256)


DEFAULT_VOICES = ("af_heart", "af_bella", "am_adam", "bf_emma")


def write_model_dir(
    path: str | Path,
    seed: int = 0,
    *,
    config: ModelConfig | None = None,
    voices: Iterable[str] = DEFAULT_VOICES,
) -> Path:
    """A complete local model directory loadable by ``KokoroTTS.from_pretrained(model=path)``.

    Writes ``config.json``, ``kokoro-v1_0.safetensors`` (random weights of ``seed``)
    and ``voices/NAME.safetensors`` (tensor ``voice``): the i-th name gets
    ``random_voice_pack(seed * 1000 + i)``.
    """
    cfg = config or ModelConfig.load()
    root = Path(path)
    (root / "voices").mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(cfg.raw, ensure_ascii=False, indent=1), encoding="utf-8")
    _save(flatten_official(random_checkpoint(cfg, seed)), root / "kokoro-v1_0.safetensors")
    for i, name in enumerate(voices):
        _save({"voice": random_voice_pack(seed * 1000 + i)}, root / "voices" / f"{name}.safetensors")
    return root


def _save(tensors: dict[str, np.ndarray], path: Path) -> None:
    """safetensors' save_file, with the file mode a plain open() gives (it writes 0600)."""
    from safetensors.numpy import save_file

    save_file(tensors, str(path))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)
