"""Benchmark of the performance issue: kokoro_gpu against the official PyTorch Kokoro.

Both run the same seeded random checkpoint (``kokoro_gpu.random_weights``; real
weights are not assumed present), batch 1, phonemes to audio, on one device:

- ``short`` / ``medium`` / ``long``: 30 / 157 / 500 phonemes, with the speed
  of each case set so that the audio is as long as in the issue's PyTorch
  table (2.35 / 11.9 / 30.7 s): the random checkpoint's duration head predicts
  its own lengths (3.2-4 frames per phoneme), so one calibration forward at
  speed 1 gives the frame count and the speed is that over the issue's. Both
  implementations then run the same ids, voice row and speed;
- ``batch``: many medium utterances through a batched forward
  (``forward_batch`` of the backend) when the engine has one, else reported as
  not available. Its note gives the GPU's median power draw and SM clock over
  its runs (nvidia-smi, where present): a batch runs at the power limit, where
  the driver lowers the clock.

Per case and implementation one table row: median and min latency over
``--repeats`` runs after ``--warmup`` runs (wall clock around a call that
returns host audio for kokoro_gpu; around a CUDA-synchronised call that leaves
the audio on the GPU for PyTorch), x real time, speedup over PyTorch, GPU
memory, and the generator's achieved TFLOP/s against the peak measured here.

Generator FLOPs are 2 x the MACs of every conv and transposed conv in
``decoder.generator`` at the case's frame count, from the weight layout. For
PyTorch the generator is timed alone (CUDA events around its forward); the
native engine exposes no per-part timing, so its rate divides by the whole
forward (a lower bound, marked "whole fwd").

``--phases`` adds, per case and precision, the engine's wall-clock breakdown:
timing events at the model's phase boundaries, recorded inside its CUDA graphs
(``Engine.set_phase_timing``), as the median ms of each mark since the start.

``--lstm`` adds the per-step time of ``lstm_bidirectional`` (H = 256) through
the op binding: each call's time minus that of an op with the same output
transfer, fitted over T.

PyTorch (on the device machine: ``kokoro`` and ``loguru`` wheels in .whl)::

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site python3 scripts/bench.py --json $OUT/bench.json --md $OUT/bench.md

``--device cpu`` runs the CPU benchmark of ``scripts/bench_cpu.py`` instead: real weights
(``--model``), the onnxruntime int8 and PyTorch CPU peers beside kokoro_gpu, cases
``short``, ``long`` and ``ttfa`` (time to first audio of ``stream()``). Smoke test:
``python3 scripts/bench.py --device cpu --no-torch --no-ort --cases short --repeats 1 --warmup 0``.

The instruments (call timing, power sampler, matrix-product peaks, generator FLOPs, LSTM probe)
are in ``scripts/bench_measure.py``; the PyTorch and onnxruntime peers in ``scripts/bench_peers.py``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from bench_measure import (
    PowerSampler,
    device_used_bytes,
    generator_flops,
    lstm_probe,
    measure_peaks,
    no_sync,
    time_calls,
)
from bench_peers import GeneratorTimer, build_torch_model, import_torch

from kokoro_gpu import backends
from kokoro_gpu.checkpoint import fold_official
from kokoro_gpu.config import SAMPLE_RATE, ModelConfig
from kokoro_gpu.random_weights import random_checkpoint, random_voice_pack
from kokoro_gpu.tokens import phonemes_to_ids

CASES = {"short": 30, "medium": 157, "long": 500}
CPU_CASES = ("short", "long", "ttfa")  # scripts/bench_cpu.py
BATCH_CASE = "batch"
# The PyTorch reference numbers of the issue (H200, kokoro 0.9.4, fp32 eager), ms.
ISSUE_TORCH_MS = {"short": 34.7, "medium": 54.3, "long": 107.6}
# ... and the audio length of each of its cases, s.
ISSUE_AUDIO_S = {"short": 2.35, "medium": 11.9, "long": 30.7}
SAMPLES_PER_FRAME = 600
# Phoneme strings: "words" of 2..6 vocab letters (IPA included) drawn with this seed.
PHONEME_SEED = 1234
# Phase breakdowns by precision and case: [(mark, median ms since the start)] in time order.
Phases = dict[str, dict[str, list[tuple[str, float]]]]


# ------------------------------------------------------------------- inputs


def phoneme_string(n: int, vocab: Mapping[str, int]) -> str:
    """n phoneme characters: seeded words of vocab letters separated by spaces, ending in '.'."""
    letters = sorted(c for c in vocab if c.isalpha())
    rng = np.random.default_rng(PHONEME_SEED)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < n:
        words.append("".join(rng.choice(letters, int(rng.integers(2, 7)))))
    return (" ".join(words)[: n - 1] + ".").replace(" .", "a.")


@dataclass
class Utterance:
    case: str
    phonemes: int
    ids: np.ndarray  # int64 [n + 2]
    ref_s: np.ndarray  # float32 [256]
    speed: float = 1.0


def make_utterance(case: str, n: int, config: ModelConfig, voice: np.ndarray) -> Utterance:
    ids = phonemes_to_ids(phoneme_string(n, config.vocab), config.vocab, config.max_phonemes)
    # The official pipeline picks the voice pack row by phoneme count.
    return Utterance(case, n, ids, np.ascontiguousarray(voice[n - 1, 0], dtype=np.float32))


def calibrate_speeds(
    device: str, config: ModelConfig, weights: dict[str, np.ndarray], utterances: list[Utterance]
) -> None:
    """Sets each utterance's speed so that its audio is about as long as the issue's case."""
    backend = backends.create_backend(device, config, weights, "fp32")
    for u in utterances:
        _, durations = backend.forward(u.ids, u.ref_s, 1.0, deterministic=True, seed=0)
        u.speed = float(np.sum(durations)) / (ISSUE_AUDIO_S[u.case] * SAMPLE_RATE / SAMPLES_PER_FRAME)


# --------------------------------------------------------------------- rows


@dataclass
class Row:
    impl: str
    precision: str
    case: str
    phonemes: int
    frames: int | None = None
    audio_s: float | None = None
    median_ms: float | None = None
    min_ms: float | None = None
    x_realtime: float | None = None
    speedup: float | None = None
    mem_mb: float | None = None
    mem_source: str = "n/a"
    gen_tflops: float | None = None
    gen_peak_pct: float | None = None
    gen_timing: str = ""
    note: str = ""
    times_ms: list[float] = field(default_factory=list)

    def fill_times(self, times: list[float]) -> None:
        self.times_ms = [t * 1e3 for t in times]
        self.median_ms = statistics.median(self.times_ms)
        self.min_ms = min(self.times_ms)
        if self.audio_s:
            self.x_realtime = self.audio_s / (self.median_ms / 1e3)


# ---------------------------------------------------------------- the runs


def run_ours(
    args: argparse.Namespace,
    config: ModelConfig,
    weights: dict[str, np.ndarray],
    utterances: list[Utterance],
    precision: str,
    torch: Any | None,
    phases: Phases,
) -> list[Row]:
    used0 = device_used_bytes(torch) if args.device == "cuda" else None
    backend = backends.create_backend(args.device, config, weights, precision)
    engine = getattr(backend, "_engine", None)
    sync = torch.cuda.synchronize if used0 is not None else no_sync
    rows = []
    for utt in utterances:
        row = Row("kokoro_gpu", precision, utt.case, utt.phonemes)

        def call(u: Utterance = utt) -> tuple[np.ndarray, np.ndarray]:
            return backend.forward(u.ids, u.ref_s, u.speed, deterministic=True, seed=0)

        audio, durations = call()
        row.frames, row.audio_s = int(np.sum(durations)), len(audio) / SAMPLE_RATE
        row.fill_times(time_calls(call, args.warmup, args.repeats, sync))
        if engine is not None and hasattr(engine, "weight_bytes") and hasattr(engine, "workspace_bytes"):
            row.mem_mb = (engine.weight_bytes + engine.workspace_bytes) / 2**20
            row.mem_source = "engine weights+workspace"
        elif used0 is not None:
            row.mem_mb = (device_used_bytes(torch) - used0) / 2**20
            row.mem_source = "cudaMemGetInfo delta"
        row.gen_timing = "whole fwd"
        rows.append(row)
        if args.phases and hasattr(engine, "set_phase_timing"):
            phases.setdefault(precision, {})[utt.case] = phase_breakdown(engine, call, args)
    rows.extend(run_ours_batch(args, backend, utterances, precision, sync))
    return rows


def phase_breakdown(
    engine: Any, call: Callable[[], Any], args: argparse.Namespace
) -> list[tuple[str, float]]:
    """Median ms since the start of each phase mark over args.repeats timed calls (graphs re-captured)."""
    engine.set_phase_timing(True)
    try:
        for _ in range(max(args.warmup, 2)):  # first sight runs uncaptured, the second captures
            call()
        samples: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            call()
            for name, ms in engine.phase_times():
                samples.setdefault(name, []).append(ms)
    finally:
        engine.set_phase_timing(False)
    marks = [(name, statistics.median(v)) for name, v in samples.items()]
    return sorted(marks, key=lambda m: m[1])


def render_phases(phases: Phases) -> str:
    """One block per precision and case: each mark's median ms since the start and since the previous mark."""
    lines = []
    for precision, cases in phases.items():
        for case, marks in cases.items():
            lines.append(f"phases, kokoro_gpu {precision}, {case} (ms since start, + since previous mark):")
            previous = 0.0
            for name, ms in marks:
                lines.append(f"  {ms:8.3f}  +{ms - previous:7.3f}  {name}")
                previous = ms
    return "\n".join(lines)


