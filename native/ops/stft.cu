// Short-time Fourier transforms of the generator (torch.stft / torch.istft
// with center=True, periodic Hann window of n_fft, hop `hop`).
//
// Forward: one kernel cuts the reflect-padded signal into windowed frames
// [frames, n_fft], one batched cuFFT R2C transforms them, one kernel writes
// magnitude and atan2 phase channels-first [2 * bins, frames].
// Inverse: one kernel builds spectrum exp(mag_logit) * e^{i sin(phase_logit)}
// per frame (imaginary parts of the DC and Nyquist bins zeroed, as a real
// inverse FFT ignores them), one batched cuFFT C2R, and one gather kernel
// that overlap-adds the windowed frames for each output sample (at most
// ceil(n_fft / hop) of them) and divides by the overlap-added squared
// window, over the centre-trimmed range only. Plans and scratch are kept for
// the last frame count and remade when it changes.
#include <algorithm>
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

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

// frames[f, i] = window[i] * x[reflect(f * hop + i - n_fft / 2)].
__global__ void frame_window_kernel(const float* x, int n, const float* window, int n_fft, int hop,
                                    int frames, float* out) {
    await_producers();
    const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (idx >= int64_t(frames) * n_fft) return;
    const int f = int(idx / n_fft), i = int(idx % n_fft);
    int p = f * hop + i - n_fft / 2;
    if (p < 0) p = -p;
    if (p >= n) p = 2 * (n - 1) - p;
    out[idx] = x[p] * window[i];
}

// spectrum [frames, bins] -> out [2 * bins, frames]: magnitudes, then phases.
__global__ void magnitude_phase_kernel(const cufftComplex* spectrum, int bins, int frames,
                                       float* out) {
    await_producers();
    const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (idx >= int64_t(frames) * bins) return;
    const int b = int(idx / frames), f = int(idx % frames);
    const cufftComplex z = spectrum[int64_t(f) * bins + b];
    out[idx] = hypotf(z.x, z.y);
    out[int64_t(bins) * frames + idx] = atan2f(z.y, z.x);
}

// logits [2 * bins, frames] -> spectrum [frames, bins]: a block's
// `per_block` frames through shared memory, so that both the reads (along
// frames, per bin) and the writes (the block's frames x bins, one
// contiguous run) coalesce; a thread per (frame, bin) writing straight to
// the frame-major spectrum scattered its stores over every sector.
__global__ void spectrum_from_logits_kernel(const float* logits, int bins, int frames, int n_fft,
                                            int per_block, cufftComplex* spectrum) {
    await_producers();
    extern __shared__ cufftComplex tile[];  // [per_block, bins]
    const int f0 = blockIdx.x * per_block, n = min(per_block, frames - f0);
    for (int b = 0; b < bins; ++b) {
        const bool real_bin = b == 0 || 2 * b == n_fft;
        for (int j = threadIdx.x; j < n; j += blockDim.x) {
            const int64_t at = int64_t(b) * frames + f0 + j;
            const float magnitude = expf(logits[at]);
            const float phase = sinf(logits[int64_t(bins) * frames + at]);
            float s, c;
            sincosf(phase, &s, &c);
            tile[j * bins + b] =
                make_cuFloatComplex(magnitude * c, real_bin ? 0.f : magnitude * s);
        }
    }
    __syncthreads();
    cufftComplex* out = spectrum + int64_t(f0) * bins;
    for (int i = threadIdx.x; i < n * bins; i += blockDim.x) out[i] = tile[i];
}

// audio[i] for i < hop * (frames - 1): output sample p = i + n_fft / 2 of the
// padded signal collects frame f's sample p - f * hop.
__global__ void overlap_add_kernel(const float* frames_td, const float* window, int n_fft, int hop,
                                   int frames, float* audio) {
    await_producers();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i >= int64_t(hop) * (frames - 1)) return;
    const int64_t p = i + n_fft / 2;
    const int64_t f_first = p >= n_fft ? (p - n_fft) / hop + 1 : 0;
    const int64_t f_last = min(p / hop, int64_t(frames) - 1);
    const float inv_n = 1.f / float(n_fft);
    float signal = 0.f, envelope = 0.f;
    for (int64_t f = f_first; f <= f_last; ++f) {
        const int j = int(p - f * hop);
        const float w = window[j];
        signal += frames_td[f * n_fft + j] * inv_n * w;
        envelope += w * w;
    }
    audio[i] = signal / envelope;
}

}  // namespace

Stft::Stft(int n_fft, int hop) : n_fft_(n_fft), hop_(hop) {
    if (n_fft < 2 || hop < 1) {
        throw std::invalid_argument("Stft: bad n_fft " + std::to_string(n_fft) + " / hop " +
                                    std::to_string(hop));
    }
    const double two_pi = 6.283185307179586;
    std::vector<float> window(static_cast<size_t>(n_fft_));
    for (int i = 0; i < n_fft_; ++i) {
        window[size_t(i)] = float(0.5 - 0.5 * std::cos(two_pi * i / n_fft_));
    }
    window_ = static_cast<float*>(device_alloc(window.size() * sizeof(float), "STFT window"));
    KOKORO_CUDA_CHECK(cudaMemcpy(window_, window.data(), window.size() * sizeof(float),
                                 cudaMemcpyHostToDevice));
}

