// The split reduction's second kernels: split_sum_kernel adds the splits'
// partial sums in a fixed order and stores y as the conv kernels do;
// split_stats_kernel writes y's statistics partials after a split walked
// inside one block. Launched by the tensor-core convs' host side
// (conv_tensor_core.cu) after the conv kernel.
// Included after igemm_tiles.cuh (its stores and statistics index), by
// native/ops/conv_tensor_core.cu only.
#pragma once

namespace kokoro::ops::igemm {
namespace {

// Channel c's statistics partial over this block's kThreads columns, v the
// value stored at the thread's column (inside: a column of y): what a split
// reduction's statistics are (the conv kernel's blocks cannot write them:
// none sees final sums).
__device__ void store_block_stats(const ConvArgs& a, int c, bool inside, float v) {
    __shared__ double scratch[kThreads / 32];
    const int n = min(int(blockDim.x), a.Tout - int(blockIdx.x * blockDim.x));
    const double sum = block_sum(inside ? double(v) : 0.0, scratch);
    const double d = inside ? double(v) - sum / n : 0.0;
    const double m2 = block_sum(d * d, scratch);
    if (threadIdx.x == 0) {
        double* s = a.stats + stats_index(a, c, int(blockIdx.x));
        s[0] = n;
        s[1] = sum;
        s[2] = m2;
    }
}

// The splits' sums: sum[p, c, q] = sum_z partial[z, p, c, q], z in order
// (fixed summation order: repeatable bits), then stored as the conv kernel
// stores; a conv1d's (no phases) with statistics also writes each block's
// partial over its kThreads columns (store_block_stats). grid.y = p Cout + c.
template <bool kPhases, bool kHalfOut = false>
__global__ void split_sum_kernel(const ConvArgs a, int splits) {
    await_producers();
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = int(blockIdx.y), p = kPhases ? row / a.Cout : 0, c = row - p * a.Cout;
    const int t = kPhases ? q * a.phases + p - a.shift : q;  // the output map
    const bool inside = q < a.Tout && t >= 0 && t < a.y_len;
    float v = 0.f;
    if (inside) {
        const int64_t i = int64_t(row) * a.Tout + q, n = int64_t(a.phases) * a.Cout * a.Tout;
        float sum = 0.f;
        for (int z = 0; z < splits; ++z) sum += a.partial[z * n + i];
        const float u = fmaf(sum, a.w_scale, a.b != nullptr ? a.b[c] : 0.f);
        const int len = a.y_len + a.y_left;  // the output map's rows
        const int64_t at = c * row_pitch(len, kHalfOut) + a.y_left + t;
        const int64_t res_at = c * row_pitch(len, a.residual_is_half) + a.y_left + t;
        v = (u + (a.residual != nullptr ? residual_at(a, res_at) : 0.f)) * a.out_scale;
        v = store_value<kHalfOut>(a.y, kHalfOut ? a.y_half : nullptr, at, v);
        if (kPhases && t == 1 && a.y_left != 0) store_pad<kHalfOut>(a, c, u);
    }
    if (kPhases || a.stats == nullptr) return;  // uniform over the block
    store_block_stats(a, c, inside, v);
}

// A conv1d's statistics partials read back from y, as split_sum_kernel
// writes them: after its split reduction ran inside the conv's blocks
// (kInBlock). grid.y = c.
template <bool kHalfOut>
__global__ void split_stats_kernel(const ConvArgs a) {
    await_producers();
    const int q = int(blockIdx.x * blockDim.x + threadIdx.x), c = int(blockIdx.y);
    const bool inside = q < a.Tout;
    const int64_t at = c * row_pitch(a.Tout, kHalfOut) + q;
    float v = 0.f;
    if (inside) v = kHalfOut ? __half2float(a.y_half[at]) : a.y[at];
    store_block_stats(a, c, inside, v);
}

}  // namespace
}  // namespace kokoro::ops::igemm
