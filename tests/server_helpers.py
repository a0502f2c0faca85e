"""A real kokoro-serve process on 127.0.0.1 for the server tests, and audio decoding helpers."""

from __future__ import annotations

import io
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import soundfile

API_KEY = "test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``python -m kokoro_gpu.server`` in a subprocess; ``stop()`` sends SIGTERM (graceful shutdown)."""

    def __init__(self, model_dir: Path, *extra: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        argv = [sys.executable, "-m", "kokoro_gpu.server", "--model", str(model_dir), "--device", "cpu",
                "--port", str(self.port), "--g2p-workers", "1", "--log-level", "warning", *extra]
        self._log_file = open(log, "wb")  # closed in stop()
        self.process = subprocess.Popen(argv, stdout=self._log_file, stderr=subprocess.STDOUT,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def wait_ready(self, timeout: float = 180.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process.poll() is not None:
                tail = self.log.read_text()[-2000:]
                raise RuntimeError(f"server exited with {self.process.returncode}: {tail}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"server not ready after {timeout} s: {self.log.read_text()[-2000:]}")

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=10).json()

    def stop(self, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()
        return self.process.returncode


def pcm16(audio: np.ndarray) -> np.ndarray:
    return np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16)


def decode(data: bytes, fmt: str) -> np.ndarray:
    """Encoded audio -> float32 samples at 24 kHz; 16-bit formats as int16 / 32767 (exact for ``pcm16``).

    PyAV reads what libsndfile cannot: flac streamed with its length unknown, and aac.
    """
    if fmt == "pcm":
        samples = np.frombuffer(data, dtype="<i2")
    elif fmt in ("wav", "mp3", "opus"):
        samples, rate = soundfile.read(io.BytesIO(data), dtype="int16" if fmt == "wav" else "float32")
        assert rate == 24000
    else:
        import av

        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.audio[0]
            assert stream.codec_context.sample_rate == 24000
            samples = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(stream)])
    if samples.dtype == np.int16:
        return samples.astype(np.float32) / 32767
    return samples.astype(np.float32)


def band_similarity(a: np.ndarray, b: np.ndarray, n_fft: int = 512, bands: int = 16) -> float:
    """Correlation of the log energies in 16 bands up to 8 kHz, frame by frame, after aligning ``a`` to ``b``.

    Perceptual codecs keep band energies where they drop fine structure, so this
    separates "the same audio, lossily coded" from other audio.
    """
    lag = best_lag(a, b)
    a, b = (a[lag:], b) if lag >= 0 else (a, b[-lag:])
    n = min(len(a), len(b))
    edges = np.linspace(0, 8000 * n_fft // 24000, bands + 1).astype(int)
    energies = []
    for x in (a[:n], b[:n]):
        frames = np.lib.stride_tricks.sliding_window_view(x, n_fft)[:: n_fft // 2] * np.hanning(n_fft)
        power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
        per_band = np.stack([power[:, lo:hi].sum(axis=1) for lo, hi in itertools.pairwise(edges)], axis=1)
        energies.append(np.log10(per_band + 1e-6).ravel())
    return float(np.corrcoef(energies[0], energies[1])[0, 1])


def best_lag(a: np.ndarray, b: np.ndarray, max_lag: int = 3000) -> int:
    """The shift ``k`` (|k| <= max_lag) maximising sum a[i + k] b[i]."""
    size = 1 << (len(a) + len(b)).bit_length()
    corr = np.fft.irfft(np.fft.rfft(a, size) * np.conj(np.fft.rfft(b, size)), size)
    lags = np.arange(-max_lag, max_lag + 1)
    return int(lags[np.argmax(corr[lags % size])])
