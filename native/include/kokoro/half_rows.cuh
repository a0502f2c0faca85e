// FP16 time-major rows: the operand layout of the tensor-core convolution
// (the tensor-core convs, precision "fast"). A channels-first fp32 tensor x [C, T] becomes
// y [T, ld] in FP16 with ld = ops::half_rows_pitch(C) (a multiple of 8, so every
// row starts 16-byte aligned) and columns C..ld-1 zero. Time-major because a
// convolution tap then shifts whole rows: every tap's operand stays 16-byte
// aligned for ldmatrix whatever the dilation.
//
// One block (kHalfRowsThreads threads) writes a 64-channel x 64-step tile,
// laid out for few instructions per value (~10; ncu had a warp per channel
// row, ~20, issue-bound): each thread keeps one channel pair and 8 time steps
// (lanes along time, 32-byte runs per fp32 row: whole sectors), so the
// transform's per-channel state is loaded once per thread and each value
// costs its load, its transform, half a convert and half a shared store; the
// tile goes through shared memory as half2 words (channel pair cp of step t
// at word t * 32 + (cp ^ 4 (t % 8)): conflict-free both ways), and leaves as
// 16-byte rows of 8 channels. x[c pitch + t] gives the input (a pointer, or
// anything indexable: SumSource, HalfSource; pitch: source_pitch);
// channel(r) gives the transform of the tile's channel r, a callable float
// -> float (identity for a plain conversion, AdaIN + activation in
// norm.cu). Split operands
// (ops::HalfOperands::kSplit) also write lo = fp16(v - hi) to y_lo (null:
// rounded only). Grid: half_rows_grid(C, T).
#pragma once

#include <cuda_fp16.h>

#include "kokoro/ops.h"
#include "kokoro/split_half.h"

namespace kokoro {

constexpr int kHalfRowsTileC = 64;
constexpr int kHalfRowsTileT = 64;
constexpr int kHalfRowsThreads = 256;

inline dim3 half_rows_grid(int C, int T) {
    return dim3(unsigned((T + kHalfRowsTileT - 1) / kHalfRowsTileT),
                unsigned((ops::half_rows_pitch(C) + kHalfRowsTileC - 1) / kHalfRowsTileC));
}

// FP16 values as a write_half_rows source (ops::ConstFloatOrHalf's f16),
// rows at ops::half_channels_pitch(T).
struct HalfSource {
    const __half* p;
    __device__ float operator[](int64_t i) const { return __half2float(p[i]); }
};
// An ops::ScaledSum of fp32 or FP16 (H = __half) terms as a write_half_rows
// source: ((x0 + x1) + x2) * scale in fp32.
template <typename H>
struct SumSource {
    const H* x0;
    const H* x1;  // null: none
    const H* x2;  // null: none
    float scale;
    __device__ float operator[](int64_t i) const {
        float v = float(x0[i]);
        if (x1 != nullptr) v += float(x1[i]);
        if (x2 != nullptr) v += float(x2[i]);
        return v * scale;
    }
};
// The row pitch of a source of T steps per channel: T, or an FP16 tensor's.
template <typename Source>
__device__ int source_pitch(const Source&, int T) {
    return T;
}
__device__ inline int source_pitch(const HalfSource&, int T) {
    return ops::half_channels_pitch(T);
}
__device__ inline int source_pitch(const SumSource<__half>&, int T) {
    return ops::half_channels_pitch(T);
}

// The same on two values at once (the half-rows pass's half2 stores).
__device__ inline void split_half(float2 v, __half2& hi, __half2& lo) {
    hi = __float22half2_rn(v);
    const float2 h = __half22float2(hi);
    lo = __float22half2_rn(make_float2(v.x - h.x, v.y - h.y));
}

template <typename Source, typename Channel>
__device__ void write_half_rows(const Source& x, __half* y, __half* y_lo, int C, int T,
                                Channel channel) {
    constexpr int kPairs = kHalfRowsTileC / 2;                  // half2 words per tile row
    constexpr int kSteps = kHalfRowsTileT * kPairs / kHalfRowsThreads;  // per thread
    constexpr int kLanesT = kHalfRowsTileT / kSteps;             // lanes along time per pair
    // Step t's words are swizzled by (t % kLanesT) kSwizzle: a warp's stores
    // (kLanesT steps of 32 / kLanesT pairs) hit 32 banks, and the 16-byte
    // pieces (4 words) stay whole.
    constexpr int kSwizzle = 32 / kLanesT;
    static_assert(kPairs == 32 && kLanesT <= 8 && kSwizzle * kLanesT == 32, "the swizzle");
    constexpr int kChunks = kHalfRowsTileT * kPairs / 4 / kHalfRowsThreads;  // 16-byte pieces
    __shared__ __half2 tile[2][kHalfRowsTileT][kPairs];  // hi, lo
    const int ld = ops::half_rows_pitch(C);
    const int c0 = blockIdx.y * kHalfRowsTileC, t0 = blockIdx.x * kHalfRowsTileT;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int pair = warp * (32 / kLanesT) + lane / kLanesT, tl = lane % kLanesT;
    const int c = c0 + 2 * pair;
    // Row c's steps t0 + tl + kLanesT i at at + kLanesT i (row c + 1: + pitch).
    const int64_t pitch = source_pitch(x, T), at = int64_t(c) * pitch + t0 + tl;
    const bool inside = c0 + kHalfRowsTileC <= C && t0 + kHalfRowsTileT <= T;
    float v[2][kSteps];
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
        const bool t_in = inside || t0 + tl + kLanesT * i < T;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            v[e][i] = t_in && (inside || c + e < C) ? x[at + e * pitch + kLanesT * i] : 0.f;
        }
    }
    const auto f0 = channel(2 * pair), f1 = channel(2 * pair + 1);
    const int word = pair ^ (tl * kSwizzle);  // step tl + kLanesT i
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
        const bool t_in = inside || t0 + tl + kLanesT * i < T;
        const float2 u = make_float2(t_in && (inside || c < C) ? f0(v[0][i]) : 0.f,
                                     t_in && (inside || c + 1 < C) ? f1(v[1][i]) : 0.f);
        __half2 hi, lo;
        split_half(u, hi, lo);
        tile[0][tl + kLanesT * i][word] = hi;
        if (y_lo != nullptr) tile[1][tl + kLanesT * i][word] = lo;
    }
    __syncthreads();
    // Piece q (channels c0 + 8 q ..) of step r: words 4 q .. 4 q + 3 of the
    // row, moved whole by the swizzle.
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
        const int id = int(threadIdx.x) + kHalfRowsThreads * j, r = id / 8, q = id % 8;
        if (inside || (t0 + r < T && c0 + 8 * q < ld)) {
            const int64_t y_at = int64_t(t0 + r) * ld + c0 + 8 * q;
            const int from = (4 * q) ^ (r % kLanesT * kSwizzle);
            *reinterpret_cast<uint4*>(y + y_at) =
                *reinterpret_cast<const uint4*>(&tile[0][r][from]);
            if (y_lo != nullptr) {
                *reinterpret_cast<uint4*>(y_lo + y_at) =
                    *reinterpret_cast<const uint4*>(&tile[1][r][from]);
            }
        }
    }
}

}  // namespace kokoro
