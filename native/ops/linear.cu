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
// is undone in the epilogue, exactly. The kernel is a plain GEMM on 64 x 64
// output tiles, one 64-wide reduction chunk per pipeline step: its four
// tiles (x_hi, x_lo, w_hi, w_lo; 3 stages, or 2 where that fits a grid in
// one wave (plan)) each loaded once for the three products (L2 bound
// otherwise: one product's two tiles per step was 1.5x the traffic); each
// chunk's sums then move from the MMA accumulators into fp32 registers.
// Two kernels of that one design (HalfKernel): wgmma (sm_90a), one
// warpgroup whose m64n64k16 wgmmas read both operands from 128-byte
// swizzled tiles that TMA copies in, a chunk's MMAs in flight while the
// previous chunk's sums are added up (its instruction stream, not its
// MMAs, bounds a block: ncu), and mma.sync (sm_80 on), 4 warps of 32 x 32
// reading 144-byte padded rows (ldmatrix conflict-free) that cp.async
// copies in. Both issue the three products of each 16-wide slice in the
// same order into the chunk's sums: the same bits (the op tests check it
// on Hopper).
// ALBERT's shapes give few tiles (12 - 36 at 32 rows), and a block's steps
// are bound by the latency of its copies, so the reduction is split over
// blocks up to one wave of resident blocks; the splits' sums are then
// added in a fixed order (deterministic) by split_sum_kernel, or by the op
// that reads the output (ops::SplitSums: ALBERT's GELU, one kernel fewer).
// An operand can also come split already (x null: gelu_new_split wrote it).
// A stack of utterances' rows (a batch's grouped ALBERT) gives each row the
// split plan a call on its utterance alone would take (row_chunks); one
// block then walks all the chunks and keeps each row's splits apart in
// registers, adding them in split order as split_sum_kernel would: each
// row's bits are that call's, without its partial sums' traffic.
// matmul_split_half_batched runs the same kernels over a batch of GEMMs on
// operands split already (the fast attention's Q K^T and P V per head: a
// grid layer per head, the reduction never split, y at its own row pitch).
#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_fp16.h>

#include "kokoro/check.h"
#include "kokoro/half_rows.cuh"
#include "kokoro/launch.cuh"
#include "kokoro/mma.cuh"
#include "kokoro/ops.h"
#include "kokoro/tensor_map.h"

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
constexpr int kThreads = 128;  // 4 warps: one warpgroup
// A stage holds four kTile-row tiles (x_hi, x_lo, w_hi, w_lo) of kBK
// halves, rows padded to kPitch (mma.sync) or dense and swizzled (wgmma).
constexpr int kPitch = kBK + 8;  // halves per padded shared row: 144 bytes
template <bool kSwizzled>
constexpr int kStageHalves = 4 * kTile * (kSwizzled ? kBK : kPitch);
// Shared memory of a block with `stages` pipeline stages (wgmma: plus the
// swizzle's alignment).
constexpr size_t smem_bytes(bool wgmma, int stages) {
    return wgmma ? kSwizzleAlign + sizeof(__half) * stages * kStageHalves<true>
                 : sizeof(__half) * stages * kStageHalves<false>;
}
// Two-stage wgmma blocks that share an SM (their registers kept to that).
constexpr int kTwoStageBlocks = 3;

// partial null: one split, the kernel writes y (row pitch ldy); else split
// z writes its unscaled sums over chunks [z * chunks_per_split, ...) to
// partial[z] ([rows, out]) and split_sum_kernel finishes. row_chunks (the
// stacked kernels; one split): row m's sums are split every row_chunks[m]
// chunks, the splits added in order. A batch of
// GEMMs (the attention's heads; never split) has item i's operands and
// output x_batch, w_batch and y_batch elements on: blockIdx.z = i * splits + z.
struct Args {
    const __half* x;  // [2, rows, pitch]
    const __half* w;  // [2, out, pitch]
    const float* b;
    float* y;
    float* partial;
    const int32_t* row_chunks;
    float w_scale, beta;
    int rows, out, pitch, chunks_per_split, splits, ldy;
    int64_t x_batch, w_batch, y_batch;
};

