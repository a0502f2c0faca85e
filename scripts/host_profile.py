"""Where the host's time goes in the engine's forwards: first-seen shapes against replays.

A shape the engine has not seen runs uncaptured: the host enqueues every launch while the GPU runs,
and where the host is slower than the GPU it sets the pace (bench_traffic.py's form (b)). ``run`` is
the workload, ``summary`` reads a py-spy profile of it (``pip install py-spy``; its native mode
unwinds the engine, the CUDA runtime and the driver)::

    python3 scripts/host_profile.py run --mode first-seen --seconds 6
    py-spy record --native --rate 250 --format raw -o first.txt -- \\
        python3 scripts/host_profile.py run --mode first-seen --seconds 6
    python3 scripts/host_profile.py summary first.txt

``run``: random weights (``kokoro_gpu.random_weights``, seed 0), one forward per token count in a
shuffled range (first-seen: every shape new) or the same medium one (replayed), after two warm-up
forwards; prints the median and p90 latency. ``summary``: the share of samples by library (the
driver, the runtime, cuBLAS, the engine, Python), then self and inclusive time by function, where
an unnamed address counts as its library.
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path

MEDIUM_TOKENS = 159  # the medium case of scripts/bench.py: 157 phonemes and the two boundary tokens
FRAME = re.compile(r"^(?P<name>.*?) \((?P<where>[^()]*)\)$")
PYTHON_LINE = re.compile(r"^.*:\d+$")  # where a Python frame is: file:line


def frame_parts(frame: str) -> tuple[str, str]:
    """A py-spy frame 'name (file.py:line)' or 'name (library)' as (function, where): where is
    'python' for Python code, else the library's file name; an unnamed address ('0x7f...') takes
    its library's name as its function."""
    m = FRAME.match(frame)
    if m is None:
        return frame, "?"
    name, where = m.group("name"), m.group("where")
    where = "python" if PYTHON_LINE.match(where) else where.rsplit("/", 1)[-1]
    if name.startswith("0x"):
        name = f"[{where}]"
    return name, where


def library_group(where: str) -> str:
    """The coarse owner of a frame's code."""
    for prefix, group in (
        ("libcuda.", "CUDA driver"),
        ("libcudart", "CUDA runtime"),
        ("libcublas", "cuBLAS"),
        ("_native", "engine (_native)"),
        ("_cpu", "CPU engine (_cpu)"),
        ("libc.", "libc"),
        ("libstdc++", "libstdc++"),
        ("libpython", "python"),
    ):
        if where.startswith(prefix):
            return group
    return where


def summarise(lines: Iterable[str], top: int) -> str:
    """The text report of py-spy raw lines ('frame;frame;... count')."""
    self_time: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    groups: collections.Counter[str] = collections.Counter()
    total = 0
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = [frame_parts(f) for f in stack.split(";")]
        leaf_name, leaf_library = frames[-1]
        self_time[leaf_name] += n
        groups[library_group(leaf_library)] += n
        for name in {name for name, _ in frames}:
            inclusive[name] += n
    if total == 0:
        return "no samples"

    def share(n: int) -> str:
        return f"{100 * n / total:5.1f} %"

    out = [f"{total} samples", "", "by library (self time)"]
    out += [f"{share(n)}  {g}" for g, n in groups.most_common()]
    out += ["", f"self time, top {top}"]
    out += [f"{share(n)}  {name[:140]}" for name, n in self_time.most_common(top)]
    out += ["", f"inclusive time, top {top}"]
    out += [f"{share(n)}  {name[:140]}" for name, n in inclusive.most_common(top)]
    return "\n".join(out)


def run(mode: str, seconds: float, count: int, device: str, precision: str) -> str:
    import numpy as np

    from kokoro_gpu import backends
    from kokoro_gpu.checkpoint import fold_official
    from kokoro_gpu.config import ModelConfig
    from kokoro_gpu.random_weights import random_checkpoint, random_voice_pack

    config = ModelConfig.load()
    weights = fold_official(random_checkpoint(config, 0), config, source="random checkpoint")
    voice = random_voice_pack(0)
    backend = backends.create_backend(device, config, weights, precision)
    rng = np.random.default_rng(0)

    def forward(tokens: int, seed: int) -> float:
        ids = np.concatenate([[0], rng.integers(1, config.n_token, tokens - 2), [0]]).astype(np.int64)
        ref_s = voice[min(tokens - 2, len(voice) - 1)].reshape(-1)
        started = time.perf_counter()
        backend.forward(ids, ref_s, 1.0, deterministic=False, seed=seed)
        return 1e3 * (time.perf_counter() - started)

    lengths = list(range(24, config.context_length + 1))
    rng.shuffle(lengths)
    forward(20, 0)  # warm-up: kernels loaded, first plans made (shapes outside `lengths`)
    forward(21, 0)
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline and len(latencies) < min(count, len(lengths)):
        tokens = lengths[len(latencies)] if mode == "first-seen" else MEDIUM_TOKENS
        latencies.append(forward(tokens, len(latencies)))
    return (
        f"{mode}, {device} {precision}: {len(latencies)} forwards, median "
        f"{statistics.median(latencies):.2f} ms, p90 {float(np.percentile(latencies, 90)):.2f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="the workload: forwards of first-seen shapes or one replayed shape")
    r.add_argument("--mode", choices=("first-seen", "replayed"), default="first-seen")
    r.add_argument("--seconds", type=float, default=6.0, help="stop after this long (default 6)")
    r.add_argument("--count", type=int, default=10_000, help="stop after this many forwards")
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    r.add_argument("--precision", choices=("fast", "fp32"), default="fast")
    s = sub.add_parser("summary", help="a py-spy raw profile (--format raw) by library and function")
    s.add_argument("profile", type=Path)
    s.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    if args.command == "run":
        if args.seconds <= 0 or args.count < 1:
            p.error("--seconds must be > 0 and --count >= 1")
        print(run(args.mode, args.seconds, args.count, args.device, args.precision))
        return 0
    if args.top < 1:
        p.error("--top must be >= 1")
    try:
        text = args.profile.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        p.error(f"cannot read {args.profile}: {e.strerror}")
    try:
        print(summarise(text.splitlines(), args.top))
    except ValueError:
        p.error(f"{args.profile} is not a py-spy raw profile (lines of 'frame;frame;... count')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
