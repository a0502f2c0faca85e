// FP16 time-major rows: the operand layout of the tensor-core convolution
// (conv.cu, precision "fast"). A channels-first fp32 tensor x [C, T] becomes
// y [T, ld] in FP16 with ld = ops::half_rows_pitch(C) (a multiple of 8, so every
// row starts 16-byte aligned) and columns C..ld-1 zero. Time-major because a
// convolution tap then shifts whole rows: every tap's operand stays 16-byte
// aligned for ldmatrix whatever the dilation.
//
// One block (kHalfRowsThreads threads) transposes 64-channel x 32-step tiles
// through shared memory, so that the reads (along t) and the writes (half2
// along c) both coalesce; fn(c_local, v) transforms each value on its way
// (identity for a plain conversion, AdaIN + activation in norm.cu). A block
// takes kHalfRowsTilesPerBlock consecutive time tiles, so that per-block set-up
// (norm.cu's per-channel parameters) is paid once per 128 steps. Grid:
// half_rows_grid(C, T).
#pragma once

#include <cuda_fp16.h>

#include "kokoro/ops.h"

namespace kokoro {

constexpr int kHalfRowsTileC = 64;
constexpr int kHalfRowsTileT = 32;
constexpr int kHalfRowsTilesPerBlock = 4;
constexpr int kHalfRowsThreads = 256;

inline dim3 half_rows_grid(int C, int T) {
    constexpr int kSteps = kHalfRowsTileT * kHalfRowsTilesPerBlock;
    return dim3(unsigned((T + kSteps - 1) / kSteps),
                unsigned((ops::half_rows_pitch(C) + kHalfRowsTileC - 1) / kHalfRowsTileC));
}

template <typename Fn>
__device__ void write_half_rows(const float* x, __half* y, int C, int T, Fn fn) {
    __shared__ float tile[kHalfRowsTileC][kHalfRowsTileT + 1];
    const int ld = ops::half_rows_pitch(C);
    const int c0 = blockIdx.y * kHalfRowsTileC;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    constexpr int kWarps = kHalfRowsThreads / 32;
    for (int i = 0; i < kHalfRowsTilesPerBlock; ++i) {
        const int t0 = (blockIdx.x * kHalfRowsTilesPerBlock + i) * kHalfRowsTileT;
        if (t0 >= T) break;
        for (int r = warp; r < kHalfRowsTileC; r += kWarps) {
            const int c = c0 + r, t = t0 + lane;
            tile[r][lane] = c < C && t < T ? fn(r, x[int64_t(c) * T + t]) : 0.f;
        }
        __syncthreads();
        for (int r = warp; r < kHalfRowsTileT; r += kWarps) {
            const int t = t0 + r, c = c0 + 2 * lane;
            if (t < T && c < ld) {
                *reinterpret_cast<__half2*>(y + int64_t(t) * ld + c) =
                    __floats2half2_rn(tile[2 * lane][r], tile[2 * lane + 1][r]);
            }
        }
        __syncthreads();  // before the next tile overwrites `tile`
    }
}

}  // namespace kokoro
