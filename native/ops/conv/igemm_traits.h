// The implicit-GEMM tensor-core conv's tile sizes and its kernels' argument
// block (ConvArgs). Host-compilable (the CUDA headers, no device code): the
// planner (igemm_plan.h, and its host test), the dispatch
// (igemm_launch.cuh) and the kernels (igemm_tiles.cuh on) share these, and
// ConvArgs crosses the translation units of the dispatch's explicit
// instantiations (conv_igemm_*.cu), hence a named namespace.
#pragma once

#include <cstdint>

#include "kokoro/ops.h"

namespace kokoro::ops::igemm {

constexpr int kBK = 64;            // reduction channels per chunk
constexpr int kPieces = kBK / 8;   // 16-byte pieces per chunk row
constexpr int kPitch = kBK + 8;    // halves per padded shared row: 144 bytes, ldmatrix conflict-free
constexpr int kStages = 3;         // weight tiles in flight
constexpr int kCoutTile = 128;     // output channels per block
// ... or, on the wgmma kernel, for convs of few output channels (conv_post:
// 22), whose 128-row tile spent ~6x the needed MMAs.
constexpr int kNarrowCoutTile = 32;

// The arguments of both kernels: for each of `phases` output phases, the
// GEMM sum[c, q] = sum_{k, ci} w_p[c, k, ci] x[q + k * dil - pad, ci] over
// Cout channels and Tout columns, then y = w_scale * sum (+ b) (+ residual)
// (a conv1d's times out_scale) through the output map below; x: half rows
// [Tin, ld], w: FP16, a conv1d's [Cout, K, ld], a transposed conv's [K
// phases, Cout, ld] (phase
// p, channel c, tap k at row ((K - 1 - k) phases + p) Cout + c: see
// transposed_call); residual may equal y. Split operands: x_lo and w_lo
// hold the lo parts (null when rounded). grid (time tiles, channel tiles
// (BlockRows), splits): split z sums reduction chunks [z *
// chunks_per_split, (z + 1) * chunks_per_split); with more than one split
// each writes its sum to partial[z] ([phases, Cout, Tout]) and
// split_sum_kernel finishes. stats (one split only): y's statistics
// partials, one per time tile (+ one for the reflection pad's element).
// The output map: column q of phase p is y's time step t = q * phases + p -
// shift, kept where 0 <= t < y_len, at y[c, y_left + t] (rows of y_left +
// y_len); y_left 1 also stores t = 1 at y[c, 0] (the reflection pad (1,
// 0)). A conv1d has phases 1, shift 0, y_len Tout, y_left 0; a polyphase
// transposed conv one phase per stride step. The kernels with kHalfOut
// store y as FP16 (y_half): the rounded values are y, and its statistics
// are theirs. A conv1d's residual may be FP16 (residual_is_half). FP16 rows
// of y_left + y_len values are half_channels_pitch(y_left + y_len) apart
// (ops.h; row_pitch).
// (128 bytes, no 64-bit fields: a larger parameter block cost the wgmma
// kernels ~50 bytes of spills.)
struct ConvArgs {
    const __half* x;
    const __half* x_lo;
    const __half* w;
    const __half* w_lo;
    const float* b;
    union {
        const float* residual;
        const __half* residual_half;  // residual_is_half
    };
    union {
        float* y;
        __half* y_half;  // the kHalfOut kernels' y: FP16, channels-first
    };
    float* partial;  // null: one split
    double* stats;   // null: none
    float w_scale;
    float out_scale;  // y = (w_scale * sum + b + residual) * out_scale
    int ld, Cout, Tin, Tout, K, pad, dilation, chunks_per_split;
    int phases, shift, y_len;
    short y_left;
    bool residual_is_half;
};
static_assert(sizeof(ConvArgs) == 128, "the kernels' parameter block");

// Reduction chunks: 64 channels of one product of operand parts each; split
// operands take three per 64 channels.
__host__ __device__ inline int reduction_chunks(int ld, bool split) {
    return (split ? 3 : 1) * ((ld + kBK - 1) / kBK);
}

}  // namespace kokoro::ops::igemm