def run_ours_batch(
    args: argparse.Namespace,
    backend: Any,
    utterances: list[Utterance],
    precision: str,
    sync: Callable[[], None],
) -> list[Row]:
    """The throughput case: args.batch_size medium utterances through backend.forward_batch."""
    if BATCH_CASE not in args.cases:
        return []
    medium = next((u for u in utterances if u.case == "medium"), None)
    row = Row("kokoro_gpu", precision, f"{BATCH_CASE} x{args.batch_size} medium", CASES["medium"])
    forward_batch = getattr(backend, "forward_batch", None)
    if forward_batch is None or medium is None:
        row.note = (
            "not available: the backend has no forward_batch"
            if forward_batch is None
            else ("needs the medium case")
        )
        return [row]
    items = [(medium.ids, medium.ref_s, medium.speed, 0)] * args.batch_size

    def call() -> list[tuple[np.ndarray, np.ndarray]]:
        return forward_batch(items, deterministic=True)

    outputs = call()
    row.frames = int(sum(int(np.sum(d)) for _, d in outputs))
    row.audio_s = sum(len(a) for a, _ in outputs) / SAMPLE_RATE
    with PowerSampler() as power:
        row.fill_times(time_calls(call, args.warmup, args.repeats, sync))
    row.gen_timing = "whole fwd"
    row.note = power.summary()
    return [row]


