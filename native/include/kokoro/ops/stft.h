// Ops of native/ops/stft.cu: the STFT and the inverse STFT from the generator's logits.
// Conventions: kokoro/ops.h.
// (The family headers include each other in the order the families build on
// one another: each holds the types the later ones use.)
#pragma once

#include "kokoro/ops/attention.h"

namespace kokoro::ops {

// ------------------------------------------------------------------ stft.cu
// The generator's short-time Fourier transforms (torch.stft / torch.istft
// with center=True, periodic Hann window of n_fft, hop `hop`), as direct
// DFTs: n_fft is 20, where a transform is 11 bins of 20 products, so one
// kernel per direction does the whole transform at any length, without
// per-length FFT plans or scratch. Immutable once built (the window and the
// twiddles on the device), so one object serves every lane and graph.
class Stft {
public:
    // The largest n_fft the kernels take (their twiddles and a block's
    // frames live in shared memory).
    static constexpr int kMaxFft = 64;
    Stft(int n_fft, int hop);
    ~Stft();
    Stft(const Stft&) = delete;
    Stft& operator=(const Stft&) = delete;
    int frames(int n) const { return n / hop_ + 1; }
    // Magnitude and phase of x [n], n > n_fft / 2 (reflect padding): out
    // [2 * (n_fft/2 + 1), frames(n)], magnitudes, then atan2 phases.
    void forward(const float* x, int n, float* out, cudaStream_t stream) const;
    // Spectral head + inverse: logits [2 * (n_fft/2 + 1), frames] ->
    // spec = exp(logits[:bins]), phase = sin(logits[bins:]), complex spectrum
    // spec * e^{i phase}, inverse DFT, window, overlap-add, divided by the
    // window-square envelope, centre trimmed: audio [hop * (frames - 1)].
    void inverse_from_logits(const float* logits, int frames, float* audio,
                             cudaStream_t stream) const;

private:
    int n_fft_, hop_;
    // Device tables: window [n_fft], then cos and -sin of 2 pi k / n_fft
    // [n_fft] each (exact zeros where the sine is 0, so that the DC and
    // Nyquist bins' imaginary parts are +0, as a real FFT gives them).
    float* tables_ = nullptr;
};

}  // namespace kokoro::ops
