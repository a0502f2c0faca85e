// Ops of native/ops/linear.cu: cuBLAS GEMMs, the split FP16 GEMM and ALBERT's fused linear ops.
// Conventions: kokoro/ops.h.
// (The family headers include each other in the order the families build on
// one another: each holds the types the later ones use.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace kokoro::ops {

// The arithmetic of a GEMM: kFp32 is cublasSgemm (no TF32); kTf32 rounds the
// operands to TF32 on the tensor cores and accumulates in fp32.
enum class GemmMath { kFp32 = 0, kTf32 = 1 };

// ---------------------------------------------------------------- linear.cu
// Row-major GEMM on cuBLAS: C[M, N] = op(A) @ op(B) + beta * C, where op(A) is
// [M, K] (A stored [K, M] when trans_a) and op(B) is [K, N] (B stored [N, K]
// when trans_b); lda, ldb, ldc are row pitches in elements.
void matmul(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, const float* A,
            int lda, const float* B, int ldb, float beta, float* C, int ldc, cudaStream_t stream,
            GemmMath math = GemmMath::kFp32);
// `batch` independent row-major GEMMs as one cublasSgemmStridedBatched, plain
// fp32: C_b = op(A_b) @ op(B_b) + beta * C_b with A_b = A + b * stride_a (B_b,
// C_b alike; strides in elements), each as in matmul.
void matmul_batched(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K,
                    const float* A, int lda, int64_t stride_a, const float* B, int ldb,
                    int64_t stride_b, float beta, float* C, int ldc, int64_t stride_c, int batch,
                    cudaStream_t stream);
// y[rows, out] = x[rows, in] @ w[out, in]^T (+ b[out]) (+ beta * y). Plain GEMM
// on cuBLAS (the one vendor op besides the FFTs). `b` may be null.
void linear(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
            int rows, int in, int out, cudaStream_t stream, float beta = 0.f,
            GemmMath math = GemmMath::kFp32);

// Which kernel runs a tensor-core op on FP16 operands (the split linear,
// the half-rows convs): the best this build and GPU run (wgmma where the
// build holds sm_90a code and the GPU is compute capability 9.0, else
// mma.sync), or mma.sync everywhere (tests check both on Hopper).
enum class HalfKernel { kBest, kMmaSync };

// Linear on split FP16 operands (precision "fast"'s ALBERT and bert_encoder,
// where TF32 or rounded FP16 would change the durations): each operand v =
// hi + lo (hi = fp16(v), lo = fp16(v - hi)), stored hi part then lo part,
// rows zero-padded to split_pitch(in). The kernel sums x_hi w_hi + x_hi w_lo
// + x_lo w_hi per 64-wide reduction chunk on the tensor cores and adds each
// chunk's sum to fp32 accumulators in registers: the tensor cores' own
// accumulation (which truncates) never runs longer than one chunk, so the
// result is as accurate as an fp32 GEMM's (cuBLAS's FP16 GEMM on the same
// split operands was ~5x SGEMM's error, enough to double the audio error).
constexpr int kSplitChunk = 64;
// Row pitch (in halves) of each part of a split operand with `in` columns.
inline int split_pitch(int in) { return kSplitChunk * ((in + kSplitChunk - 1) / kSplitChunk); }
// Host-side: w [out, in] -> dst [2, out, split_pitch(in)] (hi, then lo),
// stored as weight_rows_to_half stores it; returns its w_scale (exact).
float linear_weight_to_split_half(const float* w, __half* dst, int out, int in);
// y[rows, out] = (x[rows, in] @ w^T) * w_scale (+ beta * y) (+ b[out]), w as
// linear_weight_to_split_half stores it; x_split: 2 * rows *
// split_pitch(in) FP16 scratch for x's parts (x null: x_split holds them
// already, as gelu_new_split writes them); scratch:
// linear_split_half_scratch_floats(...) floats (the partial sums where the
// reduction is split over blocks; 0: may be null). |x| must stay within
// FP16's range. y may not alias x. row_chunks (device [rows], may be null):
// rows stacked from several inputs (a batch's utterances), row m's reduction
// split every row_chunks[m] chunks as a call on its input alone plans it
// (linear_split_half_row_chunks); each row then has the bits of a call on its
// input alone (the splits are added in order inside one block: no scratch).
void linear_split_half(const float* x, __half* x_split, const __half* w_split, float w_scale,
                       const float* b, float* y, int rows, int in, int out, float* scratch,
                       cudaStream_t stream, float beta = 0.f,
                       HalfKernel kernel = HalfKernel::kBest,
                       const int32_t* row_chunks = nullptr);