// The block's view of a: its batch item's operands and output; `split` its split.
__device__ __forceinline__ Args block_view(Args a, int& split) {
    split = int(blockIdx.z) % a.splits;
    const int64_t item = int(blockIdx.z) / a.splits;
    a.x += item * a.x_batch;
    a.w += item * a.w_batch;
    a.y += item * a.y_batch;
    return a;
}

// A stacked call's (row_chunks) per-split sums of a thread's kSlots
// accumulator slots, which cover kRows output rows (RowOf: slot -> row
// index): the kernel's accumulators then hold the current split's chunks
// only, and total[i] slot i's sum over its row's finished splits, added in
// split order as split_sum_kernel adds them. Unused (kOn false) by plain calls.
template <int kSlots, int kRows, bool kOn>
struct StackedSplits {
    float total[kOn ? kSlots : 1] = {};
    int chunks_per_split[kRows] = {};
    int left[kRows] = {};  // chunks left in the row's current split
    bool first[kRows] = {};  // the row's first split still running
    __device__ void init(const Args& a, const int (&rows)[kRows]) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            chunks_per_split[r] = rows[r] < a.rows ? a.row_chunks[rows[r]] : 1;
            left[r] = chunks_per_split[r];
            first[r] = true;
        }
    }
    // After reduction chunk c's sums went into acc (chunks 0, 1, ... in
    // turn, of `chunks` in all): the slots of rows whose split ends with c
    // move acc into their total (the first split's sums become it, as
    // split_sum_kernel starts). Counters, not a division per chunk.
    template <class RowOf>
    __device__ void chunk_done(int c, int chunks, float (&acc)[kSlots], RowOf row_of) {
        bool ends[kRows], was_first[kRows], any = false;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            ends[r] = --left[r] == 0 || c + 1 == chunks;
            was_first[r] = first[r];
            if (ends[r]) {
                left[r] = chunks_per_split[r];
                first[r] = false;
            }
            any = any || ends[r];
        }
        if (!any) return;  // most chunks end no split of this thread's rows
#pragma unroll
        for (int i = 0; i < kSlots; ++i) {
            const int r = row_of(i);
            if (!ends[r]) continue;
            total[i] = was_first[r] ? acc[i] : total[i] + acc[i];
            acc[i] = 0.f;
        }
    }
    // Slot i's sum: its total, or the plain call's accumulator.
    __device__ float sum(int i, float acc) const {
        if constexpr (kOn) return total[i];
        return acc;
    }
};

template <int Stages, bool kStacked>
__global__ void __launch_bounds__(kThreads) linear_split_kernel(const Args a);
template <int Stages, bool kStacked>
__global__ void __launch_bounds__(kThreads, kTwoStageBlocks)
    linear_split_wgmma_kernel(const Args a, const __grid_constant__ CUtensorMap x_map,
                              const __grid_constant__ CUtensorMap w_map);

// The instantiations that run a plan: [stacked (on row_chunks)][stages - 2].
using MmaKernel = void (*)(Args);
using WgmmaKernel = void (*)(Args, CUtensorMap, CUtensorMap);
const MmaKernel kMmaKernels[2][2] = {
    {linear_split_kernel<2, false>, linear_split_kernel<3, false>},
    {linear_split_kernel<2, true>, linear_split_kernel<3, true>}};
const WgmmaKernel kWgmmaKernels[2][2] = {
    {linear_split_wgmma_kernel<2, false>, linear_split_wgmma_kernel<3, false>},
    {linear_split_wgmma_kernel<2, true>, linear_split_wgmma_kernel<3, true>}};