def run_torch(
    args: argparse.Namespace,
    torch: Any,
    config: ModelConfig,
    ckpt: Mapping[str, Mapping[str, np.ndarray]],
    utterances: list[Utterance],
) -> list[Row]:
    model = build_torch_model(torch, config, ckpt)
    timer = GeneratorTimer(torch, model)
    rows = []
    for utt in utterances:
        row = Row("pytorch", "fp32 (defaults)", utt.case, utt.phonemes)
        ids = torch.from_numpy(utt.ids)[None].to("cuda")
        ref_s = torch.from_numpy(utt.ref_s)[None].to("cuda")

        def call(ids: Any = ids, ref_s: Any = ref_s, speed: float = utt.speed) -> tuple[Any, Any]:
            with torch.no_grad():
                return model.forward_with_tokens(ids, ref_s, speed)

        audio, durations = call()
        row.frames, row.audio_s = int(durations.sum()), audio.numel() / SAMPLE_RATE
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        timer.reset()
        row.fill_times(time_calls(call, args.warmup, args.repeats, torch.cuda.synchronize))
        row.mem_mb = torch.cuda.max_memory_allocated() / 2**20
        row.mem_source = "torch max_memory_allocated"
        gen_s = timer.median_s()
        if gen_s:
            row.gen_timing = "generator events"
            row.note = f"generator {gen_s * 1e3:.2f} ms"
            row.gen_tflops = generator_flops(config, row.frames) / gen_s / 1e12
        rows.append(row)
    if BATCH_CASE in args.cases:
        rows.append(
            Row(
                "pytorch",
                "fp32 (defaults)",
                f"{BATCH_CASE} x{args.batch_size} medium",
                CASES["medium"],
                note="not available: KModel.forward_with_tokens is batch 1",
            )
        )
    return rows


