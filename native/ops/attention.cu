// Bidirectional multi-head attention core (ALBERT), plain fp32: two batched
// SGEMMs on cuBLAS around one softmax pass, the [heads, T, T] scores held in
// `scratch`. ALBERT runs this on the duration path, which must stay
// float32-accurate, so there is no TF32 or rounded FP16 here. The previous
// design, a hand-written SIMT flash kernel that never stored the scores,
// took about 290 us per call at T = 502 (12 heads of 64) on an H200; cuBLAS's
// fp32 GEMMs run far closer to the fp32 peak, and at T <= 512 the score
// matrix (12 MB at 12 heads) is cheap to write and read back through L2.
//
// Head h of q, k, v is the column slice h*D .. h*D+D-1 of a [T, >= heads*D]
// row-major matrix with row pitch ld_qkv: a [T, D] matrix with that pitch,
// heads D floats apart, which is exactly a strided batch (stride D) for
// matmul_batched. The pitch lets q, k, v be the three column blocks of one
// fused projection [T, 3 * heads*D] (ALBERT's single QKV GEMM). Head h of
// out is the same slice of [T, heads*D] (pitch heads*D).
//  1. S_h = Q_h K_h^T (raw dot products), S_h [T, T] with row pitch P
//     (T rounded up to 4 floats, so every row and every head starts 16-byte
//     aligned for cuBLAS's vector loads), heads T * P floats apart.
//  2. Per row: s / sqrt(D) (the reference's division, not a multiply by the
//     reciprocal), keys >= valid_len get HF's additive mask -FLT_MAX, then
//     exp(s - max) / sum, in place. One warp per row, held in its registers
//     (T <= kMaxKeys, ALBERT's position table: one read and one write per
//     score; three sweeps over memory took twice as long).
//  3. O_h = P_h V_h, written straight into out's column slice.
// Precision "fast" runs the same steps on the tensor cores for long inputs
// (attention_split_half; ALBERT's choice by length: albert.cu), as it runs
// ALBERT's linears: split FP16 operands, three products per 16-wide slice,
// fp32 sums per 64-wide chunk (matmul_split_half_batched), so float32-level
// accuracy without the SIMT SGEMMs, whose time grows with T^2.
//  0. split_qkv_kernel: Q_h and K_h as split operands [2, T, Dp] (Dp =
//     split_pitch(D), zero past D), V_h transposed [2, D, Tp] (Tp =
//     split_pitch(T), zero past T), from the QKV projection's split sums
//     plus its bias (its sum kernel folded in).
//  1. S_h = Q_h K_h^T into the fp32 scores.
//  2. The softmax above, each probability written as P_h's split operand
//     [2, T, Tp] times 2^12 (exact: small probabilities' low parts stay
//     clear of FP16's subnormals), zero past T.
//  3. O_h = P_h V_h, scaled back by 2^-12, into out's column slice.
#include <cfloat>
#include <cmath>
#include <string>

#include <cuda_fp16.h>

#include "kokoro/check.h"
#include "kokoro/half_rows.cuh"
#include "kokoro/launch.cuh"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kWarps = 8;       // rows per block of the softmax
constexpr int kMaxKeys = 512;   // a softmax row in registers: 16 per lane
constexpr float kProbScale = 4096.f;  // 2^12: the split probabilities' scale

// Row pitch of the score matrix.
int score_pitch(int T) { return round_up(T, 4); }

// Scaled, masked score of key j.
__device__ __forceinline__ float masked_score(float s, int j, int valid_len, float scale_div) {
    s = s / scale_div;
    if (j >= valid_len) s += -FLT_MAX;
    return s;
}

