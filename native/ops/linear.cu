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

// A thread's copies of a chunk's four tiles into a stage of the mma.sync
// kernel: x_hi, x_lo (output rows m0..), w_hi, w_lo (output columns n0..),
// 64 reduction columns each, rows padded to kPitch. Thread i copies piece
// i % 8 of rows i / 8 + 16 j of every tile; rows past the matrices are zero
// filled (from an address inside the matrix, never read). The sources are
// set up once per block (the hi part's at chunk 0; the lo part's are a
// part further), so that a chunk's copies cost an add each.
struct ChunkCopies {
    static constexpr int kRowStep = kThreads / 8;
    static constexpr int kRows = kTile / kRowStep;
    const __half* x[kRows];
    const __half* w[kRows];
    bool x_ok[kRows], w_ok[kRows];
    int64_t x_part, w_part;
    int dst;  // this thread's first slot in a stage, in halves

    __device__ ChunkCopies(const Args& a, int m0, int n0)
        : x_part(int64_t(a.rows) * a.pitch), w_part(int64_t(a.out) * a.pitch) {
        const int piece = threadIdx.x % 8, r0 = threadIdx.x / 8;
        dst = r0 * kPitch + piece * 8;
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
            const int r = r0 + j * kRowStep;
            x_ok[j] = m0 + r < a.rows;
            w_ok[j] = n0 + r < a.out;
            x[j] = (x_ok[j] ? a.x + int64_t(m0 + r) * a.pitch : a.x) + piece * 8;
            w[j] = (w_ok[j] ? a.w + int64_t(n0 + r) * a.pitch : a.w) + piece * 8;
        }
    }
    // Chunk c into `stage`.
    __device__ void load(__half* stage, int c) const {
        const int k = c * kBK;
        __half* const to = stage + dst;
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
            const int row = j * kRowStep * kPitch;
            cp_async16(to + 0 * kTile * kPitch + row, x[j] + k, x_ok[j]);
            cp_async16(to + 1 * kTile * kPitch + row, x[j] + x_part + k, x_ok[j]);
            cp_async16(to + 2 * kTile * kPitch + row, w[j] + k, w_ok[j]);
            cp_async16(to + 3 * kTile * kPitch + row, w[j] + w_part + k, w_ok[j]);
        }
    }
};

// The mma.sync kernel's walk over its split's chunks, Stages cp.async
// stages deep: compute(tiles, c) runs the split's chunk s (the reduction's
// chunk c) once it has landed for every thread; the barrier before it also
// frees the stage chunk s - 1 used (compute waits for its MMAs), which chunk
// s + Stages - 1 then refills.
template <int Stages, class Compute>
__device__ void reduction_pipeline(const Args& a, int split, __half* smem, int m0, int n0,
                                   Compute compute) {
    constexpr int kStage = kStageHalves<false>;
    const int first = split * a.chunks_per_split;
    const int chunks = min(a.chunks_per_split, a.pitch / kBK - first);
    const ChunkCopies copies(a, m0, n0);
#pragma unroll
    for (int s = 0; s < Stages - 1; ++s) {
        if (s < chunks) copies.load(smem + s * kStage, first + s);
        cp_async_commit();
    }
    for (int s = 0; s < chunks; ++s) {
        cp_async_wait<Stages - 2>();
        __syncthreads();  // chunk s landed; every warp is done with chunk s - 1's stage
        if (s + Stages - 1 < chunks) {
            copies.load(smem + (s + Stages - 1) % Stages * kStage, first + s + Stages - 1);
        }
        cp_async_commit();
        compute(smem + s % Stages * kStage, first + s);
    }
}

// Output (m, n)'s value: this split's partial, or y (scaled, + beta y, + b).
__device__ void store_output(const Args& a, int split, int m, int n, float sum) {
    if (m >= a.rows || n >= a.out) return;
    if (a.partial != nullptr) {
        a.partial[(split * int64_t(a.rows) + m) * a.out + n] = sum;
        return;
    }
    float* y = a.y + int64_t(m) * a.ldy + n;
    float v = sum * a.w_scale;
    if (a.beta != 0.f) v += a.beta * *y;
    if (a.b != nullptr) v += a.b[n];
    *y = v;
}