def finish_rows(rows: list[Row], config: ModelConfig, peaks: dict[str, float], torch_tf32: bool) -> None:
    """Speedups over PyTorch (same case), generator rates and their share of the matching peak."""
    torch_ms = {r.case: r.median_ms for r in rows if r.impl == "pytorch" and r.median_ms}
    if "bf16" in peaks:  # fp32 runs its tensor-core convs as three FP16 products per multiply-add
        peaks = {**peaks, "fp16x3": peaks["bf16"] / 3}
    for r in rows:
        if r.impl != "pytorch" and r.case in torch_ms and r.median_ms:
            r.speedup = torch_ms[r.case] / r.median_ms
        if r.gen_tflops is None and r.frames and r.median_ms:
            r.gen_tflops = generator_flops(config, r.frames) / (r.median_ms / 1e3) / 1e12
        if r.impl == "pytorch":
            peak_key = "tf32" if torch_tf32 else "fp32"
        else:
            peak_key = "fp16x3" if r.precision == "fp32" else "bf16"
        if r.gen_tflops is not None and peak_key in peaks:
            r.gen_peak_pct = 100.0 * r.gen_tflops / peaks[peak_key]
            r.gen_timing = f"{r.gen_timing}, vs {peak_key} peak"


# ------------------------------------------------------------------ output