// Over `rows` rows of T <= 32 kPerLane scores at row pitch `pitch`: raw dot
// products in, attention probabilities out, in place, or (kSplit) as the
// split operand p_split of P V: row h T + t of the scores is row t of head
// h's [2, T, p_pitch] parts, times kProbScale (p_pitch <= 32 kPerLane).
// Lane l holds keys l + 32 i.
template <int kPerLane, bool kSplit>
__global__ void masked_softmax_rows_kernel(float* scores, __half* p_split, int rows, int T,
                                           int pitch, int p_pitch, int valid_len,
                                           float scale_div) {
    await_producers();
    release_dependents();
    const int row = blockIdx.x * kWarps + threadIdx.x / 32;
    if (row >= rows) return;  // whole warps leave together
    const int lane = threadIdx.x % 32;
    float* r = scores + int64_t(row) * pitch;
    float s[kPerLane];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int j = lane + 32 * i;
        s[i] = j < T ? masked_score(r[j], j, valid_len, scale_div) : -INFINITY;
        m = fmaxf(m, s[i]);
    }
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        s[i] = lane + 32 * i < T ? expf(s[i] - m) : 0.f;
        sum += s[i];
    }
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if constexpr (kSplit) {
        __half* hi = p_split + (int64_t(row / T) * 2 * T + row % T) * p_pitch;
        __half* lo = hi + int64_t(T) * p_pitch;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int j = lane + 32 * i;
            if (j < p_pitch) split_half(j < T ? s[i] / sum * kProbScale : 0.f, hi[j], lo[j]);
        }
    } else {
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            if (lane + 32 * i < T) r[lane + 32 * i] = s[i] / sum;
        }
    }
}

// The softmax for T keys: the smallest row held in registers.
template <bool kSplit>
auto masked_softmax_kernel(int T) {
    return T <= 128   ? masked_softmax_rows_kernel<4, kSplit>
           : T <= 256 ? masked_softmax_rows_kernel<8, kSplit>
                      : masked_softmax_rows_kernel<kMaxKeys / 32, kSplit>;
}

// p_split null: in place.
void masked_softmax_rows(float* scores, __half* p_split, int rows, int T, int pitch, int p_pitch,
                         int valid_len, float scale_div, cudaStream_t stream) {
    const dim3 grid(unsigned((rows + kWarps - 1) / kWarps)), block(kWarps * 32);
    launch_dependent(p_split != nullptr ? masked_softmax_kernel<true>(T)
                                        : masked_softmax_kernel<false>(T),
                     grid, block, 0, stream, "masked_softmax_rows_kernel", scores, p_split, rows,
                     T, pitch, p_pitch, valid_len, scale_div);
}

// Step 0 of attention_split_half. The first qk_blocks blocks: thread i <
// 2 heads T Dp writes element i of q's and k's split operands ([2 (q, k),
// heads, 2 (hi, lo), T, Dp]). The rest: v's transposed ones ([heads, 2, D,
// Tp]) by kTransposeTile-square tiles of [t, column] through shared memory,
// so that both the reads (along columns) and the writes (along t) are
// coalesced; the tiles cover t < Tp, the padding written as zeros.
constexpr int kTransposeTile = 32;
constexpr int kSplitQkvThreads = 256;

__global__ void split_qkv_kernel(SplitSums qkv, const float* bias, __half* qk, __half* vt,
                                 int T, int heads, int D, int Dp, int Tp, int qk_blocks) {
    await_producers();
    release_dependents();
    const int width = heads * D;
    const auto value = [&](int t, int column) {
        float v = qkv[int64_t(t) * 3 * width + column];
        if (bias != nullptr) v += bias[column];
        return v;
    };
    if (int(blockIdx.x) < qk_blocks) {
        const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
        if (i >= int64_t(2) * heads * T * Dp) return;
        const int d = int(i % Dp), t = int(i / Dp % T);
        const int64_t matrix = i / (int64_t(T) * Dp);  // q or k of head h: which * heads + h
        const float v =
            d < D ? value(t, int(matrix / heads) * width + int(matrix % heads) * D + d) : 0.f;
        __half* hi = qk + (matrix * 2 * T + t) * Dp + d;
        split_half(v, hi[0], hi[int64_t(T) * Dp]);
        return;
    }
    __shared__ float tile[kTransposeTile][kTransposeTile + 1];
    constexpr int kRowStep = kSplitQkvThreads / kTransposeTile;
    const int b = int(blockIdx.x) - qk_blocks;
    const int column_tiles = (width + kTransposeTile - 1) / kTransposeTile;
    const int t0 = b / column_tiles * kTransposeTile, c0 = b % column_tiles * kTransposeTile;
    const int lane = int(threadIdx.x) % kTransposeTile, row0 = int(threadIdx.x) / kTransposeTile;
    for (int r = row0; r < kTransposeTile; r += kRowStep) {
        const int t = t0 + r, c = c0 + lane;
        tile[r][lane] = t < T && c < width ? value(t, 2 * width + c) : 0.f;
    }
    __syncthreads();
    for (int r = row0; r < kTransposeTile; r += kRowStep) {
        const int c = c0 + r;
        if (c >= width) break;
        __half* hi = vt + (int64_t(c / D) * 2 * D + c % D) * Tp + t0 + lane;
        split_half(tile[lane][r], hi[0], hi[int64_t(D) * Tp]);
    }
}

