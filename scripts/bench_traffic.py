"""Real-traffic benchmark: mixed lengths, first-seen shapes and open-loop arrivals.

A corpus of English text (``tests/data/traffic_corpus.txt``) is phonemised once
by the project's front end and chunked as the API chunks text; with
``--phonemes-file`` the chunks come from a file that ``--write-phonemes`` wrote
(a machine without the English front end). The pieces run are the chunks, their
word prefixes (a '.' ending one cut mid-sentence) and consecutive chunks joined
(two-sentence paragraphs): 1,400 texts of 2 - 300 phonemes. Three forms, on one
model and device:

- (a) ``batch``: 64 copies of one medium chunk (the fixed shape), then rounds
  of 64 pieces not run before (mixed lengths), each batch through
  ``KokoroTTS.synthesize_batch`` (the scheduler) and, with other pieces,
  through ``backend.forward_batch`` (the engine call alone); median over the
  rounds after warm-up, audio seconds per second, and mixed / fixed through
  synthesize_batch (target >= 90 %).
- (b) ``first-seen``: pieces one by one (``backend.forward``), of distinct
  token counts where the pool allows and none run in (a), then the same piece
  twice more (on CUDA the second run captures its graph, the third replays it;
  the engine keys graphs by exact shape): latency p50 / p90 / max of the first
  and the third run, and first-seen median / replayed
  median (target <= 1.15).
- (c) ``arrivals``: open-loop Poisson arrivals of (a)'s kind of pieces through
  a ``ChunkScheduler`` (its default batching) at 25 / 50 / 90 % of (a)'s mixed
  capacity (or of ``--capacity``: the same offered rates for two builds
  compared); per-chunk latency from the arrival time to the result, p50 / p99;
  each chunk's idle latency from a line fitted to (b)'s replayed latencies
  against audio length; p99 of latency / idle (target <= 4 at 90 %) and
  sustained audio seconds per second (target >= 85 % of (a)'s).

PyTorch is not run here (it needs the official checkpoint layout; scripts/bench.py
runs it on the same device with random weights). About a minute on an H100. On the device::

    python3 scripts/bench_traffic.py --model /tmp/kokoro-onnx-int8 --device cuda --precision fast \\
        --phonemes-file tests/data/traffic_phonemes.json --json $OUT/traffic.json --md $OUT/traffic.md

CPU smoke run: ``--device cpu --quick``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from bench_traffic_corpus import (
    CORPUS,
    PHONEMES,
    joined_pairs,
    load_phonemes,
    phonemize_corpus,
    pick_distinct_lengths,
    word_prefixes,
)

from kokoro_gpu import KokoroTTS
from kokoro_gpu.config import SAMPLE_RATE
from kokoro_gpu.errors import KokoroError
from kokoro_gpu.scheduler import ChunkScheduler, ChunkSpec
from kokoro_gpu.text.chunking import MAX_PHONEMES
from kokoro_gpu.tokens import phonemes_to_ids
from kokoro_gpu.voices import style_for

MEDIUM_PHONEMES = 157  # the fixed-shape benchmark's medium utterance (scripts/bench.py)
LOADS = (0.25, 0.5, 0.9)
TARGETS = {"mixed_vs_fixed": 0.90, "first_seen_vs_replayed": 1.15, "p99_vs_idle": 4.0, "sustained_vs_a": 0.85}
SEED = 2026
ARRIVAL_COLUMNS = (
    "load|chunks/s|chunks|p50 ms|p99 ms|p99 latency/idle|offered audio s/s|audio s/s|vs (a)|errors"
)


@dataclass(frozen=True)
class Settings:
    """How much of each form to run (``--quick`` shrinks everything for a CPU smoke run)."""

    batch_size: int = 64
    rounds: int = 5
    warmup: int = 2
    first_seen: int = 200
    arrival_seconds: float = 8.0  # of arrivals per load, within these bounds on their number:
    min_arrivals: int = 50
    max_arrivals: int = 4000
    max_phonemes: int = MAX_PHONEMES
    max_batch: int | None = None  # (c)'s scheduler; None: its default for the device


QUICK = Settings(
    3, rounds=1, warmup=0, first_seen=3, arrival_seconds=0.0, min_arrivals=3, max_arrivals=3, max_phonemes=40
)


# ------------------------------------------------------------------ helpers


@dataclass
class Inputs:
    """A voice pack and the model's vocabulary: phonemes -> (ids, style)."""

    tts: KokoroTTS
    voice: str
    pack: np.ndarray

    def spec(self, phonemes: str, **kwargs: Any) -> ChunkSpec:
        ids = phonemes_to_ids(phonemes, self.tts.config.vocab, self.tts.config.max_phonemes)
        return ChunkSpec(ids, style_for(self.pack, phonemes), **kwargs)


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def audio_seconds(audio: np.ndarray) -> float:
    return len(audio) / SAMPLE_RATE


