// Ops of native/ops/stft.cu: the STFT and the inverse STFT from the generator's logits.
// Conventions: kokoro/ops.h.
// (The family headers include each other in the order the families build on
// one another: each holds the types the later ones use.)
#pragma once

#include <map>
#include <vector>

#include "kokoro/ops/attention.h"

namespace kokoro::ops {

// ------------------------------------------------------------------ stft.cu
// Forward STFT of a signal (n_fft 20, hop 5, periodic Hann, centred with
// reflect padding) as magnitude and phase: x [N] -> out [2 * (n_fft/2 + 1), frames]
// (magnitudes first, then atan2 phases), frames = N / hop + 1. Batched cuFFT.
class Stft {
public:
    Stft(int n_fft, int hop);
    ~Stft();
    Stft(const Stft&) = delete;
    Stft& operator=(const Stft&) = delete;
    int frames(int n) const { return n / hop_ + 1; }
    // Makes the plans and scratch for `frames` frames now (forward and
    // inverse call it too), so that a graph capture that follows finds them.
    // A plan per frame count is kept (up to kMaxPlans) and the scratch only
    // grows, so that a call for a length already planned neither waits nor
    // frees: work queued on its streams may still use them. Growing the
    // scratch, or dropping the plans when there are kMaxPlans, first waits
    // for the streams this object's work went to (not the device: another
    // lane's thread may be capturing a graph).
    void reserve(int frames);
    // Forward: magnitude and phase of x [n], n > n_fft / 2 (reflect padding).
    void forward(const float* x, int n, float* out, cudaStream_t stream);
    // Spectral head + inverse: logits [2 * (n_fft/2 + 1), frames] ->
    // spec = exp(logits[:bins]), phase = sin(logits[bins:]), complex spectrum
    // spec * e^{i phase}, inverse FFT, window, overlap-add, divided by the
    // window-square envelope, centre trimmed: audio [hop * (frames - 1)].
    void inverse_from_logits(const float* logits, int frames, float* audio, cudaStream_t stream);

private:
    static constexpr size_t kMaxPlans = 64;
    struct Plans {
        cufftHandle forward = 0, inverse = 0;
    };
    void destroy_plans();
    void wait_for_streams() const;
    void note_stream(cudaStream_t stream);
    int n_fft_, hop_, capacity_frames_ = 0;
    std::vector<cudaStream_t> streams_;    // that forward / inverse enqueued work on
    std::map<int, Plans> plans_;           // by frame count
    float* window_ = nullptr;              // device [n_fft]
    float* frames_buf_ = nullptr;          // device [capacity_frames_, n_fft]
    cufftComplex* spectrum_buf_ = nullptr; // device [capacity_frames_, n_fft/2 + 1]
};

}  // namespace kokoro::ops
