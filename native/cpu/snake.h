// sin(v)^2 for the Snake activation, in a form the compiler vectorises:
// v = j pi/2 + r with |r| <= pi/4 (Cody-Waite, pi/2 in three parts), then
// sin(r)^2 for even j and cos(r)^2 for odd j (the square drops the sign of
// either), each from Cephes's single-precision minimax polynomials. About
// an ulp for |v| < kSnakeReductionLimit; beyond it j pi/2 loses bits, and the
// caller recomputes those values in double (they do not occur in practice).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kokoro::cpu {

constexpr float kSnakeReductionLimit = 8192.f;

[[gnu::always_inline]] inline float sin_squared(float v) {
    // Round v 2 / pi to the nearest integer j by adding 1.5 2^23 (exact while
    // |v 2 / pi| < 2^22): j's parity is then the sum's lowest mantissa bit.
    // No branch or rounding call, so the loop vectorises.
    constexpr float kRound = 12582912.f;
    const float shifted = v * 0.636619772367581343f + kRound;
    uint32_t bits;
    std::memcpy(&bits, &shifted, sizeof bits);
    const float odd = float(bits & 1u);
    const float j = shifted - kRound;
    // j pi/2 in parts with few enough bits that each product is exact.
    const float r = ((v - j * 1.5703125f) - j * 4.837512969970703125e-4f) - j * 7.54978995489188216e-8f;
    const float r2 = r * r;
    const float s = r + r * r2 * ((r2 * -1.9515295891e-4f + 8.3321608736e-3f) * r2 - 1.6666654611e-1f);
    const float c = 1.f - 0.5f * r2 +
                    r2 * r2 * ((r2 * 2.443315711809948e-5f - 1.388731625493765e-3f) * r2 +
                               4.166664568298827e-2f);
    const float s2 = s * s;
    return s2 + odd * (c * c - s2);
}

// Snake, x + sin(alpha x)^2 / alpha, in double: the reference for large arguments.
inline float snake_exact(float x, float alpha) {
    const double s = std::sin(double(alpha) * double(x));
    return float(double(x) + s * s / double(alpha));
}

}  // namespace kokoro::cpu
