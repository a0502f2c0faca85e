// Host-side conv weight relayouts, done once at upload: the ops' layout
// (kernel axis in the middle), the tensor-core convs' FP16 half rows (rounded
// or split, scaled by a power of two), the transposed convs' tap-major rows
// and the strided convs' polyphase rows. Host code only: no kernel here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kokoro/ops.h"
#include "kokoro/split_half.h"

#include "conv/polyphase.h"

namespace kokoro::ops {

void conv_weight_to_device_layout(const float* src, float* dst, int64_t A, int B, int K) {
    for (int64_t a = 0; a < A; ++a) {
        const float* s = src + a * B * K;
        float* d = dst + a * B * K;
        for (int k = 0; k < K; ++k) {
            for (int i = 0; i < B; ++i) d[int64_t(k) * B + i] = s[int64_t(i) * K + k];
        }
    }
}

float conv_weight_to_half_rows(const float* src, __half* dst, int64_t A, int K, int B,
                               HalfOperands form) {
    return weight_rows_to_half(src, dst, A * K, B, half_rows_pitch(B), form);
}

float weight_rows_to_half(const float* src, __half* dst, int64_t rows, int cols, int pitch,
                          HalfOperands form) {
    float most = 0.f;
    for (int64_t i = 0; i < rows * cols; ++i) most = std::max(most, std::fabs(src[i]));
    int exponent = 0;  // most = f * 2^exponent, f in [0.5, 1)
    std::frexp(most, &exponent);
    const float up = most > 0.f ? std::ldexp(1.f, std::clamp(14 - exponent, -100, 100)) : 1.f;
    __half* lo = form == HalfOperands::kSplit ? dst + rows * pitch : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
        for (int i = 0; i < pitch; ++i) {
            const float v = i < cols ? src[r * cols + i] * up : 0.f;  // exact: a power of two
            __half hi, rest;
            split_half(v, hi, rest);
            dst[r * pitch + i] = hi;
            if (lo != nullptr) lo[r * pitch + i] = rest;
        }
    }
    return 1.f / up;  // exact: a power of two
}

float conv_transpose_weight_to_half_rows(const float* src, __half* dst, int Cin, int K, int Cout,
                                         HalfOperands form) {
    std::vector<float> tap_major(size_t(K) * Cout * Cin);
    for (int64_t ci = 0; ci < Cin; ++ci) {
        for (int64_t k = 0; k < K; ++k) {
            for (int64_t co = 0; co < Cout; ++co) {
                tap_major[size_t((k * Cout + co) * Cin + ci)] = src[(ci * K + k) * Cout + co];
            }
        }
    }
    return conv_weight_to_half_rows(tap_major.data(), dst, int64_t(K) * Cout, 1, Cin, form);
}

int64_t conv_weight_polyphase_halves(int Cout, int K, int Cin, int stride, int pad) {
    return int64_t(Cout) * Polyphase(K, stride, pad).taps * stride * half_rows_pitch(Cin);
}

float conv_weight_to_polyphase_half_rows(const float* src, __half* dst, int Cout, int K, int Cin,
                                         int stride, int pad) {
    const Polyphase poly(K, stride, pad);
    const int ld = half_rows_pitch(Cin), width = stride * ld;
    std::vector<float> rows(size_t(conv_weight_polyphase_halves(Cout, K, Cin, stride, pad)), 0.f);
    for (int64_t co = 0; co < Cout; ++co) {
        for (int k = 0; k < K; ++k) {
            const int m = Polyphase::floor_div(k - pad, stride), p = k - pad - m * stride;
            float* const to = rows.data() + (co * poly.taps + m + poly.pad) * width + p * ld;
            std::copy_n(src + (co * K + k) * Cin, Cin, to);
        }
    }
    return conv_weight_to_half_rows(rows.data(), dst, Cout, poly.taps, width,
                                    HalfOperands::kRounded);
}

}  // namespace kokoro::ops
