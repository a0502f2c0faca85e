"""Short-time Fourier transforms of the generator (native/ops/stft.cu).

Both follow ``torch.stft`` / ``torch.istft`` with ``center=True``: periodic
Hann window of length n_fft, frames every ``hop`` samples of the signal
reflect-padded by n_fft // 2 on each side.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def hann_periodic(n: int) -> np.ndarray:
    """Periodic Hann window ``0.5 - 0.5 cos(2 pi i / n)``, float64."""
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)


def stft_mag_phase(x: np.ndarray, n_fft: int = 20, hop: int = 5) -> np.ndarray:
    """Magnitudes then phases (atan2) of the centred STFT of x [N] -> [2 * (n_fft // 2 + 1), N // hop + 1]."""
    half = n_fft // 2
    xp = np.pad(x, (half, half), mode="reflect")
    frames = sliding_window_view(xp, n_fft)[::hop]  # [frames, n_fft]
    spec = np.fft.rfft(frames * hann_periodic(n_fft).astype(x.dtype), axis=-1).T  # [bins, frames]
    return np.concatenate([np.abs(spec), np.angle(spec)]).astype(x.dtype)


def istft_from_logits(logits: np.ndarray, n_fft: int = 20, hop: int = 5) -> np.ndarray:
    """Inverse STFT of the generator head: logits [2 * bins, frames] -> audio [hop * (frames - 1)].

    ``spec = exp(logits[:bins])``, ``phase = sin(logits[bins:])``; each frame's
    spectrum ``spec * e^{i phase}`` is inverted (real FFT of length n_fft),
    windowed and overlap-added, divided by the overlap-added squared window,
    and the n_fft // 2 centre padding trimmed from both ends.
    """
    bins = n_fft // 2 + 1
    n_frames = logits.shape[1]
    window = hann_periodic(n_fft).astype(logits.dtype)
    spec = np.exp(logits[:bins])
    phase = np.sin(logits[bins:])
    frames = np.fft.irfft((spec * np.exp(1j * phase)).T, n=n_fft, axis=-1).astype(logits.dtype) * window
    total = n_fft + hop * (n_frames - 1)
    signal = np.zeros(total, dtype=logits.dtype)
    envelope = np.zeros(total, dtype=logits.dtype)
    # Overlap-add tap by tap (n_fft iterations): sample j of frame f lands at f * hop + j.
    span = hop * (n_frames - 1) + 1
    for j in range(n_fft):
        signal[j : j + span : hop] += frames[:, j]
        envelope[j : j + span : hop] += window[j] ** 2
    half = n_fft // 2
    end = total - half
    return signal[half:end] / envelope[half:end]
