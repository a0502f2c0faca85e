"""CPU benchmark (``scripts/bench.py --device cpu``): kokoro_gpu's NumPy backend beside the CPU peers.

On real weights (``--model``, default ``kokoro-onnx-int8``: kokoro-onnx's int8
export, dequantized), batch 1, phonemes to audio, on this machine's cores:

- ``kokoro_gpu`` fp32 (and ``fast`` where it differs) through ``backend.forward``;
- ``onnxruntime int8``: kokoro-onnx's int8 ONNX file itself (``--onnx``, by default
  the one of the ``kokoro-onnx-int8`` model) in an onnxruntime CPU session, default
  threading (one intra-op thread per core);
- ``pytorch fp32``: the official KModel (kokoro 0.9.4) on CPU with the same
  weights as ours (weight norm re-split as ``g = |w|, v = w``), default threading.

Cases: ``short`` and ``long`` English utterances (phonemised by the project's
front end, not timed), read with ``--voice``; every implementation gets the
same ids, style row and speed. Per row: median and min seconds over
``--repeats`` runs after ``--warmup`` runs, x real time (its own audio length
over the median), and its speed relative to each peer. Implementations
alternate run by run, so that load from other processes falls on all of them.

``ttfa``: time to first audio of ``KokoroTTS.stream()`` on a paragraph
(text in, G2P included, the front end loaded beforehand): the median over the
repeats of the seconds until the first chunk's audio is yielded; and the same
for the paragraph's first sentence alone (what the first audio would cost if
stream() cut its first chunk after one sentence).
"""

from __future__ import annotations

import argparse
import statistics
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from bench_peers import default_onnx, onnx_runner, torch_runner

from kokoro_gpu import backends
from kokoro_gpu.api import KokoroTTS
from kokoro_gpu.checkpoint import load_checkpoint, resolve_model
from kokoro_gpu.config import SAMPLE_RATE, ModelConfig
from kokoro_gpu.text import phonemize
from kokoro_gpu.tokens import phonemes_to_ids
from kokoro_gpu.voices import VoiceStore, style_for

TEXTS = {
    "short": "The quick brown fox jumps over the lazy dog. Please call Stella.",
    "long": (
        "Please call Stella. Ask her to bring these things with her from the store: six spoons of fresh "
        "snow peas, five thick slabs of blue cheese, and maybe a snack for her brother Bob. We also need "
        "a small plastic snake and a big toy frog for the kids. She can scoop these things into three red "
        "bags, and we will go meet her Wednesday at the train station."
    ),
}
PARAGRAPH = (
    "The town library opens at nine. On weekdays it is quiet, and the reading room fills with students "
    "who come to work before their classes. At noon the children arrive for story time, and the "
    "librarian reads to them from a big picture book. In the evening, neighbours meet there to talk "
    "about books, gardens and the weather, and nobody is in a hurry to go home."
)


@dataclass
class CpuRow:
    impl: str
    case: str
    phonemes: int
    audio_s: float | None = None
    times: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    @property
    def x_realtime(self) -> float | None:
        m = self.median_s
        return self.audio_s / m if m and self.audio_s else None


