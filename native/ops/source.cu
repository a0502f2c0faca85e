// The generator's harmonic-plus-noise source (SineGen + l_linear + tanh).
//
// Harmonic k (1-based) advances rad = (k f0 / sr) mod 1 cycles per sample
// over the nearest-upsampled f0; as in the official SineGen the phase is
// integrated at the frame rate: rad is linearly resampled by 1 / upp
// (frame_rad_kernel, which also adds the random initial phase at sample 0),
// cumulatively summed (scan_kernel: one block per harmonic, an in-place
// double-precision block scan with a running carry), and read back x upp by
// linear interpolation in source_kernel, which also takes the sine, gates it
// by the voiced mask, adds gaussian noise and applies l_linear + tanh, one
// thread per output sample. The phase path is double throughout: it reaches
// thousands of radians before sin.
//
// Randomness is Philox4x32-10 keyed by the seed, counter = (what, index), so
// every value is a pure function of (seed, harmonic, sample): initial phases
// uniform [0, 1) (53-bit), noise standard normal (Box-Muller on 53-bit
// uniforms). `deterministic` zeroes both, as the CPU model's rng=None does.
// The seed is read from device memory (a graph replay may bring a new one).
#include <cmath>

#include "kokoro/block_scan.cuh"
#include "kokoro/check.h"
#include "kokoro/launch.cuh"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kScanThreads = 1024;
constexpr uint32_t kStreamPhase = 0, kStreamNoise = 1;

struct Philox4 {
    uint32_t v[4];
};

__device__ Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                 uint64_t seed) {
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round) {
        const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return Philox4{{c0, c1, c2, c3}};
}

// 53-bit uniform in [0, 1) from two words.
__device__ double uniform53(uint32_t hi, uint32_t lo) {
    return double((uint64_t(hi) << 21) | (lo >> 11)) * 0x1p-53;
}

// Initial phase of 0-based harmonic h (harmonic 0 has none).
__device__ double initial_phase(int h, uint64_t seed) {
    if (h == 0) return 0.0;
    const Philox4 r = philox4x32_10(uint32_t(h), 0, 0, kStreamPhase, seed);
    return uniform53(r.v[0], r.v[1]);
}

__device__ double standard_normal(int64_t sample, int h, uint64_t seed) {
    const Philox4 r =
        philox4x32_10(uint32_t(sample), uint32_t(uint64_t(sample) >> 32), uint32_t(h), kStreamNoise, seed);
    const double u1 = 1.0 - uniform53(r.v[0], r.v[1]);  // (0, 1]
    const double u2 = uniform53(r.v[2], r.v[3]);
    return sqrt(-2.0 * log(u1)) * cospi(2.0 * u2);
}

// rad of 0-based harmonic h at sample i (Python's float mod: result in [0, 1)).
__device__ double sample_rad(const float* f0, int upp, int h, int64_t i, double sample_rate) {
    const double x = double(h + 1) * double(f0[i / upp]) / sample_rate;
    double m = fmod(x, 1.0);
    if (m < 0.0) m += 1.0;
    return m;
}

// frame_rad[h, j] = rad resampled at scale 1 / upp, position (j + 0.5) * upp - 0.5.
__global__ void frame_rad_kernel(const float* f0, int Tf, int upp, int n_harm, double sample_rate,
                                 bool deterministic, const uint64_t* seed, double* frame_rad) {
    await_producers();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int h = blockIdx.y;
    if (j >= Tf) return;
    const int64_t n = int64_t(Tf) * upp;
    const double src = fmax((j + 0.5) / (1.0 / upp) - 0.5, 0.0);
    const int64_t i0 = min(int64_t(src), n - 1), i1 = min(i0 + 1, n - 1);
    const double w1 = src - double(i0);
    const double phase0 = deterministic ? 0.0 : initial_phase(h, *seed);
    const double r0 = sample_rad(f0, upp, h, i0, sample_rate) + (i0 == 0 ? phase0 : 0.0);
    const double r1 = sample_rad(f0, upp, h, i1, sample_rate) + (i1 == 0 ? phase0 : 0.0);
    frame_rad[int64_t(h) * Tf + j] = r0 * (1.0 - w1) + r1 * w1;
}

