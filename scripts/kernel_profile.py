"""Where the time goes: kernel times of one forward, and the conv kernel's rate.

Three modes (the third, ``summary``, tabulates the ncu CSV), on the bench's random checkpoint and cases:

- ``forward``: one uncaptured (eager) forward per case, meant to run
  under Nsight Compute, which then reports every kernel::

      ncu --metrics gpu__time_duration.sum --csv python3 scripts/kernel_profile.py forward \\
          --cases short,long > ncu.csv
      python3 scripts/kernel_profile.py summary ncu.csv

- ``convs``: the tensor-core conv alone (``ops.conv1d_time_ms``: math fp16 is
  the fast engine's kernel, wgmma on Hopper; fp16x3 the same on split operands,
  the fp32 engine's, its TFLOP/s counting each multiply-add once;
  fp16_mma_sync the portable kernel; tf32 cuBLAS) on the generator's shapes at
  the long case's length (and one at the short case's).

(Not named profile.py: scripts/ comes first on sys.path when bench.py runs,
and torch imports the standard library's profile module.)
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from kokoro_gpu import backends
from kokoro_gpu.checkpoint import fold_official
from kokoro_gpu.config import ModelConfig
from kokoro_gpu.random_weights import random_checkpoint, random_voice_pack

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import CASES, make_utterance

# bench.py's calibrated speeds for seed 0 (printed by it as "speeds"): the
# calibration forward is left out here so that the profile holds one forward.
BENCH_SPEEDS = {"short": 1.2766, "medium": 0.8992, "long": 1.3233}
# (label, C in, C out, T, K, dilation) at the long case's 1228 frames: stage 0
# runs at 20 F, stage 1 at 120 F (+1).
LONG_FRAMES = 1228
CONV_SHAPES = [
    ("stage1 k3 d1", 128, 128, 120 * LONG_FRAMES + 1, 3, 1),
    ("stage1 k7 d3", 128, 128, 120 * LONG_FRAMES + 1, 7, 3),
    ("stage1 k11 d5", 128, 128, 120 * LONG_FRAMES + 1, 11, 5),
    ("stage0 k3 d1", 256, 256, 20 * LONG_FRAMES, 3, 1),
    ("stage0 k11 d5", 256, 256, 20 * LONG_FRAMES, 11, 5),
    ("decoder k3 1090->1024", 1090, 1024, LONG_FRAMES, 3, 1),
    ("conv_post k7 128->22", 128, 22, 120 * LONG_FRAMES + 1, 7, 1),
    ("short stage1 k7 d3", 128, 128, 120 * 92 + 1, 7, 3),
]


def forward(args: argparse.Namespace) -> None:
    config = ModelConfig.load()
    weights = fold_official(random_checkpoint(config, 0), config, source="random checkpoint")
    voice = random_voice_pack(0)
    backend = backends.create_backend("cuda", config, weights, args.precision)
    for case in args.cases:
        u = make_utterance(case, CASES[case], config, voice)
        # A first forward per shape runs uncaptured: every kernel launch shows.
        backend.forward(u.ids, u.ref_s, BENCH_SPEEDS[case], deterministic=True, seed=0)


def convs(args: argparse.Namespace) -> None:
    native, why = backends.load_native()
    if native is None:
        raise SystemExit(why)
    ops = native.ops
    rng = np.random.default_rng(0)
    print(f"{'shape':24s} {'math':13s} {'ms':>8s} {'TFLOP/s':>8s}")
    for label, c, c_out, t, k, dil in CONV_SHAPES:
        x = rng.standard_normal((c, t), dtype=np.float32)
        w = (rng.standard_normal((c_out, c, k)) / np.sqrt(c * k)).astype(np.float32)
        b = np.zeros(c_out, np.float32)
        flops = 2.0 * c_out * c * k * t
        for math in args.math:
            ms = ops.conv1d_time_ms(x, w, b, dil * (k - 1) // 2, dil, math, 20)
            print(f"{label:24s} {math:13s} {ms:8.3f} {flops / ms / 1e9:8.1f}")


UNIT_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}


def summary(args: argparse.Namespace) -> None:
    """Per kernel name: total time, share, calls (from ncu --csv output)."""
    totals: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    with open(args.csv, newline="", encoding="utf-8") as f:
        lines = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = UNIT_MS[row["Metric Unit"]]
        name = row["Kernel Name"].split("(")[0][:70]
        totals[name] += float(row["Metric Value"].replace(",", "")) * scale
        calls[name] += 1
    whole = sum(totals.values())
    print(f"{sum(calls.values())} kernels, {whole:.2f} ms kernel time")
    for name, ms in sorted(totals.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{ms:9.3f} ms {100 * ms / whole:5.1f}%  x{calls[name]:<4d} {name}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    f = sub.add_parser("forward")
    f.add_argument("--cases", type=lambda s: s.split(","), default=["short", "long"])
    f.add_argument("--precision", default="fast")
    c = sub.add_parser("convs")
    c.add_argument(
        "--math", type=lambda s: s.split(","), default=["fp16", "fp16x3", "fp16_mma_sync", "tf32"]
    )
    s = sub.add_parser("summary")
    s.add_argument("csv", type=Path)
    s.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    {"forward": forward, "convs": convs, "summary": summary}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
