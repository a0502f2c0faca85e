"""Loader fuzzing: hostile checkpoint, voice and config files end in a clean error or the genuine load.

A mutation corpus is made at test time from the tiny fixtures (tests/data/tiny)
and small files derived from them: truncations, bit flips and byte runs, zip
member edits (dropped, renamed, recompressed, encrypted-flagged, oversized),
pickle opcodes (GLOBAL / REDUCE payloads that would create a marker file,
BUILD on the reader's stand-ins, PERSID variants, deep and exponentially shared
nesting, memo and integer abuse, huge or stride-0 tensor sizes), non-finite and
absurd values, safetensors / .npy header edits and bad config.json values.

Each case is loaded in a worker process (many cases per worker, restarted after
a crash or a timeout) under a per-case time limit and an address-space cap. A
case passes when the load raises a KokoroError with a one-line message or
returns exactly what the genuine file gives; after every case the worker loads
the genuine fixture again and must get the same result as before (no state
carried between loads), and no payload may ever create its marker file. The
figures are printed (``pytest -s``) and written to $KOKORO_REPORT_DIR when set.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from fuzz_corpus import MARKER, Case, build_corpus

CASE_SECONDS = 20.0  # per case, generous for a loaded CI machine; the worst time is reported
MEMORY_HEADROOM = 1 << 30  # address space a case may add to the worker's
PTH_MAX_BYTES = 1 << 20  # what a tiny model's layout would allow (load_checkpoint passes its own)


# -- the worker: loads cases one by one --------------------------------------------------------


def _digest(value: Any) -> str:
    """A canonical hash of a loaded value (nested dicts, lists, arrays, scalars)."""
    h = hashlib.sha256()

    def feed(v: Any) -> None:
        if isinstance(v, np.ndarray):
            h.update(f"a{v.dtype.str}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, dict):
            h.update(b"d")
            for k in sorted(v, key=repr):
                h.update(repr(k).encode())
                feed(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(f"l{len(v)}".encode())
            for item in v:
                feed(item)
        else:
            h.update(repr(v).encode())

    feed(value)
    return h.hexdigest()


def _load(kind: str, file: str | Path) -> Any:
    """What the project does with a file of this kind, as a value to compare."""
    path = Path(file)
    from kokoro_gpu.checkpoint import flatten_official, read_safetensors, value_problem
    from kokoro_gpu.config import ModelConfig
    from kokoro_gpu.errors import CheckpointError
    from kokoro_gpu.pth import read_pth
    from kokoro_gpu.voices import VoiceStore

    if kind in ("pth", "safetensors"):
        state = read_pth(path, max_bytes=PTH_MAX_BYTES) if kind == "pth" else read_safetensors(
            path, max_bytes=PTH_MAX_BYTES)
        flat = flatten_official(state, str(path))
        for name, arr in flat.items():
            problem = value_problem(arr)
            if problem is not None:
                raise CheckpointError(f"{path}: {name} has {problem}")
        return flat
    if kind == "voice":
        return VoiceStore(None, None).load(str(path))
    if kind == "bin":
        store = VoiceStore(path.parent, None)
        store.available()  # what --list-voices shows
        return {name: store.load(name) for name in ("af_one", "bf_two")}
    if kind == "config":
        config = ModelConfig.load(path)
        return {f: getattr(config, f) for f in config.__dataclass_fields__ if f != "raw"}
    raise ValueError(kind)


def _layout(value: Any) -> dict[str, tuple] | None:
    """Tensor name -> (shape, dtype) of a flat checkpoint: what fold_official checks against a layout."""
    if not isinstance(value, dict):
        return None
    return {k: (v.shape, v.dtype.str) if isinstance(v, np.ndarray) else None for k, v in value.items()}


def _peak_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _worker(genuine_json: str) -> None:
    import resource

    from kokoro_gpu.errors import MAX_MESSAGE_CHARS, KokoroError

    genuine: dict[str, str] = json.loads(genuine_json)
    values = {base: _load(*base.split(":", 1)) for base in genuine}
    reference = {base: _digest(value) for base, value in values.items()}
    layouts = {base: _layout(value) for base, value in values.items()}
    with open("/proc/self/status") as f:
        vm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    limit = vm_kb * 1024 + MEMORY_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    print(json.dumps({"ready": True, "rss_kb": _peak_kb()}), flush=True)
    for line in sys.stdin:
        case = json.loads(line)
        _reset_peak()
        start = time.perf_counter()
        message = ""
        try:
            value = _load(case["kind"], Path(case["path"]))
            if _digest(value) == reference[case["base"]]:
                outcome = "identical"
            elif case["kind"] in ("pth", "safetensors") and _layout(value) != layouts[case["base"]]:
                # A well-formed file of other tensors: load_checkpoint's layout check refuses it.
                outcome = "layout-refused"
            else:
                outcome = "different"
        except KokoroError as e:
            message = str(e)
            one_line = "\n" not in message and "\r" not in message and len(message) <= MAX_MESSAGE_CHARS
            outcome = "error" if one_line else "long error"
        except MemoryError:
            outcome = "memory"
        except BaseException as e:  # what the test exists to find
            outcome, message = "escaped", f"{type(e).__name__}: {str(e)[:200]}"
        seconds = time.perf_counter() - start
        peak = _peak_kb()
        state_ok = _digest(_load(*case["base"].split(":", 1))) == reference[case["base"]]
        print(json.dumps({"outcome": outcome, "message": message[:300], "seconds": seconds,
                          "peak_kb": peak, "state_ok": state_ok}), flush=True)


class _Pool:
    """One worker process at a time, fed cases over a pipe; restarted after a crash or timeout."""

    def __init__(self, genuine: dict[str, str], cwd: Path) -> None:
        self.genuine, self.cwd = genuine, cwd
        self.proc: subprocess.Popen[str] | None = None
        self.restarts = 0
        self.baseline_kb = 0  # the worker's peak RSS before its first case

    def _start(self) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(self.genuine)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=self.cwd, env=env)
        reply = self._reply(120.0)
        assert reply is not None and reply.get("ready"), "the fuzz worker did not start"
        self.baseline_kb = max(self.baseline_kb, reply["rss_kb"])

    def _reply(self, timeout: float) -> dict | None:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        return json.loads(line) if line else None

    def run(self, case: Case) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        start = time.perf_counter()
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        reply = self._reply(CASE_SECONDS)
        if reply is None:
            timed_out = self.proc.poll() is None
            self.close()
            self.restarts += 1
            return {"outcome": "timeout" if timed_out else "crash", "message": "",
                    "seconds": time.perf_counter() - start, "peak_kb": 0, "state_ok": True}
        return reply

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


# -- the test ----------------------------------------------------------------------------------


def test_hostile_files_end_cleanly(tmp_path: Path) -> None:
    cases, genuine = build_corpus(tmp_path)
    # The worker loads base "kind:name" from the genuine file; cases name their own file.
    genuine_spec = {base: f"{base.split(':')[0]}:{path}" for base, path in genuine.items()}
    for case in cases:
        case["base"] = genuine_spec[case["base"]]
    sandbox = tmp_path / "cwd"
    sandbox.mkdir()
    pool = _Pool({spec: "" for spec in genuine_spec.values()}, sandbox)
    results = []
    start = time.perf_counter()
    try:
        for case in cases:
            results.append({**case, **pool.run(case)})
    finally:
        pool.close()
    elapsed = time.perf_counter() - start

    outcomes: dict[str, int] = {}
    for r in results:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    worst_time = max(results, key=lambda r: r["seconds"])
    worst_memory = max(results, key=lambda r: r["peak_kb"])
    summary = {
        "cases": len(results),
        "outcomes": outcomes,
        "worst_seconds": round(worst_time["seconds"], 3),
        "worst_seconds_case": worst_time["label"],
        "worst_peak_rss_mib": round(worst_memory["peak_kb"] / 1024, 1),
        "worst_peak_rss_case": worst_memory["label"],
        "worker_rss_before_cases_mib": round(pool.baseline_kb / 1024, 1),
        "worker_restarts": pool.restarts,
        "wall_seconds": round(elapsed, 1),
    }
    print("\nloader fuzz:", json.dumps(summary))
    report_dir = os.environ.get("KOKORO_REPORT_DIR")
    if report_dir:
        Path(report_dir).mkdir(parents=True, exist_ok=True)
        (Path(report_dir) / "fuzz_loaders.json").write_text(json.dumps(
            {"summary": summary, "cases": results}, indent=1) + "\n")

    bad = [f"{r['label']} on {r['base']}: {r['outcome']} {r['message']}" for r in results
           if r["outcome"] not in ("error", "identical", "layout-refused")]
    assert not bad, f"{len(bad)} cases neither failed cleanly nor loaded the genuine value: {bad[:10]}"
    leaked = [f"{r['label']} on {r['base']}" for r in results if not r["state_ok"]]
    assert not leaked, f"a later genuine load changed after: {leaked[:10]}"
    markers = [p for p in tmp_path.rglob(f"*{MARKER}*")]
    assert not markers, f"a payload ran: {markers}"
    assert len(results) >= 500 and outcomes.get("error", 0) >= 400


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _worker(sys.argv[2])
