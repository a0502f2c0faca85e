"""Load test of kokoro-serve: N concurrent streaming clients, batched server against one-at-a-time.

For each client count (default 1, 8, 32, 64, 128) the clients send English
texts of mixed length from a corpus (closed loop: each client sends its next
request when the last one ends; open loop: Poisson arrivals at ``--rate``
requests per second) for ``--duration`` seconds, reading each response as a
stream. Per request it records the time to first audio (request sent -> first
audio bytes), the audio length, and whether the stream underran (some audio
arrived later than a player started at the first byte would have needed it).
It prints, per server mode and client count: requests, errors, time to first
audio p50 / p99, per-stream real-time factor (audio seconds / seconds from
request to last byte) p50 and min, streams that underran, aggregate audio
seconds per second, and, when it started the server, the server's CPU seconds
per audio second (the encoders' cost shows as the difference between formats)
and its RSS at start and end; and from the server's /metrics over the run, where
a request's first audio waits: the server's own mean time to first audio (from
request received), the text front end's mean seconds per piece (queueing in its
process pool included), a request's first chunk from queued to its audio, any
chunk's mean wait for the model (later chunks wait behind their stream's
earlier ones by design: the lookahead), the chunks and seconds per model call,
and (CUDA) the share of the engine's phases that ran eager (lengths seen for
the first time) or were captured into graphs.

It starts the server itself (``--model``/``--device``; ``--serial`` adds the
same server with ``--max-batch 1 --lanes 1``, one chunk on the model at a time, run in
the same invocation) or targets ``--url``. Clients are spread over
``--client-procs`` processes so that reading 128 streams is not the limit;
``--client-cpus N`` keeps them on N processors and the server it starts on the
others (as clients on other machines would leave the server its cores).

``--soak`` runs one client count and format for ``--duration`` seconds and
samples the server's memory throughout (its RSS, its front-end processes' RSS,
the GPU memory used, and its speech responses so far, from ``/metrics``),
printing the samples and a line with start / middle / end and the errors.

    python scripts/load_test.py --model DIR --device cuda --precision fast --serial
    python scripts/load_test.py --url http://127.0.0.1:8880 --clients 8,32 --format mp3
    python scripts/load_test.py --model DIR --device cuda --precision fast --clients 128 --duration 600 --soak
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from kokoro_gpu.server.launcher import ServerProcess

SAMPLE_RATE = 24000
# Mixed-length English: one short line, medium paragraphs, long ones (written for this test).
CORPUS = [
    "Yes, that works for me.",
    "The train leaves at seven fifteen from platform four.",
    "Could you send me the report before the meeting tomorrow?",
    "Thank you for calling. Please hold while we connect you.",
    "It rained all night, and by morning the river had risen over the old stone steps.",
    "Turn left at the second light, then keep going until you see the bakery on the corner.",
    "The museum opens at nine. Tickets are cheaper online, and children under five get in free.",
    "She picked up the violin for the first time in years, tuned it slowly, and began to play.",
    "Our quarterly results show steady growth in every region, with the strongest gains in the "
    "north, where new stores opened in the spring. Costs stayed flat, and we expect the second "
    "half of the year to follow the same pattern.",
    "To reset your password, open the settings page, choose security, and follow the link we send "
    "to your email address. The link expires after one hour, so use it soon. If it does not "
    "arrive, check your spam folder before asking for another one.",
    "The lighthouse keeper climbed the spiral stairs every evening, counting the steps out of habit. "
    "There were one hundred and twelve of them, worn smooth in the middle by a century of boots. "
    "At the top he wound the clockwork, trimmed the wick, and watched the beam sweep across the "
    "dark water toward the ships he would never meet.",
    "Bread is one of the oldest prepared foods. Flour and water, left to sit, gather wild yeasts "
    "from the air; the dough rises, and baking sets the bubbles into a crumb. Bakers still argue "
    "about hydration, salt and the length of the first rise, and every town seems to have its own "
    "answer. What they agree on is patience: good bread cannot be hurried, and the best loaves "
    "come from dough that was given the whole night to develop its flavour.",
    "When the first radio broadcasts reached small farming towns, families gathered in the evening "
    "around a single set, listening to news, music and serial dramas. Newspapers worried that "
    "nobody would read anymore; instead, both thrived. Decades later the same worry returned with "
    "television, and again with the internet. Each new medium changed how people spent their "
    "evenings, but the wish to hear a good story, told well, stayed exactly the same. Perhaps that "
    "is the real constant in the history of media: not the technology, but the audience, waiting "
    "for the next episode.",
]


def load_texts(spec: str) -> list[str]:
    if spec == "mixed":
        return CORPUS
    if spec == "short":
        return [t for t in CORPUS if len(t) < 80]
    texts = [line.strip() for line in Path(spec).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise SystemExit(f"load_test: no texts in {spec}")
    return texts


@dataclass
class Record:
    sent: float
    ttfa: float | None = None
    audio_s: float = 0.0
    duration: float = 0.0
    underrun: bool = False
    error: str | None = None


# ------------------------------------------------------------------ clients


async def _one_request(http: httpx.AsyncClient, url: str, body: dict, fmt: str) -> Record:
    record = Record(sent=time.perf_counter())
    received = 0  # bytes of pcm audio so far
    first = 0.0
    try:
        async with http.stream("POST", f"{url}/v1/audio/speech", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                record.error = f"{response.status_code}: {response.text[:120]}"
                return record
            async for data in response.aiter_raw():
                now = time.perf_counter()
                if record.ttfa is None:
                    first = now
                    record.ttfa = now - record.sent
                elif fmt == "pcm" and now - first > received / 2 / SAMPLE_RATE:
                    record.underrun = True  # a player started at the first byte ran dry before this
                received += len(data)
        record.duration = time.perf_counter() - record.sent
        record.audio_s = received / 2 / SAMPLE_RATE if fmt == "pcm" else 0.0
    except httpx.HTTPError as e:
        record.error = f"{type(e).__name__}: {e}"[:160]
    return record


async def _clients(url: str, api_key: str | None, fmt: str, clients: int, duration: float,
                   rate: float | None, seed: int, texts: list[str], voice: dict[str, str]) -> list[Record]:
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    end = time.perf_counter() + duration
    records: list[Record] = []

    def body() -> dict:
        return {"model": "kokoro", "input": rng.choice(texts), "response_format": fmt, **voice}

    async with httpx.AsyncClient(timeout=600, headers=headers, limits=limits) as http:
        if rate is None:  # closed loop

            async def loop() -> None:
                while time.perf_counter() < end:
                    records.append(await _one_request(http, url, body(), fmt))

            await asyncio.gather(*(loop() for _ in range(clients)))
        else:  # open loop: Poisson arrivals, at most `clients` in flight
            slots = asyncio.Semaphore(clients)
            tasks = []

            async def arrival() -> None:
                async with slots:
                    records.append(await _one_request(http, url, body(), fmt))

            while time.perf_counter() < end:
                tasks.append(asyncio.ensure_future(arrival()))
                await asyncio.sleep(rng.expovariate(rate))
            await asyncio.gather(*tasks)
    return records


def _client_process(args: tuple) -> list[dict]:
    return [asdict(r) for r in asyncio.run(_clients(*args))]


def run_level(url: str, api_key: str | None, fmt: str, clients: int, duration: float, rate: float | None,
              procs: int, texts: list[str], voice: dict[str, str]) -> tuple[list[Record], float]:
    procs = max(1, min(procs, clients))
    shares = [clients // procs + (i < clients % procs) for i in range(procs)]
    rates = [None if rate is None else rate * s / clients for s in shares]
    jobs = [(url, api_key, fmt, share, duration, share_rate, 1000 * clients + i, texts, voice)
            for i, (share, share_rate) in enumerate(zip(shares, rates, strict=True))]
    started = time.perf_counter()
    if procs == 1:
        parts = [_client_process(jobs[0])]
    else:
        with multiprocessing.get_context("spawn").Pool(procs) as pool:
            parts = pool.map(_client_process, jobs)
    wall = time.perf_counter() - started
    return [Record(**r) for part in parts for r in part], wall


# ------------------------------------------------------------------- server


@dataclass
class Target:
    """The server under load: one this script started (``process``), or the one at ``url``."""

    label: str
    url: str
    process: ServerProcess | None = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def split_cpus(client_cpus: int) -> tuple[set[int] | None, set[int] | None]:
    """(the server's processors, the clients'): the last ``client_cpus`` of this process's for the
    clients, the others for the server; (None, None) for 0 (no pinning)."""
    if client_cpus == 0:
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    if not 0 < client_cpus < len(cpus):
        raise SystemExit(f"load_test: --client-cpus must leave the server at least one of the "
                         f"{len(cpus)} processors; got {client_cpus}")
    return set(cpus[:-client_cpus]), set(cpus[-client_cpus:])


def start_server(server_args: list[str], label: str, cpus: set[int] | None = None) -> Target:
    process = ServerProcess(["--log-level", "warning", "--max-streams", "4096", *server_args], cpus=cpus)
    print(f"# starting: {' '.join(process.argv)}", file=sys.stderr)
    try:
        process.wait_ready(600)
    except RuntimeError as e:
        process.stop()
        raise SystemExit(f"load_test: {e}") from None
    return Target(label, process.url, process)


def cpu_seconds(target: Target) -> float | None:
    """CPU seconds used so far by the server and its front-end processes."""
    if target.process is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in target.process.pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def rss_mb(pid: int) -> float | None:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith("VmRSS:")), None)


def gpu_memory_mb() -> str:
    """Memory used on each GPU (nvidia-smi; '/' between GPUs), '-' without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout.split()
        return "/".join(out) if out else "-"
    except (OSError, subprocess.TimeoutExpired):
        return "-"


