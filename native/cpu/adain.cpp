#include "adain.h"

#include <cmath>

#include "dispatch.h"
#include "snake.h"

namespace kokoro::cpu {

namespace {

// The row's mean and biased variance (two passes: no cancellation).
KOKORO_CPU_INLINE void row_statistics(const float* x, int64_t n, double& mean, double& var) {
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < n; ++t) sum += double(x[t]);
    mean = sum / double(n);
    const double m = mean;
    double squares = 0.0;
#pragma omp simd reduction(+ : squares)
    for (int64_t t = 0; t < n; ++t) {
        const double d = double(x[t]) - m;
        squares += d * d;
    }
    var = squares / double(n);
}

KOKORO_CPU_INLINE void snake_row(const float* x, float* out, int64_t n, float mean, float scale, float beta,
               float alpha) {
    const float inv_alpha = 1.f / alpha;
    float largest = 0.f;
#pragma omp simd reduction(max : largest)
    for (int64_t t = 0; t < n; ++t) {
        const float y = (x[t] - mean) * scale + beta;
        const float v = alpha * y;
        // A select, not std::fmax: GCC keeps an fmax reduction scalar.
        largest = largest > std::fabs(v) ? largest : std::fabs(v);
        out[t] = sin_squared(v) * inv_alpha + y;
    }
    if (largest >= kSnakeReductionLimit) {  // NaN and infinity give NaN already, as in NumPy
        for (int64_t t = 0; t < n; ++t) {
            const float y = (x[t] - mean) * scale + beta;
            if (std::fabs(alpha * y) >= kSnakeReductionLimit) out[t] = snake_exact(y, alpha);
        }
    }
}

}  // namespace

KOKORO_CPU_CLONES void adain_rows(const AdainRows& spec) {
    const int64_t n = spec.length;
    for (int64_t c = 0; c < spec.rows; ++c) {
        const float* x = spec.x + c * spec.x_stride;
        float* out = spec.out + c * spec.out_stride;
        double mean = 0.0, var = 0.0;
        row_statistics(x, n, mean, var);
        const float scale = float((1.0 + double(spec.gamma[c])) / std::sqrt(var + double(spec.eps)));
        const float m = float(mean), beta = spec.beta[c];
        switch (spec.act) {
            case Activation::kSnake:
                snake_row(x, out, n, m, scale, beta, spec.alpha[c]);
                break;
            case Activation::kLeakyRelu: {
                const float slope = spec.slope;
#pragma omp simd
                for (int64_t t = 0; t < n; ++t) {
                    const float y = (x[t] - m) * scale + beta;
                    const float sloped = y * slope;
                    out[t] = y >= sloped ? y : sloped;  // NaN stays NaN, as np.maximum keeps it
                }
                break;
            }
            case Activation::kNone:
#pragma omp simd
                for (int64_t t = 0; t < n; ++t) out[t] = (x[t] - m) * scale + beta;
                break;
        }
    }
}

}  // namespace kokoro::cpu
