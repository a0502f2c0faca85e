// AdaIN1d with its activation, fused: the CPU backend's
// kokoro_gpu.ops.norm.adain (the readable NumPy reference) computed row by
// row, each row read three times from cache (mean, variance, result) and
// written once.
#pragma once

#include <cstdint>

namespace kokoro::cpu {

enum class Activation { kNone, kLeakyRelu, kSnake };

// rows x length values: x and out with their row strides (in floats, unit
// inner stride); gamma, beta and (for Snake) alpha one per row.
struct AdainRows {
    const float* x = nullptr;
    int64_t x_stride = 0;
    float* out = nullptr;
    int64_t out_stride = 0;
    int64_t rows = 0;
    int64_t length = 0;
    const float* gamma = nullptr;
    const float* beta = nullptr;
    const float* alpha = nullptr;
    Activation act = Activation::kNone;
    float slope = 0.2f;
    float eps = 1e-5f;
};

// out[c, t] = act((1 + gamma[c]) (x[c, t] - mean_c) / sqrt(var_c + eps) + beta[c]),
// the biased variance, statistics accumulated in double.
void adain_rows(const AdainRows& spec);

}  // namespace kokoro::cpu