// In-place inclusive scan of each row of data [rows, n]; one block per row.
__global__ void scan_kernel(double* data, int n) {
    await_producers();
    __shared__ double warp_sums[kScanThreads / 32];
    __shared__ double carry;
    double* row = data + int64_t(blockIdx.x) * n;
    if (threadIdx.x == 0) carry = 0.0;
    __syncthreads();
    for (int base = 0; base < n; base += blockDim.x) {
        const int i = base + threadIdx.x;
        const double total = block_inclusive_scan(i < n ? row[i] : 0.0, warp_sums, &carry);
        if (i < n) row[i] = total;
    }
}

struct SourceParams {
    int Tf, upp, n_harm;
    float sine_amp, noise_std, voiced_threshold;
    bool deterministic;
    const uint64_t* seed;  // device; read only when !deterministic
};

// out[i] = tanh(sum_h lin_w[h] * wave_h[i] + lin_b), one thread per sample.
__global__ void source_kernel(const float* f0, const double* cum_rad, const float* lin_w,
                              const float* lin_b, SourceParams p, float* out) {
    await_producers();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    const int64_t n = int64_t(p.Tf) * p.upp;
    if (i >= n) return;
    const double src = fmax((double(i) + 0.5) / double(p.upp) - 0.5, 0.0);
    const int i0 = min(int(src), p.Tf - 1), i1 = min(i0 + 1, p.Tf - 1);
    const double w1 = src - double(i0);
    const double phase_scale = 2.0 * 3.141592653589793 * p.upp;
    const bool voiced = double(f0[i / p.upp]) > double(p.voiced_threshold);
    const double noise_amp = voiced ? double(p.noise_std) : double(p.sine_amp) / 3.0;
    const uint64_t seed = p.deterministic ? 0 : *p.seed;
    float merged = 0.f;
    for (int h = 0; h < p.n_harm; ++h) {
        const double* row = cum_rad + int64_t(h) * p.Tf;
        const double phase =
            (row[i0] * phase_scale) * (1.0 - w1) + (row[i1] * phase_scale) * w1;
        float wave = voiced ? float(sin(phase) * double(p.sine_amp)) : 0.f;
        if (!p.deterministic) wave += float(noise_amp * standard_normal(i, h, seed));
        merged += lin_w[h] * wave;
    }
    out[i] = tanhf(merged + lin_b[0]);
}

}  // namespace

int64_t harmonic_source_scratch_doubles(int Tf, int /*upp*/, int n_harm) {
    return int64_t(Tf) * n_harm;
}

void harmonic_source(const float* f0, int Tf, int upp, int n_harm, int sample_rate,
                     float sine_amp, float noise_std, float voiced_threshold,
                     const float* lin_w, const float* lin_b, bool deterministic, const uint64_t* seed,
                     float* out, double* scratch, cudaStream_t stream) {
    if (Tf == 0 || upp == 0 || n_harm == 0) return;
    const dim3 frame_grid(unsigned((Tf + kThreads - 1) / kThreads), unsigned(n_harm));
    launch_dependent(frame_rad_kernel, frame_grid, dim3(kThreads), 0, stream, "frame_rad_kernel",
                     f0, Tf, upp, n_harm, double(sample_rate), deterministic, seed, scratch);
    launch_dependent(scan_kernel, dim3(unsigned(n_harm)), dim3(kScanThreads), 0, stream,
                     "scan_kernel", scratch, Tf);
    const int64_t n = int64_t(Tf) * upp;
    const SourceParams params{Tf, upp, n_harm, sine_amp, noise_std, voiced_threshold,
                              deterministic, seed};
    launch_dependent(source_kernel, dim3(unsigned((n + kThreads - 1) / kThreads)), dim3(kThreads),
                     0, stream, "source_kernel", f0, scratch, lin_w, lin_b, params, out);
}

}  // namespace kokoro::ops
