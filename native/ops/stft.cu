// Short-time Fourier transforms of the generator (torch.stft / torch.istft
// with center=True, periodic Hann window of n_fft, hop `hop`), as direct
// DFTs (ops/stft.h says why).
//
// Forward: a thread per (bin, frame) sums the frame's reflect-padded,
// windowed samples against the bin's twiddles and writes the magnitude and
// the atan2 phase, channels-first [2 * bins, frames].
// Inverse: a block per run of output samples builds the spectra
// exp(mag_logit) * e^{i sin(phase_logit)} of the frames they need in shared
// memory (imaginary parts of the DC and Nyquist bins ignored, as a real
// inverse transform does), then each frame's windowed time samples, then
// overlap-adds, for each output sample, the frames that cover it (at most
// ceil(n_fft / hop)) divided by the overlap-added squared window, over the
// centre-trimmed range only.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kokoro/check.h"
#include "kokoro/launch.cuh"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kThreads = 256;
// Output samples per inverse block: its frames' spectra and time samples
// stay within the default shared memory for n_fft up to Stft::kMaxFft at
// hop >= 4 (checked at construction).
constexpr int kInverseSamples = 1024;

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

// The frames that output samples [first, first + count) collect: those
// covering padded positions first + n_fft / 2 ... (a block's run, or one
// sample's).
struct FrameRange {
    int lo, hi;  // inclusive
};
__device__ inline FrameRange frames_covering(int64_t first, int64_t count, int n_fft, int hop,
                                             int frames) {
    const int64_t p_lo = first + n_fft / 2, p_hi = first + count - 1 + n_fft / 2;
    const int64_t lo = p_lo >= n_fft ? (p_lo - n_fft) / hop + 1 : 0;
    const int64_t hi = p_hi / hop < frames - 1 ? p_hi / hop : frames - 1;
    return {int(lo), int(hi)};
}

// Shared floats of an inverse block: per frame `bins` real and imaginary
// parts and n_fft time samples.
size_t inverse_shared_floats(int n_fft, int hop) {
    const int bins = n_fft / 2 + 1;
    const int max_frames = kInverseSamples / hop + n_fft / hop + 2;
    return size_t(max_frames) * (2 * bins + n_fft) + 3 * size_t(n_fft);
}

// out[b, f] = |X_f(b)|, out[bins + b, f] = arg X_f(b), X_f(b) = sum_i
// window[i] x[reflect(f * hop + i - n_fft / 2)] e^{-2 pi i b i / n_fft}.
__global__ void stft_kernel(const float* x, int n, const float* tables, int n_fft, int hop,
                            int frames, float* out) {
    __shared__ float table[3 * Stft::kMaxFft];
    for (int i = threadIdx.x; i < 3 * n_fft; i += blockDim.x) table[i] = tables[i];
    __syncthreads();
    await_producers();
    const int bins = n_fft / 2 + 1;
    const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (idx >= int64_t(frames) * bins) return;
    const int b = int(idx / frames), f = int(idx % frames);
    const float* window = table;
    const float* cos_k = table + n_fft;
    const float* minus_sin_k = table + 2 * n_fft;
    float re = 0.f, im = 0.f;
    int k = 0;  // b * i mod n_fft
    for (int i = 0; i < n_fft; ++i) {
        int p = f * hop + i - n_fft / 2;
        if (p < 0) p = -p;
        if (p >= n) p = 2 * (n - 1) - p;
        const float v = x[p] * window[i];
        re = fmaf(v, cos_k[k], re);
        im = fmaf(v, minus_sin_k[k], im);
        k += b;
        if (k >= n_fft) k -= n_fft;
    }
    out[idx] = hypotf(re, im);
    out[int64_t(bins) * frames + idx] = atan2f(im, re);
}