template <int Stages, bool kStacked>
__global__ void __launch_bounds__(kThreads) linear_split_kernel(const Args args) {
    await_producers();
    release_dependents();
    int split = 0;
    const Args a = block_view(args, split);
    extern __shared__ __align__(16) __half smem[];
    const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / 2 * 32, wn = warp % 2 * 32;  // this warp's 32 x 32 of the tile
    float acc[2][4][4] = {};  // fp32 sums over the finished chunks
    // Accumulator element e of tile (mi, ni): row lane / 4 (+ 8 for e >= 2),
    // column 2 (lane % 4) + e % 2; flat slot 16 mi + 4 ni + e, row slot 2 mi + e / 2.
    float(&acc_slots)[32] = reinterpret_cast<float(&)[32]>(acc);
    const auto row_slot = [](int i) { return i / 16 * 2 + i % 4 / 2; };
    StackedSplits<32, 4, kStacked> stacked;
    if constexpr (kStacked) {
        int rows[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) rows[r] = m0 + wm + r / 2 * 16 + lane / 4 + r % 2 * 8;
        stacked.init(a, rows);
    }
    const int chunks = a.pitch / kBK;
    reduction_pipeline<Stages>(a, split, smem, m0, n0, [&](const __half* tiles, int c) {
        float sums[2][4][4] = {};  // the MMAs' sums over this chunk
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
        if constexpr (kStacked) stacked.chunk_done(c, chunks, acc_slots, row_slot);
    });
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = 16 * mi + 4 * ni + e;
                store_output(a, split, m0 + wm + mi * 16 + lane / 4 + e / 2 * 8,
                             n0 + wn + ni * 8 + lane % 4 * 2 + e % 2,
                             stacked.sum(i, acc[mi][ni][e]));
            }
}

