// FP16 time-major rows: the operand layout of the tensor-core convolution
// (conv.cu, precision "fast"). A channels-first fp32 tensor x [C, T] becomes
// y [T, ld] in FP16 with ld = ops::half_rows_pitch(C) (a multiple of 8, so every
// row starts 16-byte aligned) and columns C..ld-1 zero. Time-major because a
// convolution tap then shifts whole rows: every tap's operand stays 16-byte
// aligned for ldmatrix whatever the dilation.
//
// One block (kHalfRowsThreads threads) transposes a 64-channel x 32-step tile
// through shared memory, so that the reads (along t) and the writes (half2
// along c) both coalesce; x[c T + t] gives the input (a pointer, or anything
// indexable: ops::ScaledSum); fn(c_local, v) transforms each value on its way
// (identity for a plain conversion, AdaIN + activation in norm.cu). The
// loops are unrolled so that each warp has all its loads in flight at once
// (the kernel is bound by memory latency otherwise). Split operands
// (ops::HalfOperands::kSplit) also write lo = fp16(v - hi) to y_lo (null:
// rounded only). Grid: half_rows_grid(C, T).
#pragma once

#include <cuda_fp16.h>

#include "kokoro/ops.h"

namespace kokoro {

constexpr int kHalfRowsTileC = 64;
constexpr int kHalfRowsTileT = 32;
constexpr int kHalfRowsThreads = 256;

inline dim3 half_rows_grid(int C, int T) {
    return dim3(unsigned((T + kHalfRowsTileT - 1) / kHalfRowsTileT),
                unsigned((ops::half_rows_pitch(C) + kHalfRowsTileC - 1) / kHalfRowsTileC));
}

// v as split FP16 operands (ops::HalfOperands::kSplit): hi = fp16(v), lo =
// fp16(v - hi). Host too: the weights are split at upload.
__host__ __device__ inline void split_half(float v, __half& hi, __half& lo) {
    hi = __float2half_rn(v);
    lo = __float2half_rn(v - __half2float(hi));
}
// The same on two values at once (the half-rows pass's half2 stores).
__device__ inline void split_half(float2 v, __half2& hi, __half2& lo) {
    hi = __float22half2_rn(v);
    const float2 h = __half22float2(hi);
    lo = __float22half2_rn(make_float2(v.x - h.x, v.y - h.y));
}

template <typename Source, typename Fn>
__device__ void write_half_rows(const Source& x, __half* y, __half* y_lo, int C, int T, Fn fn) {
    constexpr int kWarps = kHalfRowsThreads / 32;
    __shared__ float tile[kHalfRowsTileC][kHalfRowsTileT + 1];
    const int ld = ops::half_rows_pitch(C);
    const int c0 = blockIdx.y * kHalfRowsTileC, t0 = blockIdx.x * kHalfRowsTileT;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int t = t0 + lane;
    // The pass is issue-bound: offsets step by whole row strides from one
    // 64-bit base each way, and a tile inside x (every tile but the edges)
    // tests no bounds.
    const bool inside = c0 + kHalfRowsTileC <= C && t0 + kHalfRowsTileT <= T;
    const int64_t x_step = int64_t(kWarps) * T;
    int64_t x_at = int64_t(c0 + warp) * T + t;
    float v[kHalfRowsTileC / kWarps];
#pragma unroll
    for (int i = 0; i < kHalfRowsTileC / kWarps; ++i, x_at += x_step) {
        const int c = c0 + warp + i * kWarps;
        v[i] = inside || (c < C && t < T) ? x[x_at] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < kHalfRowsTileC / kWarps; ++i) {
        const int r = warp + i * kWarps;
        tile[r][lane] = inside || (c0 + r < C && t < T) ? fn(r, v[i]) : 0.f;
    }
    __syncthreads();
    const int c = c0 + 2 * lane;
    const int64_t y_step = int64_t(kWarps) * ld;
    int64_t y_at = int64_t(t0 + warp) * ld + c;
#pragma unroll
    for (int i = 0; i < kHalfRowsTileT / kWarps; ++i, y_at += y_step) {
        const int tt = t0 + warp + i * kWarps;
        if ((inside || tt < T) && c < ld) {
            const float2 v =
                make_float2(tile[2 * lane][warp + i * kWarps], tile[2 * lane + 1][warp + i * kWarps]);
            __half2 hi, lo;
            split_half(v, hi, lo);
            *reinterpret_cast<__half2*>(y + y_at) = hi;
            if (y_lo != nullptr) *reinterpret_cast<__half2*>(y_lo + y_at) = lo;
        }
    }
}

}  // namespace kokoro
