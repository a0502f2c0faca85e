// Per-channel statistics partials: the hand-off between what produces a
// [C, T] tensor and the AdaIN that normalises it over time (norm.cu). A
// partial covers some time steps of one channel and holds, in double,
// {count, sum, sum of squared deviations about its own mean} (two passes
// within the partial: no E[x^2] - E[x]^2 cancellation; short partials are
// computed in fp32, see warp_partials); AdaIN combines a
// channel's partials in a fixed order (Chan et al.), so the result does not
// depend on who wrote them or how finely. AdaIN's own first pass writes
// them, and so does the tensor-core conv's epilogue for its output (ops/conv/),
// which spares that pass a full read of the tensor. Layout:
// ops::ChannelPartials.
#pragma once

#include <cstdint>

namespace kokoro {

// Sum over the warp's lanes, every lane gets it (a fixed shuffle tree).
template <typename T>
__device__ T warp_sum(T v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Sum over the block's threads (blockDim.x a multiple of 32), every thread
// gets it (fixed order); scratch: blockDim.x / 32 doubles of shared memory.
__device__ inline double block_sum(double v, double* scratch) {
    v = warp_sum(v);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < int(blockDim.x / 32); ++w) total += scratch[w];
    __syncthreads();
    return total;
}

// Row sums of kRows rows (a power of two, at most 32) over the warp's lanes,
// s[j] = this lane's part of row j: a reduce-scatter. Each step halves the
// rows a lane carries, keeping the half its lane bit names and adding in its
// partner's other half (one shuffle per kept row, not per row), then plain
// butterflies finish; row (lane / (32 / kRows)) ends in every lane of its
// group of 32 / kRows. Returns that row's sum.
template <int kRows>
__device__ float reduce_scatter_rows(float (&s)[kRows]) {
    static_assert(kRows >= 1 && kRows <= 32 && (kRows & (kRows - 1)) == 0, "rows: a power of two");
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int level = 0; (kRows >> level) > 1; ++level) {
        const int half = kRows >> (level + 1), off = 16 >> level;
        const bool upper = (lane & off) != 0;
#pragma unroll
        for (int j = 0; j < kRows / 2; ++j) {
            if (j >= half) break;
            const float keep = upper ? s[j + half] : s[j];
            const float give = upper ? s[j] : s[j + half];
            s[j] = keep + __shfl_xor_sync(0xffffffffu, give, off);
        }
    }
    float total = s[0];
#pragma unroll
    for (int off = 16 / kRows; off > 0; off /= 2) {
        total += __shfl_xor_sync(0xffffffffu, total, off);
    }
    return total;
}

// One warp's partials of kRows rows at once: row j's values v[j][i] at
// positions lane + 32 i, those before `end` valid; the partials of rows j <
// rows go to out + j * out_stride, each written by one lane. The rows'
// reductions share their shuffles (reduce_scatter_rows): the conv epilogue
// ends every block with this. Computed in fp32 and stored in double: a
// partial spans at most 32 kPerLane values (the conv's 128-step tiles),
// whose fp32 sum is off by ~1e-7 of their absolute sum and whose squared
// deviations about the fp32 mean are float32-accurate; the combination over
// a channel's partials stays in double.
template <int kRows, int kPerLane>
__device__ void warp_partials(const float (&v)[kRows][kPerLane], int end, double* out,
                              int64_t out_stride, int rows) {
    constexpr int kGroup = 32 / kRows;  // lanes per row after the reduce-scatter
    const int lane = threadIdx.x % 32, row = lane / kGroup;
    const int n = max(0, min(end, 32 * kPerLane));
    const float inv_n = n > 0 ? 1.f / float(n) : 0.f;
    float s[kRows];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
        s[j] = 0.f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            if (lane + 32 * i < end) s[j] += v[j][i];
        }
    }
    const float sum = reduce_scatter_rows(s);
    const float row_mean = sum * inv_n;
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
        const float mean = __shfl_sync(0xffffffffu, row_mean, j * kGroup);
        s[j] = 0.f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const float d = v[j][i] - mean;
            if (lane + 32 * i < end) s[j] = fmaf(d, d, s[j]);
        }
    }
    const float m2 = reduce_scatter_rows(s);
    if (lane % kGroup != 0 || row >= rows) return;
    double* o = out + row * out_stride;
    o[0] = n;
    o[1] = sum;
    o[2] = m2;
}

}  // namespace kokoro
