// Normalisations: layer norm over the feature axis (time-major rows or
// channels-first columns), with the plain affine and AdaLayerNorm's style
// affine folded into the same pass; and AdaIN1d (instance norm over time per
// channel + style affine) with the following activation fused in.
//
// Statistics are two-pass (mean, then the mean of squared deviations), as the
// reference computes them; no E[x^2] - E[x]^2 cancellation. Rows: one warp
// per row. Channels-first: 32 time steps per block, 8 thread rows splitting
// the channels. AdaIN: one block per channel, accumulating in double because
// generator rows are tens of thousands of samples long.
#include <cmath>

#include "kokoro/check.h"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

// (1 + style_gamma) * gamma * xhat + beta + style_beta, each term optional.
struct Affine {
    const float *gamma, *beta, *style_gamma, *style_beta;
    __device__ float operator()(float xhat, int c) const {
        float v = xhat;
        if (style_gamma != nullptr) v *= 1.f + style_gamma[c];
        if (gamma != nullptr) v *= gamma[c];
        if (beta != nullptr) v += beta[c];
        if (style_beta != nullptr) v += style_beta[c];
        return v;
    }
};

__device__ float warp_sum(float v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// One warp per row of x [rows, cols].
__global__ void layer_norm_rows_kernel(const float* x, float* y, int rows, int cols, Affine affine,
                                       float eps) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* xr = x + int64_t(row) * cols;
    float* yr = y + int64_t(row) * cols;
    float sum = 0.f;
    for (int c = lane; c < cols; c += 32) sum += xr[c];
    const float mean = warp_sum(sum) / float(cols);
    float sq = 0.f;
    for (int c = lane; c < cols; c += 32) {
        const float d = xr[c] - mean;
        sq += d * d;
    }
    const float denom = sqrtf(warp_sum(sq) / float(cols) + eps);
    for (int c = lane; c < cols; c += 32) yr[c] = affine((xr[c] - mean) / denom, c);
}

constexpr int kChannelSplit = 8;

// x [C, T] normalised over C at each t: threadIdx.x = time, threadIdx.y
// splits the channels; partial sums meet in shared memory.
__global__ void layer_norm_channels_kernel(const float* x, float* y, int C, int T, Affine affine,
                                           float eps) {
    __shared__ float partial[kChannelSplit][32];
    const int t = blockIdx.x * 32 + threadIdx.x;
    const bool live = t < T;
    auto column_sum = [&](float v) {
        partial[threadIdx.y][threadIdx.x] = v;
        __syncthreads();
        float total = 0.f;
        for (int k = 0; k < kChannelSplit; ++k) total += partial[k][threadIdx.x];
        __syncthreads();
        return total;
    };
    float sum = 0.f;
    if (live) {
        for (int c = threadIdx.y; c < C; c += kChannelSplit) sum += x[int64_t(c) * T + t];
    }
    const float mean = column_sum(sum) / float(C);
    float sq = 0.f;
    if (live) {
        for (int c = threadIdx.y; c < C; c += kChannelSplit) {
            const float d = x[int64_t(c) * T + t] - mean;
            sq += d * d;
        }
    }
    const float denom = sqrtf(column_sum(sq) / float(C) + eps);
    if (!live) return;
    for (int c = threadIdx.y; c < C; c += kChannelSplit) {
        const int64_t i = int64_t(c) * T + t;
        y[i] = affine((x[i] - mean) / denom, c);
    }
}

constexpr int kAdainThreads = 256;

__device__ double block_sum(double v, double* scratch) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < int(blockDim.x / 32); ++w) total += scratch[w];
    __syncthreads();
    return total;
}

// One block per channel of x [C, T].
__global__ void adain_kernel(const float* x, float* y, int C, int T, const float* style,
                             Activation act, float act_slope, const float* alpha) {
    __shared__ double scratch[kAdainThreads / 32];
    const int c = blockIdx.x;
    const float* xr = x + int64_t(c) * T;
    float* yr = y + int64_t(c) * T;
    double sum = 0.0;
    for (int t = threadIdx.x; t < T; t += blockDim.x) sum += xr[t];
    const float mean = float(block_sum(sum, scratch) / T);
    double sq = 0.0;
    for (int t = threadIdx.x; t < T; t += blockDim.x) {
        const float d = xr[t] - mean;
        sq += double(d) * d;
    }
    const float denom = sqrtf(float(block_sum(sq, scratch) / T) + 1e-5f);
    const float scale = 1.f + style[c], shift = style[C + c];
    const float a = act == Activation::kSnake ? alpha[c] : 1.f;
    const float inv_a = 1.f / a;
    for (int t = threadIdx.x; t < T; t += blockDim.x) {
        float v = scale * ((xr[t] - mean) / denom) + shift;
        if (act == Activation::kLeakyRelu) {
            v = v >= 0.f ? v : v * act_slope;
        } else if (act == Activation::kSnake) {
            const float s = sinf(a * v);
            v = v + inv_a * (s * s);
        }
        yr[t] = v;
    }
}

}  // namespace

void layer_norm_rows(const float* x, float* y, int rows, int cols, const float* gamma,
                     const float* beta, const float* style_gamma, const float* style_beta,
                     float eps, cudaStream_t stream) {
    if (rows == 0) return;
    const int threads = 256, rows_per_block = threads / 32;
    layer_norm_rows_kernel<<<unsigned((rows + rows_per_block - 1) / rows_per_block), threads, 0,
                             stream>>>(x, y, rows, cols,
                                       Affine{gamma, beta, style_gamma, style_beta}, eps);
    KOKORO_CHECK_LAUNCH("layer_norm_rows_kernel");
}

void layer_norm_channels(const float* x, float* y, int C, int T, const float* gamma,
                         const float* beta, const float* style_gamma, const float* style_beta,
                         float eps, cudaStream_t stream) {
    if (T == 0) return;
    layer_norm_channels_kernel<<<unsigned((T + 31) / 32), dim3(32, kChannelSplit), 0, stream>>>(
        x, y, C, T, Affine{gamma, beta, style_gamma, style_beta}, eps);
    KOKORO_CHECK_LAUNCH("layer_norm_channels_kernel");
}

void adain(const float* x, float* y, int C, int T, const float* style, Activation act,
           float act_slope, const float* alpha, cudaStream_t stream) {
    if (C == 0) return;
    adain_kernel<<<unsigned(C), kAdainThreads, 0, stream>>>(x, y, C, T, style, act, act_slope,
                                                             alpha);
    KOKORO_CHECK_LAUNCH("adain_kernel");
}

}  // namespace kokoro::ops
