// The split FP16 GEMM's kernel bodies: the split sum, the chunks' operand
// copies, and the mma.sync and wgmma kernels declared in linear.cu.
// Included by native/ops/linear.cu only, where the declarations before it
// stand: one translation unit, its declarations in order.
#pragma once

namespace kokoro::ops {
namespace {
namespace split_gemm {

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
}  // namespace
}  // namespace kokoro::ops
