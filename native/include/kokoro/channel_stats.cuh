// Per-channel statistics partials: the hand-off between what produces a
// [C, T] tensor and the AdaIN that normalises it over time (norm.cu). A
// partial covers some time steps of one channel and holds, in double,
// {count, sum, sum of squared deviations about its own mean} (two passes
// within the partial: no E[x^2] - E[x]^2 cancellation; short partials are
// computed in fp32, see warp_partials); AdaIN combines a
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

// One warp's partials of kRows rows at once: row j's values v[j][i] at
// positions lane + 32 i, those before `end` valid; lane 0 writes row j's
// partial to dest(j) (null: none). The rows' shuffle reductions interleave,
// so they cost about one reduction's latency, not kRows of them (the conv
// epilogue ends every block with this). Computed in fp32 and stored in
// double: a partial spans at most 32 kPerLane values (the conv's 128-step
// tiles), whose fp32 sum is off by ~1e-7 of their absolute sum and whose
// squared deviations about the fp32 mean are float32-accurate; the
// combination over a channel's partials stays in double.
template <int kRows, int kPerLane, class Dest>
__device__ void warp_partials(const float (&v)[kRows][kPerLane], int end, Dest dest) {
    const int lane = threadIdx.x % 32;
    const int n = max(0, min(end, 32 * kPerLane));
    float sum[kRows], m2[kRows];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
        sum[j] = 0.f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            if (lane + 32 * i < end) sum[j] += v[j][i];
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
#pragma unroll
        for (int j = 0; j < kRows; ++j) sum[j] += __shfl_xor_sync(0xffffffffu, sum[j], off);
    }
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
        const float mean = n > 0 ? sum[j] / float(n) : 0.f;
        m2[j] = 0.f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const float d = v[j][i] - mean;
            if (lane + 32 * i < end) m2[j] = fmaf(d, d, m2[j]);
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
#pragma unroll
        for (int j = 0; j < kRows; ++j) m2[j] += __shfl_xor_sync(0xffffffffu, m2[j], off);
    }
    if (lane != 0) return;
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
        double* out = dest(j);
        if (out == nullptr) continue;
        out[0] = n;
        out[1] = sum[j];
        out[2] = m2[j];
    }
}

}  // namespace kokoro
