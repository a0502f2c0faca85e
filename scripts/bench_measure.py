"""The measuring instruments of ``scripts/bench.py``: call timing, the GPU's matrix-product peaks and
memory in use, its power draw and clock while a case runs, the generator's FLOPs, and the per-step
time of the LSTM op."""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kokoro_gpu.config import ModelConfig
from kokoro_gpu.layout import folded_layout

PEAK_MATMUL_N = 8192


# ------------------------------------------------------------------- timing


def time_calls(fn: Callable[[], Any], warmup: int, repeats: int, sync: Callable[[], None]) -> list[float]:
    """Seconds per call of fn, each bracketed by sync(), after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def no_sync() -> None:
    """time_calls' sync where a call leaves nothing on a device to wait for."""


# ------------------------------------------------------------------ the GPU


class PowerSampler:
    """The GPU's power draw and SM clock, sampled by nvidia-smi while a case runs.

    A batch keeps the GPU at its power limit, where the driver lowers the clock: that clock is
    part of the batch's number, so its row reports it. A no-op (empty summary) where nvidia-smi
    is missing or cannot report; the GPU is the first of CUDA_VISIBLE_DEVICES, else index 0.
    """

    FIELDS = ("power.draw", "clocks.sm", "clocks_event_reasons.sw_power_cap")

    def __init__(self, interval_ms: int = 50) -> None:
        self.interval_ms = interval_ms
        self.samples: list[list[str]] = []
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> PowerSampler:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return self
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        base = [smi, "-i", visible if visible.isdigit() else "0", "--format=csv,noheader,nounits"]
        # Older drivers lack the power-cap field: fall back to power and clock alone.
        for fields in (self.FIELDS, self.FIELDS[:2]):
            query = [*base, "--query-gpu=" + ",".join(fields)]
            try:
                if subprocess.run(query, capture_output=True, timeout=10).returncode != 0:
                    continue
                self._proc = subprocess.Popen(
                    [*query, "-lms", str(self.interval_ms)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            except (OSError, subprocess.TimeoutExpired):
                pass
            break
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            out, _ = self._proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            out, _ = self._proc.communicate()
        self.samples = [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.strip()]

    def summary(self) -> str:
        """E.g. "GPU 690 W, SM 1890 MHz (min 1620), power-capped 89%" (medians over the samples)."""
        rows = []
        for fields in self.samples:
            try:
                rows.append((float(fields[0]), float(fields[1]), fields[2:]))
            except (ValueError, IndexError):
                continue
        if not rows:
            return ""
        watts, clocks = [r[0] for r in rows], [r[1] for r in rows]
        text = f"GPU {statistics.median(watts):.0f} W, SM {statistics.median(clocks):.0f} MHz"
        text += f" (min {min(clocks):.0f})"
        capped = [r[2][0] == "Active" for r in rows if r[2]]
        if capped:
            text += f", power-capped {100 * sum(capped) / len(capped):.0f}%"
        return text


def measure_peaks(torch: Any) -> dict[str, float]:
    """Matrix-product rates (TFLOP/s) on this GPU: fp32 (no TF32), tf32, bf16; random operands."""
    n = PEAK_MATMUL_N
    peaks: dict[str, float] = {}
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        for label, dtype, tf32 in (
            ("fp32", torch.float32, False),
            ("tf32", torch.float32, True),
            ("bf16", torch.bfloat16, False),
        ):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            times = time_calls(lambda a=a, b=b: torch.mm(a, b), 2, 5, torch.cuda.synchronize)
            peaks[label] = 2.0 * n**3 / statistics.median(times) / 1e12
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    torch.cuda.empty_cache()
    return peaks


def device_used_bytes(torch: Any | None) -> int | None:
    """Device-wide memory in use (cudaMemGetInfo through torch), or None."""
    if torch is None or not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return int(total - free)


# -------------------------------------------------------------------- FLOPs


def generator_flops(config: ModelConfig, frames: int) -> float:
    """2 x MACs of every conv / transposed conv of decoder.generator for `frames` frames.

    The generator's input runs at 2 frames per frame (the decoder upsamples
    once); stage i upsamples by rates[i]; the last stage is reflection-padded
    by one sample. Conv1d weights are [Cout, Cin/g, K] (MACs: product x output
    length); ConvTranspose1d weights [Cin, Cout/g, K] (product x input length).
    """
    rates = [int(r) for r in config.istftnet["upsample_rates"]]
    n_kernels = len(config.istftnet["resblock_kernel_sizes"])
    lengths = []  # per stage, after upsampling (and padding)
    length = 2 * frames
    for i, rate in enumerate(rates):
        length *= rate
        lengths.append(length + (1 if i == len(rates) - 1 else 0))
    stage_in = [2 * frames * math.prod(rates[:i]) for i in range(len(rates))]
    prefix = "decoder.generator."
    macs = 0
    for name, shape in folded_layout(config).items():
        if not (name.startswith(prefix) and name.endswith(".weight") and len(shape) == 3):
            continue
        parts = name[len(prefix) :].split(".")
        kind, weight_macs = parts[0], math.prod(shape)
        if kind == "ups":
            macs += weight_macs * stage_in[int(parts[1])]
        elif kind == "resblocks":
            macs += weight_macs * lengths[int(parts[1]) // n_kernels]
        elif kind in ("noise_convs", "noise_res"):
            macs += weight_macs * lengths[int(parts[1])]
        elif kind == "conv_post":
            macs += weight_macs * lengths[-1]
        else:
            raise ValueError(f"generator_flops: no length rule for {name}")
    return 2.0 * macs


# -------------------------------------------------------------- LSTM probe


def lstm_probe(warmup: int, repeats: int) -> list[dict[str, Any]] | None:
    """Per-step time of ops.lstm_bidirectional through the op binding, for H 256 and 257.

    H 256 is the model's size (the cluster path on sm_90); H 257 is no cluster
    size, so it times the fallback kernel (the one-block-per-direction kernel
    that was the only path before) at about the same work. A binding call
    uploads its inputs, runs the op and downloads [T, 2H]; albert_embeddings
    with a [178, 2H] table moves the same output and almost no input, so
    (lstm - embeddings) over T, fitted by least squares, is the device time per
    step (the input GEMM, ~5 MFLOP a step, rides along).
    """
    try:
        from kokoro_gpu import _native
    except ImportError:
        return None
    if not hasattr(_native, "ops") or _native.cuda_status().get("device_count", 0) == 0:
        return None
    ops = _native.ops
    rng = np.random.default_rng(0)
    d_in, repeats = 16, max(repeats, 10)
    results = []
    for hidden in (256, 257):
        w_ih = rng.uniform(-1, 1, (2, 4 * hidden, d_in)).astype(np.float32) / 16
        w_hh = rng.uniform(-1, 1, (2, 4 * hidden, hidden)).astype(np.float32) / 16
        b = rng.uniform(-1, 1, (2, 4 * hidden)).astype(np.float32) / 16
        table = rng.standard_normal((178, 2 * hidden)).astype(np.float32)
        points = []
        for t_len in (50, 500, 1500):
            x = rng.standard_normal((t_len, d_in)).astype(np.float32)
            ids = rng.integers(0, 178, t_len).astype(np.int32)

            def lstm(
                x: np.ndarray = x, w_ih: np.ndarray = w_ih, w_hh: np.ndarray = w_hh, b: np.ndarray = b
            ) -> np.ndarray:
                return ops.lstm_bidirectional(x, w_ih, w_hh, b)

            def transfer(ids: np.ndarray = ids, table: np.ndarray = table) -> np.ndarray:
                return ops.albert_embeddings(ids, table)

            t_lstm = statistics.median(time_calls(lstm, warmup + 2, repeats, no_sync))
            t_base = statistics.median(time_calls(transfer, warmup + 2, repeats, no_sync))
            points.append({"T": t_len, "lstm_ms": t_lstm * 1e3, "baseline_ms": t_base * 1e3})
        steps = np.array([p["T"] for p in points], dtype=np.float64)
        net = np.array([p["lstm_ms"] - p["baseline_ms"] for p in points]) * 1e3
        slope, intercept = np.polyfit(steps, net, 1)
        results.append({"hidden": hidden, "points": points, "us_per_step": slope, "fixed_us": intercept})
    return results
