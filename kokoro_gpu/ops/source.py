"""Harmonic-plus-noise excitation of the generator (native/ops/source.cu).

SineGen + ``l_linear`` + tanh of the official SourceModuleHnNSF.
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from .elementwise import interpolate_linear, upsample_nearest
from .parallel import spawn


def harmonic_source(
    f0: np.ndarray,
    upp: int,
    lin_w: np.ndarray,
    lin_b: np.ndarray,
    rng: np.random.Generator | None = None,
    sample_rate: int = 24000,
    n_harm: int = 9,
    sine_amp: float = 0.1,
    noise_std: float = 0.003,
    voiced_threshold: float = 10.0,
) -> np.ndarray:
    """Excitation signal from the F0 curve: f0 [Tf] (Hz) -> [Tf * upp], in f0's dtype.

    f0 is upsampled x ``upp`` (nearest); harmonic k = 1..n_harm advances by
    ``rad = (k f0 / sample_rate) % 1`` cycles per sample, with a random initial
    phase (uniform [0, 1)) added at sample 0 for k >= 2. As in the official
    SineGen, the phase is integrated at the frame rate: ``rad`` is linearly
    resampled by 1 / upp, summed cumulatively, scaled by 2 pi * upp and
    linearly resampled back x upp. Sines (amplitude ``sine_amp``) are kept
    where f0 > voiced_threshold; gaussian noise of std ``noise_std`` (voiced)
    or ``sine_amp / 3`` (unvoiced) is added; then ``tanh(lin_w @ harmonics + lin_b)``
    with lin_w [1, n_harm], lin_b [1]. ``rng=None`` zeroes both random parts.
    The phase path runs in float64 (it reaches thousands of radians before sin).
    """
    dtype = f0.dtype
    f0_up = upsample_nearest(f0.astype(np.float64)[None, :], upp)[0]  # [L]
    harmonics = np.arange(1, n_harm + 1, dtype=np.float64)
    rad = (harmonics[:, None] * f0_up[None, :] / sample_rate) % 1.0  # [n_harm, L]
    voiced = f0_up > voiced_threshold
    noise: Future[np.ndarray] | None = None
    if rng is not None:
        rand_ini = rng.random(n_harm)
        rand_ini[0] = 0.0
        rad[:, 0] += rand_ini

        def draw_noise(gen: np.random.Generator = rng) -> np.ndarray:
            amp = np.where(voiced, noise_std, sine_amp / 3.0)
            return (amp[None, :] * gen.standard_normal((n_harm, f0_up.size))).astype(dtype)

        # The noise is drawn after the initial phases, as before, on a worker beside the sines.
        noise = spawn(draw_noise)
    phase = np.cumsum(interpolate_linear(rad, 1.0 / upp), axis=-1) * (2.0 * np.pi * upp)
    sines = (np.sin(interpolate_linear(phase, upp)) * sine_amp).astype(dtype)  # [n_harm, L]
    waves = np.where(voiced[None, :], sines, dtype.type(0))
    if noise is not None:
        waves += noise.result()
    merged = lin_w.astype(dtype) @ waves + lin_b.astype(dtype)[:, None]  # [1, L]
    return np.tanh(merged[0])