// audio[i] for i in the block's run of kInverseSamples, i < hop * (frames -
// 1): output sample p = i + n_fft / 2 of the padded signal collects frame f's
// windowed time sample p - f * hop.
__global__ void istft_kernel(const float* logits, const float* tables, int n_fft, int hop,
                             int frames, float* audio) {
    extern __shared__ float shared[];
    const int bins = n_fft / 2 + 1;
    const int64_t total = int64_t(hop) * (frames - 1);
    const int64_t first = int64_t(blockIdx.x) * kInverseSamples;
    const int64_t count = min(int64_t(kInverseSamples), total - first);
    const FrameRange range = frames_covering(first, count, n_fft, hop, frames);
    const int n_frames = range.hi - range.lo + 1;
    float* window = shared;
    float* cos_k = window + n_fft;
    float* sin_k = cos_k + n_fft;  // -sin in the table: negated below
    float* re = sin_k + n_fft;     // [n_frames, bins]
    float* im = re + n_frames * bins;
    float* samples = im + n_frames * bins;  // [n_frames, n_fft], windowed
    for (int i = threadIdx.x; i < n_fft; i += blockDim.x) {
        window[i] = tables[i];
        cos_k[i] = tables[n_fft + i];
        sin_k[i] = -tables[2 * n_fft + i];
    }
    await_producers();
    for (int j = threadIdx.x; j < n_frames * bins; j += blockDim.x) {
        const int b = j / n_frames, f = range.lo + j % n_frames;
        const int64_t at = int64_t(b) * frames + f;
        const float magnitude = expf(logits[at]);
        const float phase = sinf(logits[int64_t(bins) * frames + at]);
        float s, c;
        sincosf(phase, &s, &c);
        const bool real_bin = b == 0 || 2 * b == n_fft;
        const int slot = (f - range.lo) * bins + b;
        re[slot] = magnitude * c;
        im[slot] = real_bin ? 0.f : magnitude * s;
    }
    __syncthreads();
    // x[t] = (X_0 + X_{n/2} (-1)^t + 2 sum_{0<b<n/2} Re(X_b e^{2 pi i b t / n})) / n.
    const float inv_n = 1.f / float(n_fft);
    for (int j = threadIdx.x; j < n_frames * n_fft; j += blockDim.x) {
        const int f = j / n_fft, t = j % n_fft;
        const float* fr = re + f * bins;
        const float* fi = im + f * bins;
        float sum = 0.f;
        int k = 0;  // b * t mod n_fft
        for (int b = 0; b < bins; ++b) {
            const float weight = (b == 0 || 2 * b == n_fft) ? 1.f : 2.f;
            sum = fmaf(weight, fr[b] * cos_k[k] - fi[b] * sin_k[k], sum);
            k += t;
            if (k >= n_fft) k -= n_fft;
        }
        samples[j] = sum * inv_n * window[t];
    }
    __syncthreads();
    for (int64_t i = first + threadIdx.x; i < first + count; i += blockDim.x) {
        const int64_t p = i + n_fft / 2;
        const FrameRange covering = frames_covering(i, 1, n_fft, hop, frames);
        float signal = 0.f, envelope = 0.f;
        for (int f = covering.lo; f <= covering.hi; ++f) {
            const int t = int(p - int64_t(f) * hop);
            signal += samples[(f - range.lo) * n_fft + t];
            envelope += window[t] * window[t];
        }
        audio[i] = signal / envelope;
    }
}

}  // namespace

Stft::Stft(int n_fft, int hop) : n_fft_(n_fft), hop_(hop) {
    if (n_fft < 2 || n_fft > kMaxFft || hop < 1 ||
        inverse_shared_floats(n_fft, hop) * sizeof(float) > kDefaultSharedBytes) {
        throw std::invalid_argument("Stft: n_fft " + std::to_string(n_fft) + " / hop " +
                                    std::to_string(hop) + " outside what the kernels take");
    }
    const double two_pi = 6.283185307179586;
    std::vector<float> tables(size_t(3) * n_fft_);
    for (int i = 0; i < n_fft_; ++i) {
        tables[size_t(i)] = float(0.5 - 0.5 * std::cos(two_pi * i / n_fft_));
        // Quarter turns exactly: cos and sin of them are 0 or +-1.
        const bool quarter = (4 * i) % n_fft_ == 0;
        const int q = quarter ? (4 * i) / n_fft_ : -1;
        const double c = quarter ? (q == 0 ? 1. : q == 2 ? -1. : 0.) : std::cos(two_pi * i / n_fft_);
        const double s = quarter ? (q == 1 ? 1. : q == 3 ? -1. : 0.) : std::sin(two_pi * i / n_fft_);
        tables[size_t(n_fft_ + i)] = float(c);
        tables[size_t(2 * n_fft_ + i)] = s == 0. ? 0.f : float(-s);
    }
    tables_ = static_cast<float*>(device_alloc(tables.size() * sizeof(float), "STFT tables"));
    KOKORO_CUDA_CHECK(cudaMemcpy(tables_, tables.data(), tables.size() * sizeof(float),
                                 cudaMemcpyHostToDevice));
    // Landed before any (non-blocking) stream reads them: a cudaMemcpy from
    // pageable memory may return before its DMA completes.
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

Stft::~Stft() { (void)cudaFree(tables_); }  // destructors cannot throw

void Stft::forward(const float* x, int n, float* out, cudaStream_t stream) const {
    if (n <= n_fft_ / 2) {
        throw std::invalid_argument("Stft::forward: signal of " + std::to_string(n) +
                                    " samples is too short to reflect-pad by " +
                                    std::to_string(n_fft_ / 2));
    }
    const int nframes = frames(n);
    const int bins = n_fft_ / 2 + 1;
    launch_dependent(stft_kernel, dim3(blocks_for(int64_t(nframes) * bins)), dim3(kThreads), 0,
                     stream, "stft_kernel", x, n, tables_, n_fft_, hop_, nframes, out);
}

void Stft::inverse_from_logits(const float* logits, int nframes, float* audio,
                               cudaStream_t stream) const {
    if (nframes < 2) return;  // hop * (frames - 1) samples: nothing to write
    const int64_t samples = int64_t(hop_) * (nframes - 1);
    launch_dependent(istft_kernel,
                     dim3(unsigned((samples + kInverseSamples - 1) / kInverseSamples)),
                     dim3(kThreads), inverse_shared_floats(n_fft_, hop_) * sizeof(float), stream,
                     "istft_kernel", logits, tables_, n_fft_, hop_, nframes, audio);
}

}  // namespace kokoro::ops
