// exp, the logistic function and tanh in forms the compiler vectorises:
// Cephes's single-precision polynomials (about an ulp), with selects instead
// of branches.
#pragma once

#include <cstdint>
#include <cstring>

namespace kokoro::cpu {

// e^v: v = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts), a degree-6
// polynomial in r, scaled by 2^n through the exponent bits. Inputs are
// clamped to [-87.3, 88.7], so the result is finite and not subnormal.
[[gnu::always_inline]] inline float exp_poly(float v) {
    v = v < -87.3f ? -87.3f : v;
    v = v > 88.7f ? 88.7f : v;
    constexpr float kRound = 12582912.f;  // 1.5 2^23: adding it rounds to an integer
    const float shifted = v * 1.44269504088896341f + kRound;
    const float n = shifted - kRound;
    const float r = (v - n * 0.693359375f) + n * 2.12194440e-4f;
    const float r2 = r * r;
    const float p = ((((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
                        4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f) * r2) +
                    r + 1.f;
    // 2^n for n in [-126, 128): split in two factors, so that 2^128 is not needed.
    const int32_t k = int32_t(n);
    const int32_t half = k / 2;
    const uint32_t a = uint32_t(half + 127) << 23, b = uint32_t(k - half + 127) << 23;
    float sa, sb;
    std::memcpy(&sa, &a, sizeof sa);
    std::memcpy(&sb, &b, sizeof sb);
    return p * sa * sb;
}

// 1 / (1 + e^-v), from e^-|v| (no overflow), as kokoro_gpu.ops.elementwise.sigmoid.
[[gnu::always_inline]] inline float sigmoid_poly(float v) {
    const float e = exp_poly(v < 0.f ? v : -v);
    return (v >= 0.f ? 1.f : e) / (1.f + e);
}

// tanh: an odd polynomial below 0.625, 1 - 2 / (e^{2|v|} + 1) above, the sign restored.
[[gnu::always_inline]] inline float tanh_poly(float v) {
    const float a = v < 0.f ? -v : v;
    const float s = v * v;
    const float small = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s +
                          1.33314422036e-1f) * s - 3.33332819422e-1f) * s * v + v;
    const float large = 1.f - 2.f / (exp_poly(a + a) + 1.f);
    return a < 0.625f ? small : (v < 0.f ? -large : large);
}

}  // namespace kokoro::cpu