// What plans and launches need of the current device, found once per
// device, when the kernels' shared memory sizes are set (no other size is
// ever set), rather than in ~20 driver calls per GEMM: a batch's grouped
// ALBERT launches its GEMMs uncaptured, from every lane's thread at once.
struct DeviceFacts {
    bool wgmma = false;
    int resident[2][2] = {};  // [wgmma][stages - 2]: plain blocks on the device at once
};
const DeviceFacts& device_facts() {
    static std::mutex mutex;
    static std::vector<std::unique_ptr<DeviceFacts>> by_device;
    int device = 0;
    KOKORO_CUDA_CHECK(cudaGetDevice(&device));
    const std::lock_guard<std::mutex> lock(mutex);
    if (by_device.size() <= size_t(device)) by_device.resize(size_t(device) + 1);
    std::unique_ptr<DeviceFacts>& facts = by_device[size_t(device)];
    if (facts) return *facts;
    auto found = std::make_unique<DeviceFacts>();
    found->wgmma = device_runs_wgmma();
    int sms = 0;
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    // Sets each kernel's shared memory size; the blocks of the first (the
    // plain kernel) that fit on the device.
    const auto prepare = [&](auto kernels, bool wgmma, int stages) {
        const int bytes = int(smem_bytes(wgmma, stages));
        for (const auto kernel : kernels) {
            KOKORO_CUDA_CHECK(cudaFuncSetAttribute(
                kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        }
        int per_sm = 0;
        KOKORO_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernels[0],
                                                                        kThreads, bytes));
        found->resident[wgmma][stages - 2] = std::max(1, per_sm) * sms;
    };
    for (int stages = 2; stages <= 3; ++stages) {
        prepare(std::array{kMmaKernels[0][stages - 2], kMmaKernels[1][stages - 2]}, false, stages);
        if (found->wgmma) {
            prepare(std::array{kWgmmaKernels[0][stages - 2], kWgmmaKernels[1][stages - 2]}, true,
                    stages);
        }
    }
    facts = std::move(found);
    return *facts;
}

// The TMA map of an operand [items][2][rows][pitch] (the items `batch`
// elements apart, dense: hi, then lo), whose box (a tile's 64 rows of one
// reduction chunk, one part, one item) is a stage's tile; rows past the
// matrix come in as zeros.
CUtensorMap operand_map(const char* what, const __half* base, int rows, int pitch, int items,
                        int64_t batch) {
    if (items > 1 && batch != int64_t(2) * rows * pitch) {
        throw CudaError(std::string(what) + ": a batch's operands must lie back to back");
    }
    return tensor_map<4>(what, base,
                         {cuuint64_t(pitch), cuuint64_t(rows), 2, cuuint64_t(items)},
                         {kBK, kTile, 1, 1});
}

// A launch of the plan's kernel on `grid` (z: items times splits).
void launch(bool wgmma, int stages, dim3 grid, const Args& a, cudaStream_t stream) {
    device_facts();  // (the shared memory sizes set)
    const bool stacked = a.row_chunks != nullptr;
    const size_t smem = smem_bytes(wgmma, stages);
    if (!wgmma) {
        launch_dependent(kMmaKernels[stacked][stages - 2], grid, dim3(kThreads), smem, stream,
                         "linear_split_kernel", a);
        return;
    }
    const int items = int(grid.z) / a.splits;
    const CUtensorMap x_map = operand_map("split linear x", a.x, a.rows, a.pitch, items, a.x_batch);
    const CUtensorMap w_map = operand_map("split linear w", a.w, a.out, a.pitch, items, a.w_batch);
    launch_dependent(kWgmmaKernels[stacked][stages - 2], grid, dim3(kThreads), smem, stream,
                     "linear_split_wgmma_kernel", a, x_map, w_map);
}

struct Plan {
    bool wgmma;
    int stages, splits, chunks_per_split;
};

// Three pipeline stages (two blocks per SM on an H200), with as many splits
// as keep the grid within one wave (a wave and a bit takes two waves' time);
// but where the tiles alone need more than a wave of those and fit in one
// wave of two-stage blocks (three per SM), two stages and no split: the
// shallower pipeline loses less than the second wave (ALBERT's fused QKV
// projection at 502 rows: 288 tiles).
Plan plan(int rows, int in, int out, HalfKernel which, bool may_split = true) {
    const DeviceFacts& device = device_facts();
    const bool wgmma = which == HalfKernel::kBest && device.wgmma;
    const int chunks = split_pitch(in) / kBK;
    const int tiles = ((out + kTile - 1) / kTile) * ((rows + kTile - 1) / kTile);
    const int deep = device.resident[wgmma][1];
    if (tiles > deep && tiles <= device.resident[wgmma][0]) return {wgmma, 2, 1, chunks};
    const int wanted = may_split ? std::max(1, deep / tiles) : 1;
    const int per = (chunks + wanted - 1) / wanted;
    return {wgmma, 3, (chunks + per - 1) / per, per};
}

}  // namespace split_gemm
}  // namespace
}  // namespace kokoro::ops

#include "linear/split_gemm_kernels.cuh"

