// Block-wide inclusive prefix sum over a sequence longer than the block,
// processed blockDim.x elements at a time with a running carry: warp scans by
// shuffles, a scan of the per-warp totals by warp 0, then the carry of the
// earlier chunks. The summation order is fixed, so results are bit-for-bit
// repeatable. Used by the duration-to-frame index (int) and the sine source's
// phase accumulation (double).
#pragma once

namespace kokoro {

// Returns carry + the inclusive prefix of `v` over the threads of this chunk,
// and advances *carry by the chunk's total. Every thread of the block calls it
// once per chunk (threads past the end pass 0); blockDim.x is a multiple of 32.
// `warp_sums` (blockDim.x / 32 entries) and `carry` live in shared memory;
// *carry starts at 0, set by the caller before the first chunk and a barrier.
template <typename T>
__device__ T block_inclusive_scan(T v, T* warp_sums, T* carry) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int nwarps = blockDim.x / 32;
    for (int off = 1; off < 32; off *= 2) {
        const T u = __shfl_up_sync(0xffffffffu, v, off);
        if (lane >= off) v += u;
    }
    if (lane == 31) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        T w = lane < nwarps ? warp_sums[lane] : T(0);
        for (int off = 1; off < 32; off *= 2) {
            const T u = __shfl_up_sync(0xffffffffu, w, off);
            if (lane >= off) w += u;
        }
        if (lane < nwarps) warp_sums[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    const T total = *carry + (warp > 0 ? warp_sums[warp - 1] : T(0)) + v;
    __syncthreads();  // every thread has read carry and warp_sums
    if (threadIdx.x == blockDim.x - 1) *carry = total;
    __syncthreads();
    return total;
}

}  // namespace kokoro