// attention_split_half's FP16 scratch, offsets in halves: q's and k's
// split operands [2, heads, 2, T, Dp], v's transposed [heads, 2, D, Tp],
// the probabilities' [heads, 2, T, Tp].
struct SplitScratch {
    int64_t qk = 0, vt, p, total;
    SplitScratch(int T, int heads, int D)
        : vt(int64_t(4) * heads * T * split_pitch(D)),
          p(vt + int64_t(2) * heads * D * split_pitch(T)),
          total(p + int64_t(2) * heads * T * split_pitch(T)) {}
};

void check_shape(int T, int head_dim) {
    if (head_dim <= 0) throw CudaError("attention: head_dim " + std::to_string(head_dim));
    if (T > kMaxKeys) {
        throw CudaError("attention: " + std::to_string(T) + " positions, at most " +
                        std::to_string(kMaxKeys));
    }
}

}  // namespace

int64_t attention_scratch_floats(int T, int heads) {
    return int64_t(heads) * T * score_pitch(T);
}

int64_t attention_split_half_scratch_halves(int T, int heads, int head_dim) {
    return SplitScratch(T, heads, head_dim).total;
}

void attention(cublasHandle_t handle, const float* q, const float* k, const float* v, float* out,
               int T, int heads, int head_dim, int ld_qkv, int valid_len, float* scratch,
               cudaStream_t stream) {
    if (T <= 0 || heads <= 0) return;
    check_shape(T, head_dim);
    const int D = head_dim, width = heads * head_dim, pitch = score_pitch(T);
    if (ld_qkv < width) {
        throw CudaError("attention: row pitch " + std::to_string(ld_qkv) + " < heads * head_dim " +
                        std::to_string(width));
    }
    const int64_t head_scores = int64_t(T) * pitch;
    // S_h [T, T] = Q_h [T, D] @ K_h^T (K_h stored [T, D]).
    matmul_batched(handle, false, true, T, T, D, q, ld_qkv, D, k, ld_qkv, D, 0.f, scratch, pitch,
                   head_scores, heads, stream);
    masked_softmax_rows(scratch, nullptr, heads * T, T, pitch, 0, valid_len, sqrtf(float(D)),
                        stream);
    // O_h [T, D] = P_h [T, T] @ V_h [T, D].
    matmul_batched(handle, false, false, T, D, T, scratch, pitch, head_scores, v, ld_qkv, D, 0.f,
                   out, width, D, heads, stream);
}

void attention_split_half(SplitSums qkv, const float* qkv_bias, float* out, int T, int heads,
                          int head_dim, int valid_len, float* scores, __half* halves,
                          cudaStream_t stream, HalfKernel kernel) {
    if (T <= 0 || heads <= 0) return;
    check_shape(T, head_dim);
    const int D = head_dim, Dp = split_pitch(D), Tp = split_pitch(T), pitch = score_pitch(T);
    const SplitScratch at(T, heads, D);
    __half* const qk = halves + at.qk;
    __half* const vt = halves + at.vt;
    __half* const p = halves + at.p;
    const int64_t qk_n = int64_t(2) * heads * T * Dp;  // per part
    const int qk_blocks = int((qk_n + kSplitQkvThreads - 1) / kSplitQkvThreads);
    const int vt_blocks = Tp / kTransposeTile * ((heads * D + kTransposeTile - 1) / kTransposeTile);
    launch_dependent(split_qkv_kernel, dim3(unsigned(qk_blocks + vt_blocks)),
                     dim3(kSplitQkvThreads), 0, stream, "split_qkv_kernel", qkv, qkv_bias, qk, vt,
                     T, heads, D, Dp, Tp, qk_blocks);
    const int64_t qk_head = int64_t(2) * T * Dp;
    matmul_split_half_batched(qk, qk_head, qk + heads * qk_head, qk_head, 1.f, scores, pitch,
                              int64_t(T) * pitch, T, T, Dp, heads, stream, kernel);
    masked_softmax_rows(scores, p, heads * T, T, pitch, Tp, valid_len, sqrtf(float(D)), stream);
    matmul_split_half_batched(p, int64_t(2) * T * Tp, vt, int64_t(2) * D * Tp, 1.f / kProbScale,
                              out, heads * D, D, T, D, Tp, heads, stream, kernel);
}

}  // namespace kokoro::ops
