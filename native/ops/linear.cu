// Linear layers and the row-major GEMM wrapper every GEMM of the engine goes
// through. cuBLAS is column-major; a row-major C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T, so the wrapper swaps the operands and
// keeps each op flag (a row-major matrix read column-major is its transpose).
// matmul_batched is the same mapping on cublasSgemmStridedBatched (plain
// fp32 only). The bias of a linear layer is one extra pass over y (a
// broadcast add along rows). GemmMath::kFp32 is cublasSgemm (the handle's
// default math, no TF32); kTf32 is cublasGemmEx with
// CUBLAS_COMPUTE_32F_FAST_TF32 on the same fp32 buffers (tensor cores, fp32
// accumulation).
// linear_split_half is fast precision's float32-level GEMM on the tensor
// cores (ops.h says why its accumulation is its own): both operands split
// into FP16 hi + lo parts, the weight once at upload (host), x per call by
// split_rows_kernel; w's power-of-two scaling (away from FP16's underflow)
// is undone in the epilogue, exactly. The kernel is a plain mma.sync GEMM:
// 64 x 64 output tiles, 4 warps of 32 x 32, one 64-wide reduction chunk per
// pipeline step: its four tiles (x_hi, x_lo, w_hi, w_lo; 3 cp.async stages,
// or 2 where that fits a grid in one wave (plan); 144-byte padded shared
// rows: ldmatrix conflict-free) each loaded once for
// the three products (L2 bound otherwise: one product's two tiles per step
// was 1.5x the traffic); each chunk's sums then move from the MMA
// accumulators into fp32 registers.
// ALBERT's shapes give few tiles (12 - 36 at 32 rows), and a block's steps
// are bound by the latency of its copies, so the reduction is split over
// blocks up to one wave of resident blocks; the splits' sums are then
// added in a fixed order (deterministic) by split_sum_kernel, or by the op
// that reads the output (ops::SplitSums: ALBERT's GELU, one kernel fewer).
// An operand can also come split already (x null: gelu_new_split wrote it).
#include <algorithm>

#include <cuda_fp16.h>

#include "kokoro/check.h"
#include "kokoro/half_rows.cuh"
#include "kokoro/launch.cuh"
#include "kokoro/mma.cuh"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

// y[r, c] += b[c] for a [rows, cols] matrix.
__global__ void add_bias_columns_kernel(float* y, const float* b, int64_t n, int cols) {
    await_producers();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i < n) y[i] += b[i % cols];
}

// x [rows, in] -> x_split [2, rows, pitch]: hi, then lo; zero past `in`.
__global__ void split_rows_kernel(const float* x, __half* x_split, int rows, int in, int pitch) {
    await_producers();
    release_dependents();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    const int64_t n = int64_t(rows) * pitch;
    if (i >= n) return;
    const int k = int(i % pitch);
    split_half(k < in ? x[i / pitch * in + k] : 0.f, x_split[i], x_split[n + i]);
}