def _fmt(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


COLUMNS = (
    "impl",
    "precision",
    "case",
    "phon",
    "frames",
    "audio s",
    "median ms",
    "min ms",
    "x RT",
    "speedup",
    "GPU mem MB",
    "gen TFLOP/s",
    "% peak",
    "notes",
)


def table_cells(r: Row) -> list[str]:
    notes = "; ".join(s for s in (r.mem_source if r.mem_mb is not None else "", r.gen_timing, r.note) if s)
    return [
        r.impl,
        r.precision,
        r.case,
        str(r.phonemes),
        _fmt(r.frames, "d"),
        _fmt(r.audio_s, ".2f"),
        _fmt(r.median_ms, ".2f"),
        _fmt(r.min_ms, ".2f"),
        _fmt(r.x_realtime, ".1f"),
        _fmt(r.speedup, ".1f") + ("x" if r.speedup else ""),
        _fmt(r.mem_mb, ".0f"),
        _fmt(r.gen_tflops, ".2f"),
        _fmt(r.gen_peak_pct, ".0f"),
        notes,
    ]


def render_text(rows: list[Row]) -> str:
    cells = [list(COLUMNS)] + [table_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(COLUMNS))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(rows: list[Row], meta: dict[str, Any]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    body = "".join("| " + " | ".join(table_cells(r)) + " |\n" for r in rows)
    facts = "".join(f"- {k}: {v}\n" for k, v in meta.items() if k not in ("lstm", "phases"))
    for probe in meta.get("lstm") or []:
        facts += f"- lstm_bidirectional H={probe['hidden']}: {probe['us_per_step']:.2f} us per step\n"
    if meta.get("phases"):
        facts += f"\n```\n{render_phases(meta['phases'])}\n```\n"
    return f"# kokoro_gpu benchmark\n\n{head}{body}\n{facts}"


# -------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument(
        "--cases",
        default=None,
        help=f"comma-separated subset of {', '.join([*CASES, BATCH_CASE])} (cuda; default all) "
        f"or of {', '.join(CPU_CASES)} (cpu; default all)",
    )
    p.add_argument("--model", default="kokoro-onnx-int8", help="cpu: the model (name, directory or file)")
    p.add_argument("--onnx", help="cpu: the int8 .onnx of the onnxruntime peer (default: the model's)")
    p.add_argument("--voice", default="jf_alpha", help="cpu: the voice of every case")
    p.add_argument("--no-ort", action="store_true", help="cpu: skip the onnxruntime peer")
    p.add_argument(
        "--precision",
        default="all",
        help=f"comma-separated kokoro_gpu precisions, or 'all' ({', '.join(backends.PRECISIONS)})",
    )
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="random checkpoint and voice seed")
    p.add_argument("--no-torch", action="store_true", help="skip the official PyTorch implementation")
    p.add_argument("--lstm", action="store_true", help="also time lstm_bidirectional per step (CUDA)")
    p.add_argument("--phases", action="store_true", help="also print the engine's per-phase breakdown (CUDA)")
    p.add_argument("--json", type=Path, help="write rows and facts as JSON here")
    p.add_argument("--md", type=Path, help="write the table as Markdown here")
    args = p.parse_args(argv)
    known = CPU_CASES if args.device == "cpu" else (*CASES, BATCH_CASE)
    args.cases = [c for c in re.split(r"[,\s]+", args.cases or ",".join(known)) if c]
    unknown = [c for c in args.cases if c not in known]
    if unknown:
        p.error(f"unknown case(s) {unknown}")
    if args.device == "cuda" and BATCH_CASE in args.cases and "medium" not in args.cases:
        args.cases.insert(0, "medium")
    args.precision = list(backends.PRECISIONS) if args.precision == "all" else args.precision.split(",")
    if args.repeats < 1 or args.warmup < 0:
        p.error("--repeats must be >= 1 and --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        from bench_cpu import main_cpu

        return main_cpu(args)
    config = ModelConfig.load()
    ckpt = random_checkpoint(config, args.seed)
    weights = fold_official(ckpt, config, source="random checkpoint")
    voice = random_voice_pack(args.seed)
    utterances = [make_utterance(c, n, config, voice) for c, n in CASES.items() if c in args.cases]
    calibrate_speeds(args.device, config, weights, utterances)

    torch = import_torch() if args.device == "cuda" else None
    if torch is not None and not torch.cuda.is_available():
        torch = None
    meta: dict[str, Any] = {
        "device": args.device,
        "seed": args.seed,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "batch_size": args.batch_size,
        "backend_info": {k: v for k, v in backends.backend_info().items() if k != "devices"},
    }
    peaks: dict[str, float] = {}
    torch_tf32 = False
    if torch is not None:
        torch.cuda.init()
        meta["gpu"] = torch.cuda.get_device_name()
        peaks = measure_peaks(torch)
        meta["peak_tflops"] = {k: round(v, 1) for k, v in peaks.items()}
        torch_tf32 = bool(torch.backends.cudnn.allow_tf32)
        meta["torch"] = {
            "version": torch.__version__,
            "cudnn.allow_tf32": torch_tf32,
            "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        }
    meta["issue_torch_ms"] = ISSUE_TORCH_MS
    meta["speeds"] = {u.case: round(u.speed, 4) for u in utterances}

    if args.lstm and args.device == "cuda":
        meta["lstm"] = lstm_probe(args.warmup, args.repeats)
    rows: list[Row] = []
    phases: Phases = {}
    for precision in args.precision:
        try:
            rows.extend(run_ours(args, config, weights, utterances, precision, torch, phases))
        except Exception as e:  # report and go on: the other rows still mean something
            traceback.print_exc()
            rows.append(Row("kokoro_gpu", precision, "all", 0, note=f"failed: {type(e).__name__}: {e}"))
    if not args.no_torch:
        if torch is None:
            meta["pytorch"] = "skipped: torch with CUDA not importable here"
        else:
            try:
                rows.extend(run_torch(args, torch, config, ckpt, utterances))
            except Exception as e:
                traceback.print_exc()
                meta["pytorch"] = f"failed: {type(e).__name__}: {e}"
    finish_rows(rows, config, peaks, torch_tf32)

    print(render_text(rows))
    if phases:
        meta["phases"] = phases
        print(render_phases(phases))
    for key in ("gpu", "peak_tflops", "torch", "pytorch", "speeds"):
        if key in meta:
            print(f"{key}: {meta[key]}")
    for probe in meta.get("lstm") or []:
        pts = ", ".join(
            f"T={p['T']}: {p['lstm_ms']:.2f} ms (transfer {p['baseline_ms']:.2f})" for p in probe["points"]
        )
        print(
            f"lstm_bidirectional H={probe['hidden']}: {probe['us_per_step']:.2f} us/step "
            f"(+{probe['fixed_us']:.0f} us fixed); {pts}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1, default=str),
            encoding="utf-8",
        )
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(render_markdown(rows, meta), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