// The wgmma kernel: one warpgroup, its stages filled by TMA (thread 0 issues
// a chunk's four tiles, counted in on the stage's barrier, which every
// thread waits on before the chunk's MMAs). The chunks go in runs of up to
// four, each chunk's MMAs into one of two sum buffers, left in flight while
// the previous chunk's sums are added up and its stage refilled (after a
// barrier: every warp has waited for that chunk's MMAs). The run, not the
// walk, keeps them in flight: ptxas serialises every wgmma where a loop's
// back edge crosses MMAs in flight whose neighbours' sums are read (C7514).
// The sums are added chunk by chunk in order, as the mma.sync kernel does:
// the same bits. Its body exists in sm_90a device code only (other targets
// build an empty kernel, never launched).
template <int Stages, bool kStacked>
__global__ void __launch_bounds__(kThreads, kTwoStageBlocks)
    linear_split_wgmma_kernel(const Args args, const __grid_constant__ CUtensorMap x_map,
                              const __grid_constant__ CUtensorMap w_map) {
    await_producers();
    release_dependents();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __shared__ uint64_t landed[Stages];
    if (threadIdx.x == 0) {
        for (int s = 0; s < Stages; ++s) mbarrier_init(&landed[s], 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    int split = 0;
    const Args a = block_view(args, split);
    const int item = int(blockIdx.z) / a.splits;
    extern __shared__ uint4 smem_vec[];
    __half* const smem = swizzle_aligned(smem_vec);
    constexpr int kStage = kStageHalves<true>, kTileHalves = kTile * kBK;
    const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
    const int first = split * a.chunks_per_split;
    const int chunks = min(a.chunks_per_split, a.pitch / kBK - first);
    // The split's chunk s into stage s % Stages (thread 0).
    const auto load = [&](int s) {
        __half* const stage = smem + s % Stages * kStage;
        uint64_t* const bar = &landed[s % Stages];
        const int k = (first + s) * kBK;
        mbarrier_arrive_expect_tx(bar, kStage * sizeof(__half));
        tma_load_4d(stage + 0 * kTileHalves, x_map, bar, k, m0, 0, item);
        tma_load_4d(stage + 1 * kTileHalves, x_map, bar, k, m0, 1, item);
        tma_load_4d(stage + 2 * kTileHalves, w_map, bar, k, n0, 0, item);
        tma_load_4d(stage + 3 * kTileHalves, w_map, bar, k, n0, 1, item);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < min(Stages, chunks); ++s) load(s);
    }
    uint32_t parities = 0;  // bit i: the parity of stage i's next phase

    float acc[kTile / 2] = {};  // fp32 sums over the finished chunks
    // acc[4 j + 2 h + e]: row 16 warp + lane / 4 + 8 h, column 8 j + 2 (lane % 4) + e.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const auto row_slot = [](int i) { return i / 2 % 2; };
    StackedSplits<kTile / 2, 2, kStacked> stacked;
    if constexpr (kStacked) {
        const int rows[2] = {m0 + 16 * warp + lane / 4, m0 + 16 * warp + lane / 4 + 8};
        stacked.init(a, rows);
    }
    const int all_chunks = a.pitch / kBK;
    using Sums = float[kTile / 2];  // the MMAs' sums over one chunk
    Sums even = {}, odd = {};
    // Chunk s's MMAs, once its stage landed, into sums (overwritten: the
    // chunk's first product does not accumulate), one commit group:
    // x_hi w_hi + x_hi w_lo + x_lo w_hi per 16-wide slice (+32 bytes).
    const auto issue = [&](Sums& sums, int s) {
        const int stage = s % Stages;
        mbarrier_wait(&landed[stage], (parities >> stage) & 1);
        parities ^= 1u << stage;
        constexpr uint32_t kTileBytes = kTileHalves * sizeof(__half);
        uint32_t x_hi = smem_addr(smem + stage * kStage);
        // (opaque: with two stages each chunk's stage is known, and its 48
        // descriptors would be hoisted out of the walk into registers)
        asm volatile("" : "+r"(x_hi));
        const uint32_t x_lo = x_hi + kTileBytes, w_hi = x_hi + 2 * kTileBytes;
        const uint32_t w_lo = x_hi + 3 * kTileBytes;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
            const uint32_t k = kk * 32;
            wgmma_m64n64k16(sums, swizzled_descriptor(x_hi + k), swizzled_descriptor(w_hi + k),
                            kk > 0);
            wgmma_m64n64k16(sums, swizzled_descriptor(x_hi + k), swizzled_descriptor(w_lo + k));
            wgmma_m64n64k16(sums, swizzled_descriptor(x_lo + k), swizzled_descriptor(w_hi + k));
        }
        wgmma_commit();
    };
    // Chunk s's MMAs done in this warp: once in every warp, its stage takes
    // chunk s + Stages; its sums go into the fp32 totals.
    const auto retire = [&](Sums& sums, int s) {
        fence_accumulators(sums);
        __syncthreads();
        if (threadIdx.x == 0 && s + Stages < chunks) load(s + Stages);
#pragma unroll
        for (int i = 0; i < kTile / 2; ++i) acc[i] += sums[i];
        if constexpr (kStacked) stacked.chunk_done(first + s, all_chunks, acc, row_slot);
    };
    // Chunks s .. s + n - 1, in the two buffers in turn.
    const auto run = [&](auto n, int s) {
        constexpr int kN = decltype(n)::value;
        issue(even, s);
        if constexpr (kN >= 2) {
            issue(odd, s + 1);
            wgmma_wait<1>();
            retire(even, s);
        }
        if constexpr (kN >= 3) {
            issue(even, s + 2);
            wgmma_wait<1>();
            retire(odd, s + 1);
        }
        if constexpr (kN >= 4) {
            issue(odd, s + 3);
            wgmma_wait<1>();
            retire(even, s + 2);
        }
        wgmma_wait<0>();
        if constexpr (kN % 2 == 1) {
            retire(even, s + kN - 1);
        } else {
            retire(odd, s + kN - 1);
        }
    };
    int s = 0;
#pragma unroll 1
    for (; s + 4 <= chunks; s += 4) run(std::integral_constant<int, 4>{}, s);
    if (s + 2 <= chunks) {
        run(std::integral_constant<int, 2>{}, s);
        s += 2;
    }
    if (s < chunks) run(std::integral_constant<int, 1>{}, s);
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int i = 4 * j + 2 * h + e;
                store_output(a, split, m0 + 16 * warp + lane / 4 + 8 * h,
                             n0 + 8 * j + lane % 4 * 2 + e, stacked.sum(i, acc[i]));
            }
#else
    static_cast<void>(args);
    static_cast<void>(x_map);
    static_cast<void>(w_map);
#endif
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