namespace split_gemm {

constexpr int kTile = 64;  // output rows and columns per block
constexpr int kBK = kSplitChunk;
constexpr int kPitch = kBK + 8;  // halves per padded shared row: 144 bytes
constexpr int kThreads = 128;
constexpr int kStageHalves = 4 * kTile * kPitch;  // x_hi, x_lo, w_hi, w_lo tiles
// Shared memory of a block with `stages` pipeline stages.
constexpr size_t smem_bytes(int stages) { return sizeof(__half) * stages * kStageHalves; }

// partial null: one split, the kernel writes y; else split z writes its
// unscaled sums over chunks [z * chunks_per_split, ...) to partial[z]
// ([rows, out]) and split_sum_kernel finishes.
struct Args {
    const __half* x;  // [2, rows, pitch]
    const __half* w;  // [2, out, pitch]
    const float* b;
    float* y;
    float* partial;
    float w_scale, beta;
    int rows, out, pitch, chunks_per_split;
};

template <int Stages>
__global__ void __launch_bounds__(kThreads) linear_split_kernel(const Args a);

// Blocks of linear_split_kernel<Stages> that fit on the device at once (it
// needs its shared memory size set first; no other size is ever set).
template <int Stages>
int resident_blocks(int sms) {
    constexpr size_t bytes = smem_bytes(Stages);
    KOKORO_CUDA_CHECK(cudaFuncSetAttribute(
        linear_split_kernel<Stages>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    int per_sm = 0;
    KOKORO_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, linear_split_kernel<Stages>, kThreads, bytes));
    return std::max(1, per_sm) * sms;
}

struct Plan {
    int stages, splits, chunks_per_split;
};

// Three pipeline stages (two blocks per SM on an H200), with as many splits
// as keep the grid within one wave (a wave and a bit takes two waves' time);
// but where the tiles alone need more than a wave of those and fit in one
// wave of two-stage blocks (three per SM), two stages and no split: the
// shallower pipeline loses less than the second wave (ALBERT's fused QKV
// projection at 502 rows: 288 tiles).
Plan plan(int rows, int in, int out) {
    int device = 0, sms = 0;
    KOKORO_CUDA_CHECK(cudaGetDevice(&device));
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int chunks = split_pitch(in) / kBK;
    const int tiles = ((out + kTile - 1) / kTile) * ((rows + kTile - 1) / kTile);
    const int deep = resident_blocks<3>(sms);
    if (tiles > deep && tiles <= resident_blocks<2>(sms)) return {2, 1, chunks};
    const int wanted = std::max(1, deep / tiles);
    const int per = (chunks + wanted - 1) / wanted;
    return {3, (chunks + per - 1) / per, per};
}

// y = the split sums (SplitSums: in split order, times w_scale, + beta * y) (+ b).
__global__ void split_sum_kernel(SplitSums sums, const float* b, float* y, int out) {
    await_producers();
    release_dependents();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i >= sums.n) return;
    float v = sums[i];
    if (b != nullptr) v += b[i % out];
    y[i] = v;
}

// Chunk c's four tiles into `stage`: x_hi, x_lo (output rows m0..), w_hi,
// w_lo (output columns n0..), 64 reduction columns each. Thread i copies
// piece i % 8 of rows i / 8 + 16 j of every tile; rows past the matrices
// are zero filled.
__device__ void load_chunk(__half* stage, const Args& a, int m0, int n0, int c) {
    const int k0 = c * kBK + threadIdx.x % 8 * 8;
    const int64_t x_part = int64_t(a.rows) * a.pitch, w_part = int64_t(a.out) * a.pitch;
    __half* dst = stage + threadIdx.x % 8 * 8;
#pragma unroll
    for (int j = 0; j < kTile * 8 / kThreads; ++j) {
        const int r = threadIdx.x / 8 + j * (kThreads / 8);
        const bool x_ok = m0 + r < a.rows, w_ok = n0 + r < a.out;
        const __half* x = x_ok ? a.x + int64_t(m0 + r) * a.pitch + k0 : a.x;
        const __half* w = w_ok ? a.w + int64_t(n0 + r) * a.pitch + k0 : a.w;
        cp_async16(dst + (0 * kTile + r) * kPitch, x, x_ok);
        cp_async16(dst + (1 * kTile + r) * kPitch, x_ok ? x + x_part : a.x, x_ok);
        cp_async16(dst + (2 * kTile + r) * kPitch, w, w_ok);
        cp_async16(dst + (3 * kTile + r) * kPitch, w_ok ? w + w_part : a.w, w_ok);
    }
}