# The server's histograms whose sums and counts give a run's means (where a request's time to first
# audio goes), by the short name server_metrics files them under.
HISTOGRAMS = {
    "kokoro_time_to_first_audio_seconds": "ttfa",
    "kokoro_g2p_seconds": "g2p",
    "kokoro_first_chunk_seconds": "first",
    "kokoro_chunk_wait_seconds": "wait",
    "kokoro_batch_size": "batch",
    "kokoro_batch_seconds": "call",
}


def server_metrics(url: str) -> dict[str, float]:
    """From the server's /metrics: audio seconds made, speech responses ok (2xx) and failed (others),
    the sum and count of each of HISTOGRAMS (``ttfa_sum``, ``ttfa_count``, ...) and the engine's phase
    runs (``runs_eager``, ``runs_captured``, ``runs_replayed``; a CUDA server's)."""
    found = {"audio_s": 0.0, "speech_ok": 0.0, "speech_failed": 0.0}
    try:
        text = httpx.get(f"{url}/metrics", timeout=10).text
    except httpx.HTTPError:
        return {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name == "kokoro_audio_seconds_total":
            found["audio_s"] = float(line.split()[-1])
        elif name == "kokoro_requests_total" and 'route="/v1/audio/speech"' in line:
            key = "speech_ok" if 'status="2' in line else "speech_failed"
            found[key] += float(line.split()[-1])
        elif name == "kokoro_engine_phase_runs_total":
            found["runs_" + line.split('run="', 1)[1].split('"', 1)[0]] = float(line.split()[-1])
        else:
            base, _, part = name.rpartition("_")
            if base in HISTOGRAMS and part in ("sum", "count"):
                found[f"{HISTOGRAMS[base]}_{part}"] = float(line.split()[-1])
    return found


def server_means(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The means of HISTOGRAMS over a run, from /metrics read before and after it (nan if unknown)."""

    def mean(key: str, scale: float) -> float:
        count = after.get(f"{key}_count", 0.0) - before.get(f"{key}_count", 0.0)
        total = after.get(f"{key}_sum", 0.0) - before.get(f"{key}_sum", 0.0)
        return scale * total / count if count > 0 else float("nan")

    runs = {run: after.get(f"runs_{run}", 0.0) - before.get(f"runs_{run}", 0.0)
            for run in ("eager", "captured", "replayed")}
    phases = sum(runs.values())
    return {"server_ttfa_mean_ms": mean("ttfa", 1e3), "g2p_mean_ms": mean("g2p", 1e3),
            "first_chunk_mean_ms": mean("first", 1e3),
            "chunk_wait_mean_ms": mean("wait", 1e3), "chunks_per_call": mean("batch", 1.0),
            "call_mean_ms": mean("call", 1e3),
            "eager_phase_share": runs["eager"] / phases if phases else float("nan"),
            "captured_phase_share": runs["captured"] / phases if phases else float("nan")}


@dataclass
class MemorySample:
    """The server's memory at one moment of a run, with its speech responses so far."""

    at_s: float
    server_rss_mb: float | None  # the server process
    front_end_rss_mb: float | None  # its text front-end processes together
    gpu_mb: str
    speech_ok: float | None
    speech_failed: float | None


def sample_memory(target: Target, at_s: float) -> MemorySample:
    server = front_end = None
    if target.process is not None:
        pids = target.process.pids()
        server = rss_mb(pids[0])
        front_end = sum(r for r in map(rss_mb, pids[1:]) if r is not None)
    counts = server_metrics(target.url)
    return MemorySample(at_s, server, front_end, gpu_memory_mb(), counts.get("speech_ok"),
                        counts.get("speech_failed"))


class MemorySampler:
    """Samples the server's memory every ``every_s`` seconds in a thread, while the load runs."""

    def __init__(self, target: Target, every_s: float) -> None:
        self.target = target
        self.every_s = every_s
        self.samples: list[MemorySample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.perf_counter()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.samples.append(sample_memory(self.target, time.perf_counter() - self._started))

    def __enter__(self) -> MemorySampler:
        self._started = time.perf_counter()
        self.samples.append(sample_memory(self.target, 0.0))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(sample_memory(self.target, time.perf_counter() - self._started))


# ------------------------------------------------------------------- report


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def summarise(label: str, clients: int, fmt: str, records: list[Record], wall: float,
              cpu: float | None, made: float | None, server: dict[str, float] | None = None) -> dict:
    """One row; audio seconds are counted from the bytes for pcm, from the server's metric otherwise;
    ``server``: server_means of the run (unknown: all nan)."""
    ok = [r for r in records if r.error is None]
    ttfa = [r.ttfa * 1000 for r in ok if r.ttfa is not None]
    audio = sum(r.audio_s for r in ok) if fmt == "pcm" else (made or 0.0)
    rtf = [r.audio_s / r.duration for r in ok if r.duration > 0 and r.audio_s > 0]
    return {
        "mode": label, "clients": clients, "format": fmt, "requests": len(records),
        "errors": len(records) - len(ok), "ttfa_p50_ms": statistics.median(ttfa) if ttfa else float("nan"),
        "ttfa_p99_ms": _pct(ttfa, 0.99), "rtf_p50": statistics.median(rtf) if rtf else float("nan"),
        "rtf_min": min(rtf) if rtf else float("nan"),
        "underruns": sum(r.underrun for r in ok) if fmt == "pcm" else "-",
        "audio_s_per_s": audio / wall if wall > 0 else float("nan"),
        "cpu_s_per_audio_s": cpu / audio if cpu is not None and audio > 0 else float("nan"),
        **(server if server is not None else server_means({}, {})),
        "first_error": next((r.error for r in records if r.error), None),
    }


HEADER = ("| mode | clients | format | requests | errors | TTFA p50 ms | TTFA p99 ms | RTF p50 | RTF min "
          "| underruns | audio-s/s | server CPU s / audio s | server TTFA mean ms | G2P mean ms / piece "
          "| first chunk mean ms | chunk wait mean ms | chunks / model call | model call mean ms "
          "| phases eager / captured |")
COLUMNS = HEADER.count("|") - 1


def row(s: dict) -> str:
    return (f"| {s['mode']} | {s['clients']} | {s['format']} | {s['requests']} | {s['errors']} "
            f"| {s['ttfa_p50_ms']:.1f} | {s['ttfa_p99_ms']:.1f} | {s['rtf_p50']:.1f} | {s['rtf_min']:.1f} "
            f"| {s['underruns']} | {s['audio_s_per_s']:.1f} | {s['cpu_s_per_audio_s']:.3f} "
            f"| {s['server_ttfa_mean_ms']:.1f} | {s['g2p_mean_ms']:.1f} | {s['first_chunk_mean_ms']:.1f} "
            f"| {s['chunk_wait_mean_ms']:.1f} "
            f"| {s['chunks_per_call']:.1f} | {s['call_mean_ms']:.1f} "
            f"| {s['eager_phase_share']:.0%} / {s['captured_phase_share']:.0%} |")


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def measure(target: Target, args: argparse.Namespace, fmt: str, clients: int) -> dict:
    """``clients`` streams for ``args.duration`` seconds: the row (printed), with the server's CPU time
    and audio made over the run."""
    cpu0, metrics0 = cpu_seconds(target), server_metrics(target.url)
    records, wall = run_level(target.url, args.api_key, fmt, clients, args.duration, args.rate,
                              args.client_procs, args.corpus, args.voice_fields)
    cpu1, metrics1 = cpu_seconds(target), server_metrics(target.url)
    made0, made1 = metrics0.get("audio_s"), metrics1.get("audio_s")
    summary = summarise(target.label, clients, fmt, records, wall,
                        None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
                        None if made0 is None or made1 is None else made1 - made0,
                        server_means(metrics0, metrics1))
    print(row(summary), flush=True)
    if summary["first_error"]:
        print(f"#   first error: {summary['first_error']}", flush=True)
    return summary


def warm_up(target: Target, args: argparse.Namespace, fmt: str, clients: int) -> None:
    """Load that is not counted: the first batches of each size, the encoders, the front-end caches."""
    if args.warmup > 0:
        run_level(target.url, args.api_key, fmt, min(8, clients), args.warmup, None, args.client_procs,
                  args.corpus, args.voice_fields)


def run_mode(target: Target, args: argparse.Namespace, levels: list[int], formats: list[str]) -> list[dict]:
    """Warm up, then every format at every client count against one server; print each row."""
    warm_up(target, args, formats[0], max(levels))
    start = sample_memory(target, 0.0)
    rows = [measure(target, args, fmt, clients) for fmt in formats for clients in levels]
    end = sample_memory(target, 0.0)
    print(f"# {target.label}: server RSS {_mb(start.server_rss_mb)} -> {_mb(end.server_rss_mb)} MB, "
          f"GPU memory used {start.gpu_mb} -> {end.gpu_mb} MB", flush=True)
    return rows


MEMORY_HEADER = ("| at s | server RSS MB | front-end RSS MB | GPU memory used MB | speech responses ok "
                 "| speech responses failed |")


def soak(target: Target, args: argparse.Namespace, clients: int, fmt: str) -> dict:
    """``clients`` streams for ``args.duration`` seconds with the server's memory sampled throughout:
    the row, a table of samples, and a line with start / middle / end and the errors."""
    warm_up(target, args, fmt, clients)
    every = args.sample_every or max(1.0, args.duration / 10)
    with MemorySampler(target, every) as sampler:
        summary = measure(target, args, fmt, clients)
    samples = sampler.samples
    print(f"\n# soak: {target.label}, {clients} clients, {fmt}, {args.duration:g} s\n{MEMORY_HEADER}\n"
          + "|" + "---|" * 6, flush=True)
    for m in samples:
        print(f"| {m.at_s:.0f} | {_mb(m.server_rss_mb)} | {_mb(m.front_end_rss_mb)} | {m.gpu_mb} "
              f"| {_mb(m.speech_ok)} | {_mb(m.speech_failed)} |", flush=True)
    first, last = samples[0], samples[-1]
    middle = min(samples, key=lambda m: abs(m.at_s - last.at_s / 2))  # the streams open at the end run on
    failed = None if last.speech_failed is None or first.speech_failed is None else (
        last.speech_failed - first.speech_failed)
    print(f"# soak result: {summary['requests']} requests, {summary['errors']} client errors, "
          f"{_mb(failed)} failed server responses; server RSS start / middle / end "
          f"{_mb(first.server_rss_mb)} / {_mb(middle.server_rss_mb)} / {_mb(last.server_rss_mb)} MB, "
          f"front-end RSS {_mb(first.front_end_rss_mb)} / {_mb(middle.front_end_rss_mb)} / "
          f"{_mb(last.front_end_rss_mb)} MB, GPU memory used {first.gpu_mb} / {middle.gpu_mb} / "
          f"{last.gpu_mb} MB", flush=True)
    return summary | {"memory": [asdict(m) for m in samples]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="an existing server")
    target.add_argument("--model", help="start kokoro-serve with this model (dir or repo)")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--server-arg", action="append", default=[], help="extra kokoro-serve argument (repeat)")
    p.add_argument("--serial", action="store_true",
                   help="also run the same server one request at a time (--max-batch 1 --lanes 1)")
    p.add_argument("--clients", default="1,8,32,64,128", help="comma-separated client counts")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of load per client count")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of load before each mode, not counted")
    p.add_argument("--rate", type=float, default=None, help="open loop: requests per second (Poisson)")
    p.add_argument("--format", default="pcm", help="comma-separated: pcm, mp3, opus, ...")
    p.add_argument("--soak", action="store_true",
                   help="one client count and format for --duration seconds, sampling the server's RSS and "
                   "GPU memory throughout (start, middle, end reported)")
    p.add_argument("--sample-every", type=float, default=None,
                   help="seconds between memory samples of --soak (default: a tenth of --duration, >= 1)")
    p.add_argument("--client-procs", type=int, default=None,
                   help="processes the clients are spread over (default: up to 8, one per client processor)")
    p.add_argument("--client-cpus", type=int, default=0,
                   help="pin the clients to this process's last N processors and the server it starts to "
                   "the others, so that reading the streams does not take the server's cores (default 0: "
                   "no pinning)")
    p.add_argument("--api-key", default=os.environ.get("KOKORO_API_KEY"))
    p.add_argument("--texts", default="mixed",
                   help="mixed (the built-in corpus), short (its one-sentence texts) or a file of texts")
    p.add_argument("--voice", default="af_heart", help="voice of every request")
    p.add_argument("--lang", default=None, help="lang of every request (en-us: English with any voice)")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    if args.serial and args.url:
        p.error("--serial starts its own two servers; give --model instead of --url")
    if args.client_cpus and args.url:
        p.error("--client-cpus pins a server this script starts; give --model instead of --url")
    server_cpus, client_cpus = split_cpus(args.client_cpus)
    if client_cpus is not None:
        os.sched_setaffinity(0, client_cpus)  # the client processes inherit it
    if args.client_procs is None:
        args.client_procs = min(8, len(os.sched_getaffinity(0)))
    levels = [int(c) for c in args.clients.split(",")]
    formats = args.format.split(",")
    if args.soak and (len(levels) != 1 or len(formats) != 1):
        p.error("--soak runs one client count and one format: give --clients N --format F")
    args.corpus = load_texts(args.texts)
    args.voice_fields = {"voice": args.voice} | ({"lang": args.lang} if args.lang else {})

    base = [] if args.url else ["--model", args.model, "--device", args.device,
                                "--precision", args.precision, *args.server_arg]
    serial = [*base, "--max-batch", "1", "--lanes", "1"]
    modes = [("batched", base)] + ([("one-at-a-time", serial)] if args.serial else [])
    rows = []
    print(HEADER)
    print("|" + "---|" * COLUMNS)
    for label, server_args in modes:
        server = Target(label, args.url.rstrip("/")) if args.url else start_server(server_args, label,
                                                                                  server_cpus)
        try:
            if args.soak:
                rows.append(soak(server, args, levels[0], formats[0]))
            else:
                rows.extend(run_mode(server, args, levels, formats))
        finally:
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
