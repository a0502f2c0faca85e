"""CUDA STFT, inverse STFT and harmonic source against the NumPy reference ops.

Every test draws fresh random inputs (tests/native_ops.py), runs the op on the GPU through the
test bindings kokoro_gpu._native.ops (outputs filled with NaN first, so an unwritten element
fails) and compares with the reference op in float64, normwise. Skipped without a GPU or a
native module built with its test bindings.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from native_ops import (
    SHORT_REDUCTION_TOL,
    check,
    f32,
    f64,
    gpu,
)

from kokoro_gpu import ops as ref

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", [11, 600, 1001, 12347])
def test_stft_mag_phase(rng: np.random.Generator, n: int) -> None:
    x = f32(np.tanh(rng.standard_normal(n)))
    got = gpu.stft_mag_phase(x)
    want = ref.stft_mag_phase(f64(x))
    bins = want.shape[0] // 2
    check(f"stft magnitude n={n}", got[:bins], want[:bins], SHORT_REDUCTION_TOL)
    # Phase is only defined where the magnitude is well above rounding noise.
    mag = want[:bins]
    reliable = mag > 1e-2 * mag.max()
    diff = np.angle(np.exp(1j * (got[bins:].astype(np.float64) - want[bins:])))
    worst = float(np.max(np.abs(diff[reliable])))
    print(f"[native-ops] stft phase n={n}: max abs err {worst:.2e} rad where |X| > 1% of max")
    assert np.all(np.isfinite(got[bins:]))
    assert worst < 1e-4


def test_stft_real_bins_phase_is_zero_or_pi(rng: np.random.Generator) -> None:
    # The DC and Nyquist bins of a real signal are real: their phase is 0 or +pi as atan2 of an
    # imaginary part of +0 gives it (a -0 would give -pi, a jump of 2 pi the noise convs see).
    x = f32(np.tanh(rng.standard_normal(3001)))
    got = gpu.stft_mag_phase(x)
    want = ref.stft_mag_phase(f64(x))
    bins = want.shape[0] // 2
    for b in (0, bins - 1):
        assert set(np.unique(got[bins + b]).tolist()) <= {0.0, float(np.float32(np.pi))}
        assert np.array_equal(got[bins + b] == 0, want[bins + b] == 0)


# 206 frames: 1025 output samples, one past the inverse kernel's run of 1024 per block.
@pytest.mark.parametrize("frames", [2, 3, 121, 206, 1201])
def test_istft_from_logits(rng: np.random.Generator, frames: int) -> None:
    logits = f32(np.concatenate([rng.standard_normal((11, frames)), rng.standard_normal((11, frames)) * 2]))
    check(
        f"istft frames={frames}",
        gpu.istft_from_logits(logits),
        ref.istft_from_logits(f64(logits)),
        SHORT_REDUCTION_TOL,
    )


def test_istft_single_frame_is_empty() -> None:
    assert gpu.istft_from_logits(np.zeros((22, 1), np.float32)).shape == (0,)


# ------------------------------------------------------------------ source


def _voiced_f0(rng: np.random.Generator, n: int) -> np.ndarray:
    f0 = rng.uniform(100, 250, n)
    f0[rng.random(n) < 0.2] = 0.0  # unvoiced stretches
    return f32(f0)


@pytest.mark.parametrize("t_f,upp", [(1, 300), (2, 1), (37, 2), (37, 3), (200, 300)])
def test_harmonic_source_deterministic(rng: np.random.Generator, t_f: int, upp: int) -> None:
    f0 = _voiced_f0(rng, t_f)
    lin_w, lin_b = f32(rng.standard_normal((1, 9)) * 0.3), f32(rng.standard_normal(1) * 0.1)
    want = ref.harmonic_source(f64(f0), upp, f64(lin_w), f64(lin_b), rng=None)
    check(
        f"harmonic_source deterministic Tf={t_f} upp={upp}",
        gpu.harmonic_source(f0, upp, lin_w, lin_b),
        want,
        SHORT_REDUCTION_TOL,
    )


def _one_hot(h: int, n_harm: int = 9) -> np.ndarray:
    w = np.zeros((1, n_harm), np.float32)
    w[0, h] = 1.0
    return w


ZERO_BIAS = np.zeros(1, np.float32)


def test_harmonic_source_seeding(rng: np.random.Generator) -> None:
    f0 = _voiced_f0(rng, 50)
    lin_w = f32(rng.standard_normal((1, 9)) * 0.3)
    a = gpu.harmonic_source(f0, 300, lin_w, ZERO_BIAS, seed=1234)
    np.testing.assert_array_equal(a, gpu.harmonic_source(f0, 300, lin_w, ZERO_BIAS, seed=1234))
    b = gpu.harmonic_source(f0, 300, lin_w, ZERO_BIAS, seed=1235)
    assert np.all(np.isfinite(a)) and np.mean(a != b) > 0.99


@pytest.mark.parametrize("h", [0, 4, 8])
def test_harmonic_source_unvoiced_noise(h: int) -> None:
    """Unvoiced (f0 = 0): the output is tanh(noise) with noise ~ N(0, (sine_amp / 3)^2)."""
    f0 = np.zeros(200, np.float32)
    noise = np.arctanh(gpu.harmonic_source(f0, 300, _one_hot(h), ZERO_BIAS, seed=7 + h).astype(np.float64))
    n, sigma = noise.size, 0.1 / 3
    assert abs(noise.mean()) < 5 * sigma / math.sqrt(n)
    assert abs(noise.std() / sigma - 1) < 5 * math.sqrt(0.5 / n)
    z = np.sort(noise / sigma)  # Kolmogorov-Smirnov against the standard normal
    cdf = 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    ks = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
    assert ks < 1.95 / math.sqrt(n)  # 0.1 % level
    # The harmonics draw independent noise: their sum has variance 2 sigma^2.
    pair = np.zeros((1, 9), np.float32)
    pair[0, [h, (h + 1) % 9]] = 1.0
    both = np.arctanh(gpu.harmonic_source(f0, 300, pair, ZERO_BIAS, seed=99).astype(np.float64))
    assert abs(both.std() / (sigma * math.sqrt(2)) - 1) < 5 * math.sqrt(0.5 / n)


def test_harmonic_source_voiced_noise(rng: np.random.Generator) -> None:
    """Voiced: seeded minus deterministic output (through arctanh) is N(0, noise_std^2)."""
    f0 = f32(rng.uniform(100, 250, 200))
    w = _one_hot(2)
    clean = np.arctanh(gpu.harmonic_source(f0, 300, w, ZERO_BIAS).astype(np.float64))
    noisy = np.arctanh(gpu.harmonic_source(f0, 300, w, ZERO_BIAS, seed=3).astype(np.float64))
    noise = noisy - clean
    n, sigma = noise.size, 0.003
    assert abs(noise.mean()) < 5 * sigma / math.sqrt(n)
    assert abs(noise.std() / sigma - 1) < 5 * math.sqrt(0.5 / n) + 1e-3


def test_harmonic_source_initial_phases() -> None:
    """Initial phases: none for the fundamental, uniform [0, 1) cycles for harmonics 2..9.

    With upp = 1 the frame-rate integration keeps the phase added at sample 0;
    with f0 = 0 counted as voiced and no noise, harmonic h then outputs the
    constant tanh(sine_amp sin(2 pi phi_h)), so sin(2 pi phi) follows the
    arcsine law (CDF 1/2 + asin(s) / pi) if phi is uniform.
    """
    f0 = np.zeros(4, np.float32)
    kwargs: dict[str, float] = {"noise_std": 0.0, "voiced_threshold": -1.0, "sine_amp": 0.1}
    fundamental = gpu.harmonic_source(f0, 1, _one_hot(0), ZERO_BIAS, seed=5, **kwargs)
    np.testing.assert_array_equal(fundamental, np.zeros(4, np.float32))
    for h in (1, 8):
        s = np.array(
            [
                np.arctanh(
                    np.float64(gpu.harmonic_source(f0, 1, _one_hot(h), ZERO_BIAS, seed=seed, **kwargs)[0])
                )
                / 0.1
                for seed in range(400)
            ]
        )
        s = np.sort(np.clip(s, -1, 1))
        n = s.size
        cdf = 0.5 + np.arcsin(s) / np.pi
        ks = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
        assert ks < 1.95 / math.sqrt(n), f"harmonic {h + 1}: KS {ks:.3f}"
    # Different harmonics draw different phases.
    per_harmonic = {
        float(gpu.harmonic_source(f0, 1, _one_hot(h), ZERO_BIAS, seed=11, **kwargs)[0]) for h in range(1, 9)
    }
    assert len(per_harmonic) == 8
