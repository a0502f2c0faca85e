"""A real kokoro-serve process on 127.0.0.1 for the server tests, and audio decoding helpers."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import numpy as np
import soundfile

from kokoro_gpu.server.launcher import ServerProcess

API_KEY = "test-key"


def cpu_server(model_dir: Path, *extra: str, log: Path, cpus: set[int] | None = None) -> ServerProcess:
    """kokoro-serve on the CPU backend with one front-end process, its output in ``log``."""
    return ServerProcess(["--model", str(model_dir), "--device", "cpu", "--g2p-workers", "1",
                          "--log-level", "warning", *extra], log=log, cpus=cpus)


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
