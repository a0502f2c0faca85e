"""Bit-identity check of the CUDA engine between two builds.

    python scripts/bit_identity.py --out A.npz          # with build A installed, on a GPU
    python scripts/bit_identity.py --out B.npz          # with build B installed
    python scripts/bit_identity.py --compare A.npz B.npz

The first form synthesizes a fixed, seeded set of cases with the installed package's CUDA backend, in
both precisions, and writes every audio and durations array to an .npz:
- the golden fixtures' inputs (tests/golden/*.npz, their random weights rebuilt from the stored seeds),
  deterministic, each run three times: the first run of a shape is uncaptured, the second captures its
  CUDA graphs, the third replays them;
- random-weights utterances of several lengths, deterministic and seeded (random phases and noise);
- a batch of mixed lengths through the engine's forward_batch (its lanes and token groups), and one
  through KokoroTTS.synthesize_batch (voices, speeds, a multi-chunk input).
The compare form reports, per array, whether the two files hold the same bits (and the largest
absolute difference where not), and exits 1 when any array differs or is missing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PRECISIONS = ("fp32", "fast")
RANDOM_LENGTHS = (12, 60, 180, 400)  # phonemes
BATCH_LENGTHS = (30, 90, 15, 240, 60, 60, 120, 8, 300, 45, 75, 20)


def golden_cases() -> list[Path]:
    return sorted((ROOT / "tests/golden").glob("*.npz"))


def random_utterance(n_token: int, n_phonemes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from kokoro_gpu.random_weights import random_voice_pack

    rng = np.random.default_rng(seed)
    ids = np.concatenate([[0], rng.integers(1, n_token, n_phonemes), [0]]).astype(np.int64)
    ref_s = random_voice_pack(seed)[n_phonemes - 1, 0]
    return ids, ref_s


def synthesize(out: Path) -> None:
    from kokoro_gpu.api import KokoroTTS
    from kokoro_gpu.backends import CUDABackend, cuda_state
    from kokoro_gpu.checkpoint import fold_official
    from kokoro_gpu.config import DEFAULT_CONFIG_PATH, ModelConfig
    from kokoro_gpu.random_weights import random_checkpoint, random_voice_pack
    from kokoro_gpu.voices import VoiceStore

    state = cuda_state()
    if not state.usable:
        sys.exit(f"bit_identity: CUDA is unavailable: {state.reason}")
    config = ModelConfig.load(DEFAULT_CONFIG_PATH)
    arrays: dict[str, np.ndarray] = {}

    def weights(seed: int, zero_phase: bool) -> dict[str, np.ndarray]:
        return fold_official(random_checkpoint(config, seed, zero_phase_inputs=zero_phase), config)

    def backends(folded: dict[str, np.ndarray]) -> Iterator[tuple[str, CUDABackend]]:
        for precision in PRECISIONS:
            backend = CUDABackend(config, folded, precision)
            yield precision, backend
            del backend

    # The golden fixtures' inputs, grouped by their weights.
    by_weights: dict[tuple[int, bool], list[tuple[str, dict[str, np.ndarray]]]] = {}
    for path in golden_cases():
        with np.load(path) as z:
            case = {k: z[k] for k in ("input_ids", "ref_s", "speed", "weight_seed", "zero_phase_inputs")}
        key = (int(case["weight_seed"]), bool(case["zero_phase_inputs"]))
        by_weights.setdefault(key, []).append((path.stem, case))
    for (seed, zero_phase), cases in sorted(by_weights.items()):
        for precision, backend in backends(weights(seed, zero_phase)):
            for name, case in cases:
                for run in (1, 2, 3):
                    audio, durations = backend.forward(
                        case["input_ids"], case["ref_s"], float(case["speed"]), deterministic=True, seed=None
                    )
                    arrays[f"golden/{name}/{precision}/run{run}/audio"] = audio
                    arrays[f"golden/{name}/{precision}/run{run}/durations"] = durations
            print(f"golden weights seed {seed}: {precision} done", flush=True)

    # Random weights: single utterances, a batch, synthesize_batch.
    folded = weights(0, True)
    with tempfile.TemporaryDirectory() as voices_dir:
        np.save(Path(voices_dir) / "af_test.npy", random_voice_pack(1))
        np.save(Path(voices_dir) / "bf_test.npy", random_voice_pack(2))
        for precision, backend in backends(folded):
            for n in RANDOM_LENGTHS:
                ids, ref_s = random_utterance(config.n_token, n, n)
                for mode, deterministic, seed in (("det", True, None), ("seed7", False, 7)):
                    for run in (1, 2):
                        audio, durations = backend.forward(
                            ids, ref_s, 0.9, deterministic=deterministic, seed=seed
                        )
                        arrays[f"random/{n}/{precision}/{mode}/run{run}/audio"] = audio
                        arrays[f"random/{n}/{precision}/{mode}/run{run}/durations"] = durations
            items = []
            for i, n in enumerate(BATCH_LENGTHS):
                ids, ref_s = random_utterance(config.n_token, n, 100 + i)
                items.append((ids, ref_s, 1.0 + 0.05 * (i % 3), 1000 + i))
            for deterministic in (True, False):
                for run in (1, 2):
                    results = backend.forward_batch(items, deterministic=deterministic)
                    for i, (audio, durations) in enumerate(results):
                        key = f"batch/{precision}/det{int(deterministic)}/run{run}/{i}"
                        arrays[f"{key}/audio"] = audio
                        arrays[f"{key}/durations"] = durations
            tts = KokoroTTS(config, backend, VoiceStore(Path(voices_dir), None))
            inputs = [
                "helo world",
                {"phonemes": "the kwik brawn foks", "voice": "bf_test", "speed": 1.2},
                {"phonemes": "jumps over the lazi dok " * 30, "seed": 77},
                "a litel mor tekst",
            ]
            for run in (1, 2):
                for i, result in enumerate(tts.synthesize_batch(inputs, voice="af_test", seed=40)):
                    arrays[f"synthesize_batch/{precision}/run{run}/{i}/audio"] = result.audio
                    arrays[f"synthesize_batch/{precision}/run{run}/{i}/durations"] = result.durations
            close = getattr(tts, "close", None)  # (a KokoroTTS that owns a scheduler)
            if close is not None:
                close()
            print(f"random weights: {precision} done", flush=True)
    np.savez(out, **arrays)
    print(f"bit_identity: {len(arrays)} arrays -> {out}")


def compare(a_path: Path, b_path: Path) -> int:
    with np.load(a_path) as a_file, np.load(b_path) as b_file:
        a = {k: a_file[k] for k in a_file.files}
        b = {k: b_file[k] for k in b_file.files}
    differing = 0
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            print(f"MISSING  {key}: only in {a_path if key in a else b_path}")
            differing += 1
            continue
        x, y = a[key], b[key]
        if x.shape != y.shape or x.dtype != y.dtype:
            print(f"DIFFERS  {key}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
            differing += 1
        elif x.tobytes() != y.tobytes():
            diff = np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))
            print(f"DIFFERS  {key}: max abs diff {diff:.3e}")
            differing += 1
    total = len(set(a) | set(b))
    print(f"bit_identity: {total - differing} of {total} arrays bit-identical")
    return 1 if differing else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="synthesize the cases into this .npz")
    group.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two .npz files")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    synthesize(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
