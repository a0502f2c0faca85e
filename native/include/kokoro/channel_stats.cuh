// Per-channel statistics partials: the hand-off between what produces a
// [C, T] tensor and the AdaIN that normalises it over time (norm.cu). A
// partial covers some time steps of one channel and holds, in double,
// {count, sum, sum of squared deviations about its own mean} (two passes
// within the partial: no E[x^2] - E[x]^2 cancellation); AdaIN combines a
// channel's partials in a fixed order (Chan et al.), so the result does not
// depend on who wrote them or how finely. AdaIN's own first pass writes
// them, and so does the tensor-core conv's epilogue for its output (conv.cu),
// which spares that pass a full read of the tensor. Layout:
// ops::ChannelPartials.
#pragma once

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

// One warp's partial over values v[i] at positions lane + 32 i, those in
// [first, end) valid (none: a partial of count 0); lane 0 writes it to out.
template <int kPerLane>
__device__ void warp_partial(const float (&v)[kPerLane], int first, int end, double* out) {
    const int lane = threadIdx.x % 32;
    const int n = max(0, min(end, 32 * kPerLane) - max(first, 0));
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int p = lane + 32 * i;
        if (p >= first && p < end) sum += double(v[i]);
    }
    sum = warp_sum(sum);
    const double mean = sum / n;  // unused for n = 0
    double m2 = 0.0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int p = lane + 32 * i;
        const double d = double(v[i]) - mean;
        if (p >= first && p < end) m2 += d * d;
    }
    m2 = warp_sum(m2);
    if (lane == 0) {
        out[0] = n;
        out[1] = sum;
        out[2] = m2;
    }
}

}  // namespace kokoro