namespace kokoro::ops {
namespace {

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

int64_t linear_split_half_scratch_floats(int rows, int in, int out, HalfKernel kernel,
                                         bool with_row_chunks) {
    const split_gemm::Plan p = split_gemm::plan(rows, in, out, kernel, !with_row_chunks);
    return p.splits > 1 ? int64_t(p.splits) * rows * out : 0;
}

std::vector<int32_t> linear_split_half_row_chunks(const std::vector<int>& lengths, int in,
                                                  int out, HalfKernel kernel) {
    std::vector<int32_t> chunks;
    for (const int n : lengths) {
        const int per = split_gemm::plan(n, in, out, kernel).chunks_per_split;
        chunks.insert(chunks.end(), size_t(n), per);
    }
    return chunks;
}

namespace {
// split_rows + the split GEMM; the sums as the blocks left them (b: added by
// the GEMM where the reduction is not split, else by whoever adds the sums).
SplitSums split_gemm_sums(const float* x, __half* x_split, const __half* w_split, float w_scale,
                          const float* b, float* y, int rows, int in, int out, float* scratch,
                          cudaStream_t stream, float beta, HalfKernel kernel,
                          const int32_t* row_chunks) {
    const int pitch = split_pitch(in);
    const int64_t n = int64_t(rows) * pitch;
    if (x != nullptr) {
        launch_dependent(split_rows_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0,
                         stream, "split_rows_kernel", x, x_split, rows, in, pitch);
    }
    using namespace split_gemm;
    const Plan p = plan(rows, in, out, kernel, row_chunks == nullptr);
    float* partial = p.splits > 1 ? scratch : nullptr;
    const dim3 grid(unsigned((out + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile),
                    unsigned(p.splits));
    launch(p.wgmma, p.stages, grid,
           Args{x_split, w_split, b, y, partial, row_chunks, w_scale, beta, rows, out, pitch,
                p.chunks_per_split, p.splits, out, 0, 0, 0},
           stream);
    if (partial == nullptr) return SplitSums(y);
    return SplitSums(partial, p.splits, int64_t(rows) * out, w_scale, y, beta);
}
}  // namespace

void linear_split_half(const float* x, __half* x_split, const __half* w_split, float w_scale,
                       const float* b, float* y, int rows, int in, int out, float* scratch,
                       cudaStream_t stream, float beta, HalfKernel kernel,
                       const int32_t* row_chunks) {
    if (rows <= 0 || out <= 0) return;
    const SplitSums sums = split_gemm_sums(x, x_split, w_split, w_scale, b, y, rows, in, out,
                                           scratch, stream, beta, kernel, row_chunks);
    if (sums.partial != nullptr) {
        launch_dependent(split_gemm::split_sum_kernel, dim3(unsigned((sums.n + 255) / 256)),
                         dim3(256), 0, stream, "split_sum_kernel", sums, b, y, out);
    }
}

void matmul_split_half_batched(const __half* x_split, int64_t x_stride, const __half* w_split,
                               int64_t w_stride, float scale, float* y, int ldy, int64_t y_stride,
                               int rows, int out, int pitch, int batch, cudaStream_t stream,
                               HalfKernel kernel) {
    if (rows <= 0 || out <= 0 || batch <= 0) return;
    if (pitch % kSplitChunk != 0) {
        throw CudaError("matmul_split_half_batched: pitch " + std::to_string(pitch) +
                        " is not a multiple of " + std::to_string(kSplitChunk));
    }
    using namespace split_gemm;
    const dim3 grid(unsigned((out + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile),
                    unsigned(batch));
    launch(kernel == HalfKernel::kBest && device_facts().wgmma, 3, grid,
           Args{x_split, w_split, nullptr, y, nullptr, nullptr, scale, 0.f, rows, out, pitch,
                pitch / kBK, 1, ldy, x_stride, w_stride, y_stride},
           stream);
}

SplitSums linear_split_half_sums(const float* x, __half* x_split, const __half* w_split,
                                 float w_scale, float* y, int rows, int in, int out,
                                 float* scratch, cudaStream_t stream, float beta,
                                 HalfKernel kernel, const int32_t* row_chunks) {
    if (rows <= 0 || out <= 0) return SplitSums(y);
    return split_gemm_sums(x, x_split, w_split, w_scale, nullptr, y, rows, in, out, scratch,
                           stream, beta, kernel, row_chunks);
}

}  // namespace kokoro::ops
