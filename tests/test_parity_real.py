"""Parity with the official kokoro 0.9.4 on real weights (fixtures: scripts/make_golden.py --real).

Each fixture in tests/golden_real holds the official model's float64 run (the
truth) and its float32 run's own errors, made on kokoro-onnx's int8 Kokoro
(``kokoro_gpu.real_model``) unfolded into the official checkpoint layout, for
natural English read with a real voice (durations of 2 - 3 frames a phoneme,
long pauses, real STFT-phase inputs to the generator). Every backend and
precision must give the truth's durations. In fp32, everything before the
generator must match tightly, and the audio must be about as close to the
truth as the official float32 run: the relative L2 error of all cases' audio
taken together within OFFICIAL_FACTOR of the official one. (Case by case the
ratio is noise: real phase inputs make each float32 run's waveform error a
matter of where near-zero STFT bins happen to round, 0.1 - 2x the official
error for equally correct runs.) The log-mel distance to the truth, which a
listener's ear follows, must stay within MAX_LOG_MEL_DB for every case and
precision, fast included.
"""

from __future__ import annotations

import functools
import os

import pytest
from real_weights import real_model_or_skip
from script_modules import load_script

from kokoro_gpu.errors import BackendError
from kokoro_gpu.ops import bf16

pytestmark = pytest.mark.real

parity = load_script("parity_table")
FIXTURES = parity.fixture_paths(parity.GOLDEN_REAL_DIR)

# ||ours - truth|| / ||truth|| allowed for the intermediates before the generator (fp32).
PRE_GENERATOR_TOL = {"cpu": 1e-5, "cuda": 1e-4}
# The audio of all cases together: at most this multiple of the official float32 run's error.
OFFICIAL_FACTOR = 1.5
# Mean |dB| difference of log-mel spectrograms (parity_table.log_mel_distance), every precision.
MAX_LOG_MEL_DB = 1.0
MAX_GOLDEN_BYTES = 3 * 2**20
# The CPU's fast precision needs bf16 GEMMs (oneMKL and a CPU with BF16 instructions).
NEEDS_BF16 = pytest.mark.skipif(bf16.unavailable_reason() is not None,
                                reason=f"CPU fast precision unavailable: {bf16.unavailable_reason()}")
RUNS = [
    pytest.param("cpu", "fp32", id="cpu-fp32"),
    pytest.param("cpu", "fast", id="cpu-fast", marks=NEEDS_BF16),
    pytest.param("cuda", "fp32", id="cuda-fp32", marks=pytest.mark.gpu),
    pytest.param("cuda", "fast", id="cuda-fast", marks=pytest.mark.gpu),
]


def test_fixtures_present_and_small() -> None:
    assert FIXTURES, "no real-weights fixtures; run scripts/make_golden.py --real"
    assert sum(p.stat().st_size for p in FIXTURES) < MAX_GOLDEN_BYTES
    fixtures = [parity.Fixture.load(p) for p in FIXTURES]
    assert all(f.real and not f.zero_phase_inputs for f in fixtures)
    assert {f.speed for f in fixtures} >= {0.8, 1.0}
    assert {f.voice for f in fixtures} == {"jf_alpha", "jm_kumo"}
    for f in fixtures:
        assert len(f.input_ids) == len(f.phonemes) + 2 and f.input_ids[0] == f.input_ids[-1] == 0
        assert {"audio", "logmel", *parity.PRE_GENERATOR} <= set(f.official_f32_err)
        # Natural durations: 2 - 3 frames a phoneme on average, not a random model's constant.
        assert 1.5 <= f.pred_dur[1:-1].mean() * f.speed <= 5 and f.pred_dur.max() >= 10


@functools.cache
def _results(device: str, precision: str) -> tuple[parity.CaseResult, ...]:
    """Every fixture on one backend (the real model loaded once per device and precision)."""
    if not os.environ.get(parity.REAL_MODEL_ENV):
        real_model_or_skip()
    try:
        return tuple(parity.compare_fixture(p, device, precision) for p in FIXTURES)
    except BackendError as e:
        pytest.skip(f"{device} backend unavailable: {e}")


@pytest.mark.parametrize(("device", "precision"), RUNS)
def test_durations_identical(device: str, precision: str) -> None:
    differ = [r.name for r in _results(device, precision) if not r.durations_equal]
    assert not differ, f"durations differ from the official float64 run on {device} ({precision}): {differ}"


@pytest.mark.parametrize(("device", "precision"), RUNS)
def test_log_mel_distance(device: str, precision: str) -> None:
    results = [r for r in _results(device, precision) if r.durations_equal]
    far = [f"{r.name}: {r.errors['logmel']:.2f} dB (official float32 {r.official['logmel']:.2f} dB)"
           for r in results if not r.errors["logmel"] <= MAX_LOG_MEL_DB]
    assert not far, f"log-mel distance to the truth above {MAX_LOG_MEL_DB} dB:\n" + "\n".join(far)


@pytest.mark.parametrize(("device", "precision"), [p for p in RUNS if p.values[1] == "fp32"])
def test_fp32_parity(device: str, precision: str) -> None:
    results = _results(device, precision)
    assert all(r.durations_equal for r in results), "durations differ; see test_durations_identical"
    failures = []
    for r in results:
        assert not r.missing, f"{r.name}: the {device} trace lacks {r.missing}"
        for key in parity.PRE_GENERATOR:
            err, limit = r.errors[key], PRE_GENERATOR_TOL[device]
            if not err <= limit:
                failures.append(f"{r.name} {key}: {err:.3e} > {limit:.0e} "
                                f"(official float32: {r.official[key]:.3e})")
    ours = parity.pooled_audio_error(list(results))
    official = parity.pooled_audio_error(list(results), official=True)
    if not ours <= OFFICIAL_FACTOR * official:
        failures.append(f"audio of all cases: {ours:.3e} > {OFFICIAL_FACTOR} x official float32 "
                        f"{official:.3e}")
    assert not failures, f"real weights on {device} ({precision}):\n" + "\n".join(failures)