def time_ttfa(tts: KokoroTTS, text: str, voice: str, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        next(iter(tts.stream(text, voice=voice, lang="a")))
        times.append(time.perf_counter() - t0)
    return times


def run_cpu(args: argparse.Namespace) -> list[CpuRow]:
    files = resolve_model(args.model)
    config = ModelConfig.load(files.config_path)
    weights = load_checkpoint(files.checkpoint_path, config)
    voices = VoiceStore(files.voices_dir, files.repo_id)
    pack = voices.load(args.voice)

    # Phonemise before building the PyTorch peer: kokoro's import stubs misaki's G2P out.
    phonemes = {case: phonemize(TEXTS[case]) for case in args.cases if case in TEXTS}
    if "ttfa" in args.cases:
        phonemize(PARAGRAPH)  # loads (and keeps) the English front end
    impls: dict[str, Callable[[np.ndarray, np.ndarray, float], np.ndarray]] = {}
    ours: dict[str, Any] = {}
    for precision in args.precision:
        backend = backends.create_backend("cpu", config, weights, precision)
        if backend.precision != precision:
            continue  # "fast" maps to fp32 where the CPU backend cannot run bf16 GEMMs
        ours[precision] = backend
        impls[f"kokoro_gpu {precision}"] = (
            lambda ids, s, speed, b=backend: b.forward(ids, s, speed, deterministic=False, seed=0)[0])
    notes: dict[str, str] = {}
    onnx_path = None if args.no_ort else (Path(args.onnx) if args.onnx else default_onnx(args.model))
    for name, make in (("onnxruntime int8", lambda: onnx_runner(onnx_path)),
                       ("pytorch fp32", lambda: torch_runner(config, weights))):
        if (name.startswith("onnx") and args.no_ort) or (name.startswith("pytorch") and args.no_torch):
            continue
        if name.startswith("onnx") and onnx_path is None:
            notes[name] = "skipped: no int8 .onnx file found (--onnx)"
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                impls[name] = make()
        except Exception as e:  # report and go on: the other rows still mean something
            traceback.print_exc()
            notes[name] = f"failed: {type(e).__name__}: {e}"

    rows: list[CpuRow] = []
    for case, text in phonemes.items():
        ids = phonemes_to_ids(text, config.vocab, config.max_phonemes)
        ref_s = np.ascontiguousarray(style_for(pack, text), dtype=np.float32)
        case_rows = {name: CpuRow(name, case, len(text)) for name in impls}
        for name, fn in impls.items():
            case_rows[name].audio_s = len(fn(ids, ref_s, 1.0)) / SAMPLE_RATE
            for _ in range(args.warmup):
                fn(ids, ref_s, 1.0)
        for _ in range(args.repeats):  # alternate, so that outside load falls on every implementation
            for name, fn in impls.items():
                t0 = time.perf_counter()
                fn(ids, ref_s, 1.0)
                case_rows[name].times.append(time.perf_counter() - t0)
        rows.extend(case_rows.values())
        rows.extend(CpuRow(name, case, len(text), note=note) for name, note in notes.items())
    if "ttfa" in args.cases:
        for precision, backend in ours.items():
            tts = KokoroTTS(config, backend, voices)
            # The paragraph as stream() chunks it, and its first sentence alone: the latter is
            # the time to first audio if stream() made the first chunk one sentence.
            for label, text in (("paragraph", PARAGRAPH), ("first sentence", PARAGRAPH.split(". ")[0] + ".")):
                time_ttfa(tts, text, args.voice, max(1, args.warmup))
                row = CpuRow(f"kokoro_gpu {precision}", f"ttfa ({label})", len(phonemize(text)))
                row.times = time_ttfa(tts, text, args.voice, args.repeats)
                rows.append(row)
    return rows


def render(rows: list[CpuRow]) -> str:
    """A Markdown table: one row per implementation and case, with ours over each peer."""
    medians = {(r.impl, r.case): r.median_s for r in rows if r.median_s}
    peers = sorted({r.impl for r in rows if not r.impl.startswith("kokoro_gpu")})
    head = ["impl", "case", "phonemes", "audio s", "median s", "min s", "x real time",
            *(f"vs {p}" for p in peers), "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ratios = []
        for p in peers:
            theirs = medians.get((p, r.case))
            ours = r.median_s
            # x real time ratio: each implementation's own audio length over its own time.
            other = next((o for o in rows if o.impl == p and o.case == r.case), None)
            if theirs and ours and r.impl != p and other and other.x_realtime and r.x_realtime:
                ratios.append(f"{r.x_realtime / other.x_realtime:.2f}x")
            else:
                ratios.append("")
        cells = [r.impl, r.case, str(r.phonemes), f"{r.audio_s:.2f}" if r.audio_s else "",
                 f"{r.median_s:.3f}" if r.median_s else "", f"{min(r.times):.3f}" if r.times else "",
                 f"{r.x_realtime:.2f}" if r.x_realtime else "", *ratios, r.note]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main_cpu(args: argparse.Namespace) -> int:
    rows = run_cpu(args)
    table = render(rows)
    print(table)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(f"# kokoro_gpu CPU benchmark\n\n{table}\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit("run it as: python scripts/bench.py --device cpu [--model DIR]")
