// The implicit-GEMM conv's wgmma kernel (sm_90a: TMA-copied windows and
// weight tiles), its shared-memory sizes and window boxes.
// Included after igemm_tiles.cuh by the kernels' translation units
// (conv_igemm_*.cu) and conv_tensor_core.cu (the sizes, for a raw input's
// check).
#pragma once

namespace kokoro::ops::igemm {
namespace {

// ---------------------------------------------------------------- wgmma
// Time is the MMA's M and Cout its N: a block of kGroups warpgroups computes
// 64 * kGroups (T) x kN (Cout: 128, or 32 for a conv1d of at most 32 output
// channels), each warpgroup m64nNk16 wgmmas on its 64 time steps. The A
// operand (input rows, shifted by the tap) comes from registers, loaded by
// ldmatrix from the padded window exactly as mma.sync fragments, so a tap
// is any whole-row shift; B (the weight tile) is read by the tensor cores
// from shared memory through a descriptor (mma.cuh's swizzled tiles, the
// stage bases 1024-byte aligned), a conv1d's copied by TMA in that very
// swizzle (weight_map: one thread's instruction per tile instead of four
// cp.async per thread, -7% on a batch). Each step's wgmmas are waited for
// before the next barrier, so a stage is free once the barrier passes;
// other warpgroups on the SM fill the tensor cores meanwhile. A conv1d's
// wide tile (kInFlightStages) instead reads A from the window by descriptor
// too (the tap a shift of the start row) and leaves each step's wgmmas in
// flight while the next step passes its barrier and waits for its copies
// (+3% on a batch).
constexpr int kWgmmaThreadsPerGroup = 128;
template <int kN>
constexpr int kWeightStageHalves = kN * kBK;  // 16 KB at kN 128

// The wgmma kernels' windows come by TMA: `copies` boxes of `rows` steps
// (a box holds at most 256; with several, a multiple of 8, so that each
// starts on a 1024-byte boundary, where the swizzle repeats) into 128-byte
// rows in wgmma's swizzle, each window on a 1024-byte boundary.
struct WindowBoxes {
    int copies, rows;
    __host__ __device__ explicit WindowBoxes(int window_rows)
        : copies((window_rows + 255) / 256),
          rows(copies == 1 ? window_rows : round_up((window_rows + copies - 1) / copies, 8)) {}
    __host__ __device__ int halves() const {
        return round_up(copies * rows * kBK, kSwizzleAlign / 2);
    }
};

// A raw input's window (ops::HalfInput) comes by TMA as it is, channels-first:
// a box of 64 channel rows of raw_box_rows(rows) steps, unswizzled, into one
// staging buffer after the one window, which the block's threads then fill
// from it (transform_window). A box must start on a 16-byte boundary of
// its rows (else the copy is an illegal instruction): it starts (8 - pad %
// 8) % 8 steps before the window (whose first step is t0 - pad, t0 a
// multiple of 64), and holds up to 7 steps more than it; its rows are 8
// mod 16 steps long (the transform's loads then hit 32 banks).
__host__ __device__ inline int raw_box_rows(int window_rows) {
    return (window_rows + 7 + 7) / 16 * 16 + 8;
}
__host__ __device__ inline int raw_staging_halves(int window_rows) {
    return round_up(kBK * raw_box_rows(window_rows), kSwizzleAlign / 2);
}

// kRawX: one window and the raw input's staging buffer instead of two
// windows, then the ld input channels' ChannelApply.
template <int kGroups, int kN, bool kRawX = false, int kDepth = kStages>
size_t wgmma_smem_bytes(int halo, int ld) {
    const int rows = 64 * kGroups + halo;
    const WindowBoxes boxes(rows);
    const size_t windows = kRawX ? size_t(boxes.halves()) + size_t(raw_staging_halves(rows))
                                 : size_t(window_buffers(halo)) * boxes.halves();
    const size_t applies = kRawX ? sizeof(ChannelApply) * size_t(ld) : 0;
    return std::max(staged_tile_bytes<64 * kGroups, kN>(),
                    kSwizzleAlign + applies +
                        sizeof(__half) * (size_t(kDepth) * kWeightStageHalves<kN> + windows));
}

// Weight stages of the wgmma kernels: kStages, or four where each step's
// MMAs stay in flight over the next step's barrier and copies (a stage is
// then refilled two steps after its last reader, which the wait one step
// later has seen done).
constexpr int kInFlightStages = 4;

// kRawX: chunk c's raw input (the staging buffer: channel rows of box_rows
// steps, window row r at step lead + r, window step 0 at input step `first`)
// into the window as adain_half_rows would have written it: each channel's
// AdaIN + Snake (ChannelApply, rounded operands' sine) in fp32, rounded to
// FP16 pairs, rows outside [0, Tin) zero (the conv's padding); channel pair
// p of row r at word p of the row in the 128-byte swizzle. apply: the
// chunk's first channel's (in shared memory). A unit (a thread's, or two) is
// a channel pair p and a row offset o, at rows r0 + 16 i and the next, r0 =
// 2 o - lead % 2: a row pair is one 4-byte load per channel (from an even
// staging row; a row -1 or `rows` is loaded, not stored). Unit 32 w + l
// takes o = l % 8, p = 4 (2 (w / 2) + (o / 4 ^ w % 2)) + l / 8: a warp's
// loads hit 32 banks (eight words of four channel rows, box_rows 8 mod 16),
// and so do its stores (the swizzle chunk (p / 4) ^ (r % 8) takes eight
// values, p % 4 four), r % 8 fixed per unit. The rows outside [0, Tin) come
// from TMA as zeros, are transformed like the others, then overwritten by
// the same thread (blocks at either end only): no test per row in the loop.
// (~12 instructions per value, where a row at a time took ~13.)
template <int kThreads>
__device__ void transform_window(__half* window, const __half* staging, int box_rows, int lead,
                                 int rows, int first, int Tin, const ChannelApply* apply) {
    constexpr int kUnits = kBK / 2 * 8, kRowWords = kBK / 2;
    static_assert(kUnits % kThreads == 0, "whole units per thread");
    auto* const words = reinterpret_cast<__half2*>(window);
    const int channel_words = box_rows / 2;
    const bool ends = first < 0 || first + rows > Tin;  // (the block's)
#pragma unroll
    for (int u = int(threadIdx.x); u < kUnits; u += kThreads) {
        const int w = u / 32, l = u % 32, o = l % 8;
        const int pair = 4 * (2 * (w / 2) + ((o / 4) ^ (w % 2))) + l / 8;
        const ChannelApply f0 = apply[2 * pair], f1 = apply[2 * pair + 1];
        const int r0 = 2 * o - lead % 2;
        const auto* x0 = reinterpret_cast<const __half2*>(staging) + 2 * pair * channel_words +
                         lead / 2 + o;
        const __half2* x1 = x0 + channel_words;
        // Row r's word of the pair (r % 8 as a two's complement r & 7).
        auto word = [&](int r) { return r * kRowWords + ((pair / 4) ^ (r & 7)) * 4 + pair % 4; };
        // (row r0 may be -1: its pointer is formed, never stored through)
        __half2* y0 = words + word(r0);
        __half2* y1 = words + word(r0 + 1);
        constexpr Activation kSnake = Activation::kSnake;
        // One pair per iteration: the accumulators are live under the
        // transform, and at the 128-register cap an unrolled loop recomputed
        // its store addresses (two pairs at once, loads first: no faster).
#pragma unroll 1
        for (int r = r0; r < rows; r += 16, x0 += 8, x1 += 8, y0 += 16 * kRowWords,
                 y1 += 16 * kRowWords) {
            const float2 a = __half22float2(*x0), b = __half22float2(*x1);
            const float2 lo = make_float2(f0.apply<kSnake, true>(a.x, 0.f),
                                          f1.apply<kSnake, true>(b.x, 0.f));
            const float2 hi = make_float2(f0.apply<kSnake, true>(a.y, 0.f),
                                          f1.apply<kSnake, true>(b.y, 0.f));
            if (r >= 0) *y0 = __float22half2_rn(lo);
            if (r + 1 < rows) *y1 = __float22half2_rn(hi);
        }
        if (ends) {
            for (int r = r0; r < rows; r += 16) {
                for (int row = max(r, 0); row < min(r + 2, rows); ++row) {
                    const int t = first + row;
                    if (t < 0 || t >= Tin) words[word(row)] = __float2half2_rn(0.f);
                }
            }
        }
    }
}

// wgmma exists in sm_90a device code only (the kernel's body too: other
// targets build an empty kernel, never launched).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int kN>
__device__ void wgmma_m64k16(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t b_desc) {
    static_assert(kN == kCoutTile || kN == kNarrowCoutTile, "the B widths above");
    if constexpr (kN == kCoutTile) {
        wgmma_m64n128k16(d, a, b_desc);
    } else {
        wgmma_m64n32k16(d, a, b_desc);
    }
}
#endif

// Two blocks of two warpgroups per SM (at most 128 registers per thread),
// or three of one (their shared memory's limit). kN: the block's GEMM rows
// (kCoutTile, or kNarrowCoutTile for a conv1d of few output channels).
// kInBlock (a conv1d on a GPU shared with other lanes, two warpgroups): the
// plan's split reduction walked in one block, each split's sums into the
// accumulators from zero, then added to `total` in split order, as the
// split sum kernel adds them (one block per SM: `total` takes 64 more
// registers than two blocks could have).
// kRawX (a conv1d of one split): the input raw (ops::HalfInput), x_apply
// its channels' parameters, x_map its raw map; every chunk's window made
// by the block from its staged copy (transform_window), the next chunk's
// while the chunk's last step's MMAs run.
// kDepth: weight stages; kInFlightStages for MMAs in flight (a conv1d's
// wide tile of two warpgroups).
template <int kGroups, bool kPhases, int kN, bool kInBlock = false, bool kHalfOut = false,
          bool kRawX = false, int kDepth = kStages>
__global__ void __launch_bounds__(kGroups * kWgmmaThreadsPerGroup,
                                  kGroups == 1 ? 3 : (kInBlock ? 1 : 2))
    conv1d_wgmma_kernel(const ConvArgs a, const __grid_constant__ CUtensorMap w_map,
                        const __grid_constant__ CUtensorMap x_map, const ChannelApply* x_apply) {
    static_assert(!kRawX || (!kPhases && !kInBlock), "a raw input: a conv1d of one split");
    await_producers();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // A conv1d's weight tiles come by TMA (weight_map): one thread issues a
    // step's tile, counted in on the stage's barrier, which every thread
    // waits on before its MMAs (a stage is refilled only after the step
    // barrier that follows its last reader's wgmma wait, as with cp.async).
    // A transposed conv's tile interleaves its phases' rows: cp.async, and
    // w_map unused.
    // The windows come by TMA too (window_map: every kernel), on a barrier
    // per window buffer that the chunk's first step waits on.
    constexpr bool kInFlight = kDepth == kInFlightStages;
    static_assert(!kInFlight || (kGroups == 2 && !kPhases && kN == kCoutTile),
                  "MMAs in flight: a conv1d's wide tile of two warpgroups");
    __shared__ uint64_t weights_landed[kDepth];
    __shared__ uint64_t window_landed[window_buffers(0)];  // kRawX: [0] the staging buffer's
    uint32_t parities = 0;         // bit s: the parity of stage s's next phase
    uint32_t window_parities = 0;  // bit b: the same for window buffer b
    if (threadIdx.x == 0) {
        if constexpr (!kPhases) {
            for (int s = 0; s < kDepth; ++s) mbarrier_init(&weights_landed[s], 1);
        }
        for (int b = 0; b < window_buffers(0); ++b) mbarrier_init(&window_landed[b], 1);
        fence_mbarrier_init();
    }
    __syncthreads();
    constexpr int kTile = 64 * kGroups;
    constexpr int kThreads = kGroups * kWgmmaThreadsPerGroup;
    extern __shared__ uint4 smem_vec[];
    __half* const w_smem = swizzle_aligned(smem_vec);
    __half* const win_smem = w_smem + kDepth * kWeightStageHalves<kN>;
    const int window_rows = kTile + a.dilation * (a.K - 1);
    const WindowBoxes boxes(window_rows);
    const BlockRows<kPhases, kN> block_rows(a);
    const int t0 = blockIdx.x * kTile;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    // Warp w holds time rows 16 w .. 16 w + 15 of the tile (its quarter of
    // its warpgroup's m64), as ldmatrix.x4 fragments: rows lane % 16, k
    // half lane / 16, the 16-byte piece of row r at piece ^ (r % 8).
    const int a_row = warp * 16 + lane % 16, a_piece = lane / 16;

    float d[kN / 2] = {};
    [[maybe_unused]] float total[kInBlock ? kN / 2 : 1] = {};
    [[maybe_unused]] const int chunks = reduction_chunks(a.ld, a.x_lo != nullptr);
    // kRawX: chunk c's raw input into the staging buffer (thread 0), and
    // from there into the window (every thread, once it has landed).
    [[maybe_unused]] __half* const staging = win_smem + boxes.halves();
    // (every input channel's ChannelApply, copied in once: no load latency
    // in a transform)
    [[maybe_unused]] auto* const applies =
        reinterpret_cast<ChannelApply*>(staging + raw_staging_halves(window_rows));
    [[maybe_unused]] const int box_rows = raw_box_rows(window_rows), lead = (8 - a.pad % 8) % 8;
    [[maybe_unused]] auto stage_raw = [&](int c) {
        mbarrier_arrive_expect_tx(&window_landed[0], kBK * box_rows * sizeof(__half));
        tma_load_3d(staging, x_map, &window_landed[0], t0 - a.pad - lead, c * kBK, 0);
    };
    [[maybe_unused]] auto make_window = [&](int c) {
        mbarrier_wait(&window_landed[0], window_parities & 1);
        window_parities ^= 1;
        transform_window<kThreads>(win_smem, staging, box_rows, lead, window_rows, t0 - a.pad,
                                   a.Tin, applies + c * kBK);
    };
    if constexpr (kRawX) {
        if (threadIdx.x == 0) stage_raw(0);  // in flight with the first weight tiles
        // (published by the pipeline's first barrier)
        constexpr int kVecs = sizeof(ChannelApply) / sizeof(float4);
        const auto* from = reinterpret_cast<const float4*>(x_apply);
        auto* to = reinterpret_cast<float4*>(applies);
        for (int i = int(threadIdx.x); i < a.ld * kVecs; i += kThreads) to[i] = from[i];
    }
    reduction_pipeline<true, kInBlock, kDepth, !kPhases && !kRawX>(
        a,
        [&](int c, int k, int stage, int buffer) {
            __half* const w_stage = w_smem + stage * kWeightStageHalves<kN>;
            const int ci0 = Chunk(a, c).ci0;  // (thread 0's copies)
            if constexpr (kPhases) {
                load_weights<kThreads, true>(w_stage, a, block_rows, k, c);
            } else if (threadIdx.x == 0) {
                // Chunk c's weight part (split: hi, lo, hi) and channels.
                const int part = a.w_lo != nullptr && c % 3 == 1 ? 1 : 0;
                mbarrier_arrive_expect_tx(&weights_landed[stage],
                                          kWeightStageHalves<kN> * sizeof(__half));
                tma_load_4d(w_stage, w_map, &weights_landed[stage], ci0, k, block_rows.c0, part);
            }
            if (!kRawX && k == 0 && threadIdx.x == 0) {
                // Chunk c's input part (split: hi, hi, lo) and channels.
                const int part = a.x_lo != nullptr && c % 3 == 2 ? 1 : 0;
                __half* const window = win_smem + buffer * boxes.halves();
                mbarrier_arrive_expect_tx(&window_landed[buffer],
                                          boxes.copies * boxes.rows * kBK * sizeof(__half));
                for (int i = 0; i < boxes.copies; ++i) {
                    tma_load_3d(window + i * boxes.rows * kBK, x_map, &window_landed[buffer], ci0,
                                t0 - a.pad + i * boxes.rows, part);
                }
            }
        },
        [&](int stage, int buffer, int k, int c) {
            if constexpr (!kPhases) {
                mbarrier_wait(&weights_landed[stage], (parities >> stage) & 1);
                parities ^= 1u << stage;
            }
            if constexpr (kRawX) {
                if (c == 0 && k == 0) {
                    make_window(0);
                    fence_async_proxy();  // (wgmma reads it by descriptor)
                    __syncthreads();
                }
                // The staging buffer is free (chunk c's window is made).
                if (k == 0 && threadIdx.x == 0 && c + 1 < chunks) stage_raw(c + 1);
            } else if (k == 0) {
                mbarrier_wait(&window_landed[buffer], (window_parities >> buffer) & 1);
                window_parities ^= 1u << buffer;
            }
            // kInFlight: A by descriptor, the warpgroup's 64 rows of the window
            // shifted by the tap, and the MMAs left in flight; but a raw
            // input's step under which the next chunk's window is made takes A
            // by ldmatrix (the window is rewritten while its MMAs run) and
            // waits for them. Advancing K by 16 halves is +32 bytes inside the
            // swizzled rows.
            const bool makes_window = kRawX && k == a.K - 1 && c + 1 < chunks;
            const bool a_by_descriptor = kInFlight && !makes_window;
            const __half* const window = win_smem + (kRawX ? 0 : buffer) * boxes.halves();
            const uint32_t b_addr = smem_addr(w_smem + stage * kWeightStageHalves<kN>);
            uint32_t af[kBK / 16][4];
            if (!a_by_descriptor) {
                const int r = a_row + k * a.dilation;
#pragma unroll
                for (int kk = 0; kk < kBK / 16; ++kk) {
                    ldmatrix_x4(af[kk], window + r * kBK + ((2 * kk + a_piece) ^ (r % 8)) * 8);
                }
            }
            wgmma_fence();
            fence_accumulators(d);
            if constexpr (kInFlight) {
                if (a_by_descriptor) {
                    const uint32_t a_addr =
                        smem_addr(window + (warp / 4 * 64 + k * a.dilation) * kBK);
#pragma unroll
                    for (int kk = 0; kk < kBK / 16; ++kk) {
                        wgmma_m64n128k16(d, swizzled_descriptor(a_addr + kk * 32),
                                         swizzled_descriptor(b_addr + kk * 32));
                    }
                }
            }
            if (!a_by_descriptor) {
#pragma unroll
                for (int kk = 0; kk < kBK / 16; ++kk) {
                    wgmma_m64k16<kN>(d, af[kk], swizzled_descriptor(b_addr + kk * 32));
                }
            }
            wgmma_commit();
            if (makes_window) {
                // The next chunk's window, under this step's MMAs, once every
                // warp has its fragments of this one (kInFlight: and the step
                // before, which read it by descriptor, is done).
                if constexpr (kInFlight) wgmma_wait<1>();
                __syncthreads();
                make_window(c + 1);
            }
            // The MMAs stay in flight (kInFlight, A by descriptor) but where
            // the sums are read (kInBlock: a split's end) or a window would be
            // refilled before the step after next has waited for them (K 2).
            const bool split_end =
                kInBlock && k == a.K - 1 && ((c + 1) % a.chunks_per_split == 0 || c + 1 == chunks);
            if (split_end) {
                wgmma_wait<0>();
                fence_accumulators(d);
                if constexpr (kInBlock) {
#pragma unroll
                    for (int i = 0; i < kN / 2; ++i) {
                        total[i] += d[i];
                        d[i] = 0.f;
                    }
                }
            } else if (a_by_descriptor && a.K >= 3) {
                wgmma_wait<1>();
            } else {
                wgmma_wait<0>();
            }
            fence_accumulators(d);
        });

    if constexpr (kInFlight) {
        wgmma_wait<0>();
        fence_accumulators(d);
    }
    // d[4 j + 2 h + e]: time row 16 w + g + 8 h, channel 8 j + 2 tq + e.
    float* const tile = staged_tile(smem_vec);
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float* row = tile + (8 * j + 2 * tq + e) * kStagedPitch<kTile> + warp * 16 + g;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = 4 * j + 2 * h + e;
                if constexpr (kInBlock) {
                    row[8 * h] = total[i];
                } else {
                    row[8 * h] = d[i];
                }
            }
        }
    }
    if constexpr (kPhases) {
        static_assert(kN == kCoutTile, "a transposed conv's phases take the wide tile");
        store_phases_tile<kTile, kThreads, kHalfOut>(a, tile, t0, block_rows);
    } else {
        store_staged_tile<kTile, kThreads, kN, kHalfOut>(a, tile, t0, block_rows.c0);
    }
#else
    static_cast<void>(a);
    static_cast<void>(w_map);
    static_cast<void>(x_map);
#endif
}

}  // namespace
}  // namespace kokoro::ops::igemm
