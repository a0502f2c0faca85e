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
#include <cfloat>
#include <cmath>
#include <string>

#include "kokoro/check.h"
#include "kokoro/launch.cuh"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kWarps = 8;       // rows per block of the softmax
constexpr int kMaxKeys = 512;   // a softmax row in registers: 16 per lane

// Row pitch of the score matrix.
int score_pitch(int T) { return (T + 3) / 4 * 4; }

// Scaled, masked score of key j.
__device__ __forceinline__ float masked_score(float s, int j, int valid_len, float scale_div) {
    s = s / scale_div;
    if (j >= valid_len) s += -FLT_MAX;
    return s;
}

// In place over `rows` rows of T <= 32 kPerLane scores at row pitch `pitch`:
// raw dot products in, attention probabilities out. Lane l holds keys l +
// 32 i.
template <int kPerLane>
__global__ void masked_softmax_rows_kernel(float* scores, int rows, int T, int pitch,
                                           int valid_len, float scale_div) {
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
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        if (lane + 32 * i < T) r[lane + 32 * i] = s[i] / sum;
    }
}

// The softmax launch for T keys: the smallest row held in registers.
void masked_softmax_rows(float* scores, int rows, int T, int pitch, int valid_len,
                         float scale_div, cudaStream_t stream) {
    const dim3 grid(unsigned((rows + kWarps - 1) / kWarps)), block(kWarps * 32);
    const auto kernel = T <= 128   ? masked_softmax_rows_kernel<4>
                        : T <= 256 ? masked_softmax_rows_kernel<8>
                                   : masked_softmax_rows_kernel<kMaxKeys / 32>;
    launch_dependent(kernel, grid, block, 0, stream, "masked_softmax_rows_kernel", scores, rows,
                     T, pitch, valid_len, scale_div);
}

}  // namespace

int64_t attention_scratch_floats(int T, int heads) {
    return int64_t(heads) * T * score_pitch(T);
}

void attention(cublasHandle_t handle, const float* q, const float* k, const float* v, float* out,
               int T, int heads, int head_dim, int ld_qkv, int valid_len, float* scratch,
               cudaStream_t stream) {
    if (T <= 0 || heads <= 0) return;
    if (head_dim <= 0) throw CudaError("attention: head_dim " + std::to_string(head_dim));
    if (T > kMaxKeys) {
        throw CudaError("attention: " + std::to_string(T) + " positions, at most " +
                        std::to_string(kMaxKeys));
    }
    const int D = head_dim, width = heads * head_dim, pitch = score_pitch(T);
    if (ld_qkv < width) {
        throw CudaError("attention: row pitch " + std::to_string(ld_qkv) + " < heads * head_dim " +
                        std::to_string(width));
    }
    const int64_t head_scores = int64_t(T) * pitch;
    // S_h [T, T] = Q_h [T, D] @ K_h^T (K_h stored [T, D]).
    matmul_batched(handle, false, true, T, T, D, q, ld_qkv, D, k, ld_qkv, D, 0.f, scratch, pitch,
                   head_scores, heads, stream);
    masked_softmax_rows(scratch, heads * T, T, pitch, valid_len, sqrtf(float(D)), stream);
    // O_h [T, D] = P_h [T, T] @ V_h [T, D].
    matmul_batched(handle, false, false, T, D, T, scratch, pitch, head_scores, v, ld_qkv, D, 0.f,
                   out, width, D, heads, stream);
}

}  // namespace kokoro::ops