@dataclass
class Form:
    """One form's table: rows of cells under columns, and its figures for the summary."""

    title: str
    columns: tuple[str, ...]
    rows: list[list[str]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------- (a) batches


@dataclass(frozen=True)
class BatchPath:
    """A way to run a batch: the API's synthesize_batch (through the scheduler) or the engine call."""

    name: str
    run: Callable[[list[str], int], float]  # (phonemes, seed) -> audio seconds


def batch_paths(tts: KokoroTTS, inputs: Inputs) -> list[BatchPath]:
    def api(phonemes: list[str], seed: int) -> float:
        return sum(r.seconds for r in tts.synthesize_batch(phonemes, voice=inputs.voice, seed=seed))

    def engine(phonemes: list[str], seed: int) -> float:
        specs = [inputs.spec(p) for p in phonemes]
        items = [(c.input_ids, c.ref_s, 1.0, seed + i) for i, c in enumerate(specs)]
        return sum(audio_seconds(audio) for audio, _ in tts.backend.forward_batch(items, deterministic=False))

    return [BatchPath("synthesize_batch", api), BatchPath("forward_batch", engine)]


def fresh_batches(pool: Sequence[str], count: int, size: int, rng: np.random.Generator) -> list[list[str]]:
    """`count` batches of `size` pieces, no piece twice while the pool lasts."""
    order: list[int] = []
    while len(order) < count * size:
        order.extend(rng.permutation(len(pool)).tolist())
    return [[pool[i] for i in order[k * size : (k + 1) * size]] for k in range(count)]


def form_batch(tts: KokoroTTS, inputs: Inputs, pool: list[str], medium: str, s: Settings) -> Form:
    """The fixed batch, then mixed batches of pieces not run before, through both paths."""
    rng = np.random.default_rng(SEED)
    form = Form(
        "(a) batch", ("case", "path", "chunks", "phonemes min-max", "median ms", "audio s", "audio s/s")
    )
    n = s.warmup + s.rounds
    fresh = fresh_batches(pool, 2 * n, s.batch_size, rng)  # every path and round its own texts
    rates: dict[tuple[str, str], float] = {}
    chunk_audio: dict[str, float] = {}
    for case in ("fixed (medium x N)", "mixed (fresh draw)"):
        for k, path in enumerate(batch_paths(tts, inputs)):
            batches = (
                [[medium] * s.batch_size] * n if case.startswith("fixed") else fresh[k * n : (k + 1) * n]
            )
            runs = []
            for r, batch in enumerate(batches):
                t0 = time.perf_counter()
                audio = path.run(batch, SEED + r)
                if r >= s.warmup:
                    runs.append((time.perf_counter() - t0, audio))
            rate = statistics.median(a / e for e, a in runs)
            rates[case, path.name] = rate
            chunk_audio[case] = statistics.median(a for _, a in runs) / s.batch_size
            lengths = [len(p) for batch in batches[s.warmup :] for p in batch]
            form.rows.append(
                [
                    case,
                    path.name,
                    str(s.batch_size),
                    f"{min(lengths)}-{max(lengths)}",
                    f"{1e3 * statistics.median(e for e, _ in runs):.1f}",
                    f"{statistics.median(a for _, a in runs):.1f}",
                    f"{rate:.1f}",
                ]
            )
    fixed, mixed = (
        rates["fixed (medium x N)", "synthesize_batch"],
        rates["mixed (fresh draw)", "synthesize_batch"],
    )
    engine_fixed = rates["fixed (medium x N)", "forward_batch"]
    form.figures = {
        "rates": {f"{case} / {path}": rate for (case, path), rate in rates.items()},
        "fixed_audio_s_per_s": fixed,
        "mixed_audio_s_per_s": mixed,
        "mixed_vs_fixed": mixed / fixed,
        "mixed_vs_fixed_forward_batch": rates["mixed (fresh draw)", "forward_batch"] / engine_fixed,
        "synthesize_batch_vs_forward_batch_fixed": fixed / engine_fixed,
        "mixed_chunk_audio_s": chunk_audio["mixed (fresh draw)"],
    }
    return form


# ---------------------------------------------------------- (b) first seen


@dataclass
class Latency:
    tokens: int
    audio_s: float
    first_ms: float
    replayed_ms: float


def form_first_seen(tts: KokoroTTS, inputs: Inputs, pieces: list[str]) -> Form:
    rows = []
    for i, phonemes in enumerate(pieces):
        spec = inputs.spec(phonemes)
        times = []
        # Run 1 is uncaptured (a first-seen shape), run 2 captures its graph, run 3 replays it.
        for _ in range(3):
            t0 = time.perf_counter()
            audio, _ = tts.backend.forward(
                spec.input_ids, spec.ref_s, 1.0, deterministic=False, seed=SEED + i
            )
            times.append(1e3 * (time.perf_counter() - t0))
        rows.append(Latency(len(spec.input_ids), audio_seconds(audio), times[0], times[2]))
    form = Form(
        "(b) first-seen, one by one",
        ("run", "chunks", "token counts", "p50 ms", "p90 ms", "max ms", "x real time"),
    )
    audio_total = sum(r.audio_s for r in rows)
    for run, values in (
        ("first seen", [r.first_ms for r in rows]),
        ("replayed", [r.replayed_ms for r in rows]),
    ):
        form.rows.append(
            [
                run,
                str(len(rows)),
                str(len({r.tokens for r in rows})),
                f"{statistics.median(values):.2f}",
                f"{percentile(values, 90):.2f}",
                f"{max(values):.2f}",
                f"{audio_total / (sum(values) / 1e3):.0f}",
            ]
        )
    first, replayed = (
        statistics.median(r.first_ms for r in rows),
        statistics.median(r.replayed_ms for r in rows),
    )
    form.figures = {
        "distinct_token_counts": len({r.tokens for r in rows}),
        "first_seen_vs_replayed": first / replayed,
        "per_chunk_ratio_median": statistics.median(r.first_ms / r.replayed_ms for r in rows),
        "latencies": [asdict(r) for r in rows],
    }
    return form


def idle_latency_fit(latencies: Sequence[Latency]) -> tuple[float, float]:
    """(ms, ms per audio second): a line through the replayed latencies (a constant if one point)."""
    x = np.array([r.audio_s for r in latencies])
    y = np.array([r.replayed_ms for r in latencies])
    if len(latencies) < 2 or np.ptp(x) == 0:
        return float(np.median(y)), 0.0
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


# ----------------------------------------------------------- (c) arrivals


@dataclass
class Arrival:
    due: float  # seconds after the start
    done: float = float("nan")
    audio_s: float = 0.0
    error: str = ""


def run_arrivals(
    scheduler: ChunkScheduler, specs: Sequence[ChunkSpec], gaps: Sequence[float]
) -> tuple[list[Arrival], float]:
    """Submit specs[i] at the sum of gaps[:i + 1] (open loop: never waits for results); wall seconds."""
    arrivals = [Arrival(float(t)) for t in np.cumsum(gaps)]
    finished = threading.Event()
    remaining = [len(specs)]
    lock = threading.Lock()
    start = time.perf_counter()

    def record(arrival: Arrival, future: Any) -> None:
        arrival.done = time.perf_counter() - start
        try:
            arrival.audio_s = audio_seconds(future.result().audio)
        except Exception as e:  # reported in the table, the run goes on
            arrival.error = f"{type(e).__name__}: {e}"
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                finished.set()

    for arrival, spec in zip(arrivals, specs, strict=True):
        delay = arrival.due - (time.perf_counter() - start)
        if delay > 0:
            time.sleep(delay)
        future = scheduler.submit(spec)
        future.add_done_callback(lambda f, a=arrival: record(a, f))
    finished.wait()
    return arrivals, time.perf_counter() - start


@dataclass(frozen=True)
class Capacity:
    """(a)'s mixed batch: audio seconds per second, and audio seconds per chunk of the corpus."""

    audio_s_per_s: float
    chunk_audio_s: float


def form_arrivals(
    tts: KokoroTTS,
    inputs: Inputs,
    chunks: list[str],
    capacity: Capacity,
    fit: tuple[float, float],
    s: Settings,
) -> Form:
    rng = np.random.default_rng(SEED + 1)
    form = Form(
        "(c) open-loop Poisson arrivals through ChunkScheduler",
        tuple(ARRIVAL_COLUMNS.split("|")),
    )
    levels = []
    with ChunkScheduler(tts.backend, max_batch=s.max_batch) as scheduler:
        for load in LOADS:
            rate = load * capacity.audio_s_per_s / capacity.chunk_audio_s  # chunks per second
            count = int(min(s.max_arrivals, max(s.min_arrivals, rate * s.arrival_seconds)))
            picks = [chunks[i] for i in rng.choice(len(chunks), count)]
            specs = [inputs.spec(p, seed=SEED + i) for i, p in enumerate(picks)]
            arrivals, wall = run_arrivals(scheduler, specs, rng.exponential(1 / rate, count))
            ok = [a for a in arrivals if not a.error]
            latency = [1e3 * (a.done - a.due) for a in ok]
            ratio = [lat / (fit[0] + fit[1] * a.audio_s) for lat, a in zip(latency, ok, strict=True)]
            first_due = arrivals[0].due
            sustained = sum(a.audio_s for a in ok) / max(wall - first_due, 1e-9)
            # Poisson: the audio of the arrivals before the last over the span of the arrivals.
            offered = sum(a.audio_s for a in arrivals[:-1]) / max(arrivals[-1].due - first_due, 1e-9)
            level = {
                "load": load,
                "chunks_per_s": rate,
                "chunks": count,
                "p50_ms": percentile(latency, 50) if ok else None,
                "p99_ms": percentile(latency, 99) if ok else None,
                "p99_vs_idle": percentile(ratio, 99) if ok else None,
                "offered_audio_s_per_s": offered,
                "sustained_audio_s_per_s": sustained,
                "sustained_vs_a": sustained / capacity.audio_s_per_s,
                "errors": len(arrivals) - len(ok),
            }
            levels.append(level)
            form.rows.append(
                [
                    f"{round(100 * load)} %",
                    f"{rate:.1f}",
                    str(count),
                    _cell(level["p50_ms"], ".1f"),
                    _cell(level["p99_ms"], ".1f"),
                    _cell(level["p99_vs_idle"], ".2f"),
                    f"{offered:.1f}",
                    f"{sustained:.1f}",
                    f"{100 * sustained / capacity.audio_s_per_s:.0f} %",
                    str(level["errors"])
                    + (f" ({next(a.error for a in arrivals if a.error)})" if level["errors"] else ""),
                ]
            )
    form.figures = {
        "levels": levels,
        "idle_fit_ms": {"intercept": fit[0], "per_audio_s": fit[1]},
        "capacity": asdict(capacity),
        "max_batch": scheduler.max_batch,
    }
    return form


def _cell(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


# ------------------------------------------------------------------ summary


def summary(a: Form, b: Form, c: Form) -> Form:
    form = Form("summary", ("target", "measured", "goal", "pass"))
    top = c.figures["levels"][-1]
    checks = [
        ("(a) mixed / fixed audio s/s", a.figures["mixed_vs_fixed"], TARGETS["mixed_vs_fixed"], True),
        (
            "(b) first-seen / replayed median",
            b.figures["first_seen_vs_replayed"],
            TARGETS["first_seen_vs_replayed"],
            False,
        ),
        (
            f"(c) p99 latency / idle at {round(100 * top['load'])} %",
            top["p99_vs_idle"],
            TARGETS["p99_vs_idle"],
            False,
        ),
        (
            f"(c) sustained / (a) at {round(100 * top['load'])} %",
            top["sustained_vs_a"],
            TARGETS["sustained_vs_a"],
            True,
        ),
    ]
    for name, value, goal, at_least in checks:
        ok = value is not None and (value >= goal if at_least else value <= goal)
        form.rows.append(
            [
                name,
                _cell(value, ".3f"),
                (">= " if at_least else "<= ") + f"{goal:g}",
                "PASS" if ok else "FAIL",
            ]
        )
        form.figures[name] = {"value": value, "goal": goal, "pass": ok}
    return form


def render_text(form: Form) -> str:
    cells = [list(form.columns), *form.rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(form.columns))]
    lines = ["  ".join(row[i].ljust(widths[i]) for i in range(len(widths))).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return f"{form.title}\n" + "\n".join(lines)


def render_markdown(forms: Sequence[Form], meta: dict[str, Any]) -> str:
    parts = ["# kokoro_gpu real-traffic benchmark\n"]
    for form in forms:
        head = "| " + " | ".join(form.columns) + " |\n|" + "---|" * len(form.columns) + "\n"
        parts.append(f"## {form.title}\n\n{head}" + "".join("| " + " | ".join(r) + " |\n" for r in form.rows))
    parts.append("".join(f"- {k}: {v}\n" for k, v in meta.items()))
    return "\n".join(parts)


# --------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="kokoro-onnx-int8", help="model name or directory")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--precision", choices=("fast", "fp32"), default="fast")
    p.add_argument("--voice", help="default: the model's default voice (kokoro-onnx-int8: jf_alpha)")
    p.add_argument("--corpus", type=Path, default=CORPUS, help="English text, one piece per line")
    p.add_argument("--phonemes-file", type=Path, help="pre-phonemised chunks (from --write-phonemes)")
    p.add_argument("--write-phonemes", type=Path, help="phonemise the corpus, write the chunks here, exit")
    p.add_argument("--quick", action="store_true", help="a few short chunks per form (CPU smoke run)")
    p.add_argument("--rounds", type=int, help="(a): timed rounds per case (default 5)")
    p.add_argument("--first-seen", type=int, help="(b): chunks (default 200)")
    p.add_argument("--arrival-seconds", type=float, help="(c): seconds of arrivals per load (default 8)")
    p.add_argument("--max-batch", type=int, help="(c): the scheduler's max_batch (default: its own)")
    p.add_argument("--capacity", type=float, help="(c): the audio-s/s its loads are fractions of "
                   "(default: (a)'s mixed rate in this run; fix it to compare builds at equal rates)")
    p.add_argument("--json", type=Path, help="write the figures as JSON here")
    p.add_argument("--md", type=Path, help="write the tables as Markdown here")
    return p.parse_args(argv)


def corpus_chunks(args: argparse.Namespace) -> list[str]:
    """The chunks: from --phonemes-file, else the front end on the corpus (the default corpus's
    committed phonemes where the English front end cannot run)."""
    if args.phonemes_file is not None:
        return load_phonemes(args.phonemes_file)
    try:
        return phonemize_corpus(args.corpus.read_text(encoding="utf-8"))
    except (ImportError, KokoroError) as e:
        if args.corpus != CORPUS:
            raise SystemExit(f"cannot phonemise {args.corpus}: {e}; pass --phonemes-file") from None
        print(f"note: the English front end is unavailable ({e}); reading {PHONEMES.name}")
        return load_phonemes(PHONEMES)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.write_phonemes is not None:
        chunks = phonemize_corpus(args.corpus.read_text(encoding="utf-8"))
        record = {
            "about": f"{args.corpus.name} phonemised by kokoro_gpu.text front_end('a'), chunked as "
            "KokoroTTS.synthesize chunks text (scripts/bench_traffic.py --write-phonemes)",
            "chunks": chunks,
        }
        args.write_phonemes.write_text(
            json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
        print(f"wrote {len(chunks)} chunks to {args.write_phonemes}")
        return 0
    s = QUICK if args.quick else Settings()
    overrides = {
        "rounds": args.rounds,
        "first_seen": args.first_seen,
        "arrival_seconds": args.arrival_seconds,
        "max_batch": args.max_batch,
    }
    s = replace(s, **{k: v for k, v in overrides.items() if v is not None})
    chunks = [c for c in corpus_chunks(args) if len(c) <= s.max_phonemes]
    if not chunks:
        raise SystemExit(f"no corpus chunk has at most {s.max_phonemes} phonemes")
    medium = min(chunks, key=lambda c: abs(len(c) - MEDIUM_PHONEMES))
    prefixes = [p for p in word_prefixes(chunks) if len(p) <= s.max_phonemes]
    pool = list(dict.fromkeys([*chunks, *prefixes, *joined_pairs(chunks, s.max_phonemes)]))
    first_seen = pick_distinct_lengths(pool, {len(medium) + 2}, s.first_seen, np.random.default_rng(SEED))
    taken = set(first_seen)
    rest = [p for p in pool if p not in taken] or pool
    tts = KokoroTTS.from_pretrained(args.model, device=args.device, precision=args.precision)
    voice = args.voice or tts.default_voice
    inputs = Inputs(tts, voice, tts.voices.load(voice))
    meta: dict[str, Any] = {
        "model": args.model,
        "device": tts.device,
        "precision": tts.precision,
        "voice": voice,
        "corpus_chunks": len(chunks),
        "pieces": len(pool),
        "medium_phonemes": len(medium),
        "settings": asdict(s),
    }
    started = time.perf_counter()
    with tts:
        a = form_batch(tts, inputs, rest, medium, s)
        print(render_text(a), flush=True)
        b = form_first_seen(tts, inputs, first_seen)
        print(render_text(b), flush=True)
        latencies = [Latency(**r) for r in b.figures["latencies"]]
        rate = args.capacity or a.figures["mixed_audio_s_per_s"]
        capacity = Capacity(rate, a.figures["mixed_chunk_audio_s"])
        c = form_arrivals(tts, inputs, rest, capacity, idle_latency_fit(latencies), s)
        print(render_text(c), flush=True)
    total = summary(a, b, c)
    print(render_text(total))
    meta["pytorch"] = "not run: scripts/bench.py runs the official KModel (random weights) on the same device"
    meta["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"wall {meta['wall_s']} s; {meta['pytorch']}")
    forms = [a, b, c, total]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"meta": meta, "forms": [asdict(f) for f in forms]}
        args.json.write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(render_markdown(forms, meta), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