template <int Stages>
__global__ void __launch_bounds__(kThreads) linear_split_kernel(const Args a) {
    await_producers();
    release_dependents();
    extern __shared__ __align__(16) __half smem[];
    const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / 2 * 32, wn = warp % 2 * 32;  // this warp's 32 x 32 of the tile
    // This split's chunks [first, first + chunks).
    const int first = blockIdx.z * a.chunks_per_split;
    const int chunks = min(a.chunks_per_split, a.pitch / kBK - first);
    float acc[2][4][4] = {};  // fp32 sums over the finished chunks
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
        if (s < chunks) load_chunk(smem + s * kStageHalves, a, m0, n0, first + s);
        cp_async_commit();
    }
    for (int s = 0; s < chunks; ++s) {
        cp_async_wait<Stages - 2>();
        __syncthreads();  // chunk s landed; every warp is done with chunk s - 1's stage
        if (s + Stages - 1 < chunks) {
            load_chunk(smem + (s + Stages - 1) % Stages * kStageHalves, a, m0, n0,
                       first + s + Stages - 1);
        }
        cp_async_commit();
        float sums[2][4][4] = {};  // the MMAs' sums over this chunk
        const __half* tiles = smem + s % Stages * kStageHalves;
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 16) {
            // [part][mi or pair]: A rows lane % 16, k half lane / 16; B (rows
            // are outputs) n lane % 8 + 8 (lane / 16), k half (lane / 8) % 2.
            uint32_t xf[2][2][4], wf[2][2][4];
#pragma unroll
            for (int part = 0; part < 2; ++part) {
                const __half* xs = tiles + part * kTile * kPitch;
                const __half* ws = tiles + (2 + part) * kTile * kPitch;
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int x_row = wm + i * 16 + lane % 16;
                    const int w_row = wn + i * 16 + lane % 8 + lane / 16 * 8;
                    ldmatrix_x4(xf[part][i], xs + x_row * kPitch + kk + lane / 16 * 8);
                    ldmatrix_x4(wf[part][i], ws + w_row * kPitch + kk + lane / 8 % 2 * 8);
                }
            }
            // x_hi w_hi + x_hi w_lo + x_lo w_hi (x_lo w_lo, ~2^-22
            // relative, is left out).
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    const int np = ni / 2, half = ni % 2 * 2;
                    mma_f16(sums[mi][ni], xf[0][mi], wf[0][np][half], wf[0][np][half + 1]);
                    mma_f16(sums[mi][ni], xf[0][mi], wf[1][np][half], wf[1][np][half + 1]);
                    mma_f16(sums[mi][ni], xf[1][mi], wf[0][np][half], wf[0][np][half + 1]);
                }
            }
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mi][ni][e] += sums[mi][ni][e];
    }
    // Accumulator element e of tile (mi, ni): row lane / 4 (+ 8 for e >= 2),
    // column 2 (lane % 4) + e % 2.
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int m = m0 + wm + mi * 16 + lane / 4 + e / 2 * 8;
                const int n = n0 + wn + ni * 8 + lane % 4 * 2 + e % 2;
                if (m >= a.rows || n >= a.out) continue;
                const int64_t at = int64_t(m) * a.out + n;
                if (a.partial != nullptr) {
                    a.partial[blockIdx.z * int64_t(a.rows) * a.out + at] = acc[mi][ni][e];
                    continue;
                }
                float* y = a.y + at;
                float v = acc[mi][ni][e] * a.w_scale;
                if (a.beta != 0.f) v += a.beta * *y;
                if (a.b != nullptr) v += a.b[n];
                *y = v;
            }
        }
    }
}

}  // namespace split_gemm

// Rebinding resets a workspace set with cublasSetWorkspace: only on a change.
void bind_stream(cublasHandle_t handle, cudaStream_t stream) {
    cudaStream_t bound = nullptr;
    KOKORO_CUBLAS_CHECK(cublasGetStream(handle, &bound));
    if (bound != stream) KOKORO_CUBLAS_CHECK(cublasSetStream(handle, stream));
}

}  // namespace