// Destructors cannot throw: release statuses are deliberately ignored.
Stft::~Stft() {
    for (const auto& [frames, plans] : plans_) {
        (void)cufftDestroy(plans.forward);
        (void)cufftDestroy(plans.inverse);
    }
    (void)cudaFree(frames_buf_);
    (void)cudaFree(spectrum_buf_);
    (void)cudaFree(window_);
}

void Stft::destroy_plans() {
    for (const auto& [frames, plans] : plans_) {
        KOKORO_CUFFT_CHECK(cufftDestroy(plans.forward));
        KOKORO_CUFFT_CHECK(cufftDestroy(plans.inverse));
    }
    plans_.clear();
}

void Stft::wait_for_streams() const {
    for (cudaStream_t stream : streams_) KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void Stft::note_stream(cudaStream_t stream) {
    if (std::find(streams_.begin(), streams_.end(), stream) == streams_.end()) {
        streams_.push_back(stream);
    }
}

void Stft::reserve(int frames) {
    const int bins = n_fft_ / 2 + 1;
    if (frames > capacity_frames_) {
        wait_for_streams();  // queued work may read the old scratch
        KOKORO_CUDA_CHECK(cudaFree(frames_buf_));
        KOKORO_CUDA_CHECK(cudaFree(spectrum_buf_));
        frames_buf_ = nullptr;
        spectrum_buf_ = nullptr;
        capacity_frames_ = 0;
        frames_buf_ = static_cast<float*>(
            device_alloc(size_t(frames) * n_fft_ * sizeof(float), "STFT frames"));
        spectrum_buf_ = static_cast<cufftComplex*>(
            device_alloc(size_t(frames) * bins * sizeof(cufftComplex), "STFT spectrum"));
        capacity_frames_ = frames;
    }
    if (plans_.count(frames) != 0) return;
    if (plans_.size() == kMaxPlans) {
        wait_for_streams();  // queued work may use a plan
        destroy_plans();
    }
    Plans made;
    int n = n_fft_;
    KOKORO_CUFFT_CHECK(cufftPlanMany(&made.forward, 1, &n, nullptr, 1, n_fft_, nullptr, 1, bins,
                                     CUFFT_R2C, frames));
    const cufftResult inverse = cufftPlanMany(&made.inverse, 1, &n, nullptr, 1, bins, nullptr, 1,
                                              n_fft_, CUFFT_C2R, frames);
    if (inverse != CUFFT_SUCCESS) (void)cufftDestroy(made.forward);
    KOKORO_CUFFT_CHECK(inverse);
    plans_[frames] = made;
}

void Stft::forward(const float* x, int n, float* out, cudaStream_t stream) {
    if (n <= n_fft_ / 2) {
        throw std::invalid_argument("Stft::forward: signal of " + std::to_string(n) +
                                    " samples is too short to reflect-pad by " +
                                    std::to_string(n_fft_ / 2));
    }
    const int nframes = frames(n);
    const int bins = n_fft_ / 2 + 1;
    reserve(nframes);
    note_stream(stream);
    const cufftHandle plan = plans_.at(nframes).forward;
    launch_dependent(frame_window_kernel, dim3(blocks_for(int64_t(nframes) * n_fft_)),
                     dim3(kThreads), 0, stream, "frame_window_kernel", x, n, window_, n_fft_, hop_,
                     nframes, frames_buf_);
    KOKORO_CUFFT_CHECK(cufftSetStream(plan, stream));
    KOKORO_CUFFT_CHECK(cufftExecR2C(plan, frames_buf_, spectrum_buf_));
    launch_dependent(magnitude_phase_kernel, dim3(blocks_for(int64_t(nframes) * bins)),
                     dim3(kThreads), 0, stream, "magnitude_phase_kernel", spectrum_buf_, bins,
                     nframes, out);
}

void Stft::inverse_from_logits(const float* logits, int nframes, float* audio,
                               cudaStream_t stream) {
    if (nframes < 2) return;  // hop * (frames - 1) samples: nothing to write
    const int bins = n_fft_ / 2 + 1;
    reserve(nframes);
    note_stream(stream);
    const cufftHandle plan = plans_.at(nframes).inverse;
    // kThreads frames a block, fewer where their bins outgrow the default
    // shared memory.
    const int per_block =
        std::max(1, std::min(kThreads, int(kDefaultSharedBytes / sizeof(cufftComplex)) / bins));
    launch_dependent(spectrum_from_logits_kernel,
                     dim3(unsigned((nframes + per_block - 1) / per_block)), dim3(kThreads),
                     sizeof(cufftComplex) * size_t(per_block) * bins, stream,
                     "spectrum_from_logits_kernel", logits, bins, nframes, n_fft_, per_block,
                     spectrum_buf_);
    KOKORO_CUFFT_CHECK(cufftSetStream(plan, stream));
    KOKORO_CUFFT_CHECK(cufftExecC2R(plan, spectrum_buf_, frames_buf_));
    launch_dependent(overlap_add_kernel, dim3(blocks_for(int64_t(hop_) * (nframes - 1))),
                     dim3(kThreads), 0, stream, "overlap_add_kernel", frames_buf_, window_, n_fft_,
                     hop_, nframes, audio);
}

}  // namespace kokoro::ops