// The scratch floats of linear_split_half (with_row_chunks: a call given row_chunks).
int64_t linear_split_half_scratch_floats(int rows, int in, int out,
                                         HalfKernel kernel = HalfKernel::kBest,
                                         bool with_row_chunks = false);
// linear_split_half's row_chunks for inputs of `lengths` rows stacked: each
// row the reduction chunks per split that a call on its input alone plans.
std::vector<int32_t> linear_split_half_row_chunks(const std::vector<int>& lengths, int in,
                                                  int out, HalfKernel kernel = HalfKernel::kBest);
// `batch` GEMMs on operands split already, y_i [rows, out] (row pitch ldy)
// = (x_i @ w_i^T) * scale with x_i = x_split + i * x_stride ([2, rows,
// pitch]: hi, then lo), w_i = w_split + i * w_stride ([2, out, pitch]), y_i
// = y + i * y_stride; pitch a multiple of kSplitChunk, pad columns zero.
// The same kernels and accuracy as linear_split_half, the reduction never
// split over blocks.
void matmul_split_half_batched(const __half* x_split, int64_t x_stride, const __half* w_split,
                               int64_t w_stride, float scale, float* y, int ldy, int64_t y_stride,
                               int rows, int out, int pitch, int batch, cudaStream_t stream,
                               HalfKernel kernel = HalfKernel::kBest);
// A split linear's output as its blocks left it, for the op that reads it to
// add up (one kernel fewer in a serial chain: ALBERT's GELU):
// value i = (partial[0][i] + partial[1][i] + ...) * w_scale + beta * y[i],
// as linear_split_half's own sum kernel forms it. From a pointer: that
// tensor (partial null).
struct SplitSums {
    const float* partial = nullptr;  // [splits, n]; null: y holds the values
    const float* y = nullptr;
    int64_t n = 0;
    int splits = 1;
    float w_scale = 1.f;
    float beta = 0.f;
    SplitSums(const float* x) : y(x) {}  // NOLINT(google-explicit-constructor)
    SplitSums(const float* partial_, int splits_, int64_t n_, float w_scale_, const float* y_,
              float beta_)
        : partial(partial_), y(y_), n(n_), splits(splits_), w_scale(w_scale_), beta(beta_) {}
    __host__ __device__ float operator[](int64_t i) const {
        if (partial == nullptr) return y[i];
        float sum = partial[i];
        for (int z = 1; z < splits; ++z) sum += partial[z * n + i];
        float v = sum * w_scale;
        if (beta != 0.f) v += beta * y[i];
        return v;
    }
    // Its values from element `offset` on (a stacked utterance's rows).
    SplitSums from(int64_t offset) const {
        SplitSums s = *this;
        if (s.partial != nullptr) s.partial += offset;
        if (s.y != nullptr) s.y += offset;
        return s;
    }
};
// linear_split_half without a bias, its split sums left to the reader:
// returns them (y: beta's term, or the values where the reduction was not
// split). The scratch must stay untouched until the reader has run.
SplitSums linear_split_half_sums(const float* x, __half* x_split, const __half* w_split,
                                 float w_scale, float* y, int rows, int in, int out,
                                 float* scratch, cudaStream_t stream, float beta = 0.f,
                                 HalfKernel kernel = HalfKernel::kBest,
                                 const int32_t* row_chunks = nullptr);

}  // namespace kokoro::ops