void matmul(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, const float* A,
            int lda, const float* B, int ldb, float beta, float* C, int ldc, cudaStream_t stream,
            GemmMath math) {
    const float alpha = 1.f;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    bind_stream(handle, stream);
    if (math == GemmMath::kFp32) {
        KOKORO_CUBLAS_CHECK(
            cublasSgemm(handle, op_b, op_a, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
    } else {
        KOKORO_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, N, M, K, &alpha, B, CUDA_R_32F, ldb,
                                         A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                                         CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    }
}

void matmul_batched(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K,
                    const float* A, int lda, int64_t stride_a, const float* B, int ldb,
                    int64_t stride_b, float beta, float* C, int ldc, int64_t stride_c, int batch,
                    cudaStream_t stream) {
    const float alpha = 1.f;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    bind_stream(handle, stream);
    KOKORO_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, op_b, op_a, N, M, K, &alpha, B, ldb,
                                                  stride_b, A, lda, stride_a, &beta, C, ldc,
                                                  stride_c, batch));
}

void linear(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
            int rows, int in, int out, cudaStream_t stream, float beta, GemmMath math) {
    matmul(handle, false, true, rows, out, in, x, in, w, in, beta, y, out, stream, math);
    if (b != nullptr) {
        const int64_t n = int64_t(rows) * out;
        launch_dependent(add_bias_columns_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0,
                         stream, "add_bias_columns_kernel", y, b, n, out);
    }
}

float linear_weight_to_split_half(const float* w, __half* dst, int out, int in) {
    return weight_rows_to_half(w, dst, out, in, split_pitch(in), HalfOperands::kSplit);
}

int64_t linear_split_half_scratch_floats(int rows, int in, int out) {
    const split_gemm::Plan p = split_gemm::plan(rows, in, out);
    return p.splits > 1 ? int64_t(p.splits) * rows * out : 0;
}

namespace {
// split_rows + the split GEMM; the sums as the blocks left them (b: added by
// the GEMM where the reduction is not split, else by whoever adds the sums).
SplitSums split_gemm_sums(const float* x, __half* x_split, const __half* w_split, float w_scale,
                          const float* b, float* y, int rows, int in, int out, float* scratch,
                          cudaStream_t stream, float beta) {
    const int pitch = split_pitch(in);
    const int64_t n = int64_t(rows) * pitch;
    if (x != nullptr) {
        launch_dependent(split_rows_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0,
                         stream, "split_rows_kernel", x, x_split, rows, in, pitch);
    }
    using namespace split_gemm;
    const Plan p = plan(rows, in, out);
    float* partial = p.splits > 1 ? scratch : nullptr;
    const dim3 grid(unsigned((out + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile),
                    unsigned(p.splits));
    // plan() set the chosen instantiation's shared memory size.
    launch_dependent(p.stages == 2 ? linear_split_kernel<2> : linear_split_kernel<3>, grid,
                     dim3(kThreads), smem_bytes(p.stages), stream, "linear_split_kernel",
                     Args{x_split, w_split, b, y, partial, w_scale, beta, rows, out, pitch,
                          p.chunks_per_split});
    if (partial == nullptr) return SplitSums(y);
    return SplitSums(partial, p.splits, int64_t(rows) * out, w_scale, y, beta);
}
}  // namespace

void linear_split_half(const float* x, __half* x_split, const __half* w_split, float w_scale,
                       const float* b, float* y, int rows, int in, int out, float* scratch,
                       cudaStream_t stream, float beta) {
    if (rows <= 0 || out <= 0) return;
    const SplitSums sums = split_gemm_sums(x, x_split, w_split, w_scale, b, y, rows, in, out,
                                           scratch, stream, beta);
    if (sums.partial != nullptr) {
        launch_dependent(split_gemm::split_sum_kernel, dim3(unsigned((sums.n + 255) / 256)),
                         dim3(256), 0, stream, "split_sum_kernel", sums, b, y, out);
    }
}

SplitSums linear_split_half_sums(const float* x, __half* x_split, const __half* w_split,
                                 float w_scale, float* y, int rows, int in, int out,
                                 float* scratch, cudaStream_t stream, float beta) {
    if (rows <= 0 || out <= 0) return SplitSums(y);
    return split_gemm_sums(x, x_split, w_split, w_scale, nullptr, y, rows, in, out, scratch,
                           stream, beta);
}

}  // namespace kokoro::ops
