// Ops of native/ops/source.cu: the harmonic-plus-noise source. Conventions: kokoro/ops.h.
// (The family headers include each other in the order the families build on
// one another: each holds the types the later ones use.)
#pragma once

#include "kokoro/ops/stft.h"

namespace kokoro::ops {

// ---------------------------------------------------------------- source.cu
// The harmonic-plus-noise source (SineGen + l_linear + tanh) from the frame
// F0 curve: f0 [Tf] (already the decoder's 2F-rate curve) upsampled x `upp`
// (nearest) to n = Tf * upp samples; harmonics k = 1..n_harm; phases
// integrated at the frame rate as the official SineGen does (rad resampled by
// 1 / upp, a parallel scan in double precision, resampled back x upp); voiced
// where f0 > voiced_threshold; gaussian noise of std noise_std (voiced) or
// sine_amp / 3 (unvoiced). Initial phases of harmonics 2..n_harm (uniform
// [0, 1)) and the noise come from Philox4x32-10 keyed by `*seed` (device
// memory, so that a captured graph takes a new seed per replay), a pure
// function of (seed, harmonic, sample); both are zero when `deterministic`
// (and `seed` is then not read).
// lin_w [n_harm], lin_b [1]; out [n] = tanh(lin_w . harmonics + lin_b).
// `scratch` holds harmonic_source_scratch_doubles(...) doubles.
void harmonic_source(const float* f0, int Tf, int upp, int n_harm, int sample_rate,
                     float sine_amp, float noise_std, float voiced_threshold,
                     const float* lin_w, const float* lin_b, bool deterministic, const uint64_t* seed,
                     float* out, double* scratch, cudaStream_t stream);
int64_t harmonic_source_scratch_doubles(int Tf, int upp, int n_harm);

}  // namespace kokoro::ops
