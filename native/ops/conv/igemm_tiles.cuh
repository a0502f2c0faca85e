// The implicit-GEMM tensor-core conv's shared device code: the reduction
// chunks' operands, a block's rows, the operand copies, the reduction
// pipeline, the output map and the epilogue (stores, residuals,
// statistics). Its tile sizes and ConvArgs: igemm_traits.h.
// Included after igemm_traits.h by the kernels' translation units
// (conv_igemm_*.cu) and conv_tensor_core.cu (the split sums' stores).
#pragma once

namespace kokoro::ops::igemm {
namespace {

// The implicit-GEMM conv on the tensor cores (conv_tensor_core.cu's header
// comment): two kernels of one design, mma.sync (sm_80 on) and wgmma
// (sm_90a), sharing the operand copies, the reduction pipeline, the launch
// plan and the split sums.

// The residual at `at` (residual set), as fp32.
__device__ float residual_at(const ConvArgs& a, int64_t at) {
    return a.residual_is_half ? __half2float(a.residual_half[at]) : a.residual[at];
}

// The pitch of y's or the residual's rows of `len` values: FP16 ones at
// half_channels_pitch (ops.h).
__host__ __device__ inline int64_t row_pitch(int len, bool half) {
    return half ? half_channels_pitch(len) : len;
}

// Reduction chunk c: the operands it multiplies and its first channel.
// Split: chunks 3 j, 3 j + 1, 3 j + 2 are x_hi w_hi, x_hi w_lo, x_lo w_hi
// over channels 64 j .. 64 j + 63 (x_lo w_lo, ~2^-22 relative, is left out).
struct Chunk {
    const __half* x;
    const __half* w;
    int ci0;
    __device__ Chunk(const ConvArgs& a, int c) {
        if (a.x_lo == nullptr) {
            x = a.x;
            w = a.w;
            ci0 = c * kBK;
        } else {
            const int part = c % 3;
            x = part == 2 ? a.x_lo : a.x;
            w = part == 1 ? a.w_lo : a.w;
            ci0 = c / 3 * kBK;
        }
    }
};

// This block's rows of the GEMM (kN of them). A conv1d's are channels c0 ..
// c0 + kN - 1. With phases (kPhases), row r is phase r % phases of channel
// c0 + r / phases: a block holds every phase of kN / phases channels, so its
// epilogue writes each channel's interleaved outputs as one contiguous run
// (a block per phase wrote 4-byte stores at the stride's pitch, each its
// own L2 sector, and re-read the residual's sectors per phase).
template <bool kPhases, int kN = kCoutTile>
struct BlockRows {
    int c0, channels;  // the first channel, channels per block
    __device__ explicit BlockRows(const ConvArgs& a) : channels(kPhases ? kN / a.phases : kN) {
        c0 = int(blockIdx.y) * channels;
    }
    // The weight row of GEMM row r (phase-major weight rows p Cout + c), -1
    // for a row past the block's channels or Cout.
    __device__ int weight_row(const ConvArgs& a, int r) const {
        const int cl = kPhases ? r / a.phases : r, p = kPhases ? r - cl * a.phases : 0;
        return cl < channels && c0 + cl < a.Cout ? p * a.Cout + c0 + cl : -1;
    }
};

// Input rows first .. first + rows - 1 of chunk c's channels into padded
// shared rows; zero outside [0, Tin) and past ld. Thread i copies piece i %
// 8 of rows i / 8, i / 8 + kThreads / 8, ...: its column, and so most of
// its address, is fixed (the copies are issued every step: few
// instructions each).
template <int kThreads>
__device__ void load_window(__half* dst, const ConvArgs& a, int first, int rows, int c) {
    static_assert(kThreads % kPieces == 0, "a thread keeps one column");
    constexpr int kRowStep = kThreads / kPieces;
    const Chunk chunk(a, c);
    const int col = threadIdx.x % kPieces * 8, ci = chunk.ci0 + col;
    const bool col_valid = ci < a.ld;
    const int r0 = int(threadIdx.x) / kPieces;
    int64_t src = int64_t(first + r0) * a.ld + ci;  // element offset of row r's piece
    for (int r = r0; r < rows; r += kRowStep, src += int64_t(kRowStep) * a.ld) {
        const int t = first + r;
        const bool valid = col_valid && t >= 0 && t < a.Tin;
        cp_async16(dst + r * kPitch + col, valid ? chunk.x + src : a.x, valid);
    }
}

// The weight tile of `rows` (kN of them), tap k, chunk c's 64 channels into shared
// rows: padded (mma.sync reads it by ldmatrix), or 128 dense bytes per row
// with piece p of row r at p ^ (r % 8) (wgmma's 128-byte swizzle). Thread i
// copies piece i % 8 of rows i / 8 + j kThreads / 8, a fixed count.
template <int kThreads, bool kSwizzle128, bool kPhases, int kN>
__device__ void load_weights(__half* dst, const ConvArgs& a, const BlockRows<kPhases, kN>& rows,
                             int k, int c) {
    constexpr int kRow = kSwizzle128 ? kBK : kPitch;
    constexpr int kRowStep = kThreads / kPieces;
    static_assert(kThreads % kPieces == 0 && kN % kRowStep == 0, "whole rows per pass");
    const Chunk chunk(a, c);
    const int p = threadIdx.x % kPieces, ci = chunk.ci0 + p * 8;
    const int r0 = int(threadIdx.x) / kPieces;
    const bool col_valid = ci < a.ld;
    const int slot = kSwizzle128 ? p ^ (r0 % 8) : p;  // kRowStep % 8 == 0: the same per copy
    static_assert(kRowStep % 8 == 0, "one swizzle slot per thread");
    if constexpr (kPhases) {
        const int64_t tap = int64_t(a.K - 1 - k) * a.phases * a.Cout * a.ld + ci;
#pragma unroll
        for (int j = 0; j < kN / kRowStep; ++j) {
            const int r = r0 + j * kRowStep, w = rows.weight_row(a, r);
            const bool valid = col_valid && w >= 0;
            cp_async16(dst + r * kRow + slot * 8,
                       valid ? chunk.w + tap + int64_t(w) * a.ld : a.w, valid);
        }
    } else {
        // Row r0 + j kRowStep's source ([Cout, K, ld]): one base, then a
        // fixed stride per copy.
        const int64_t w_pitch = int64_t(a.K) * a.ld;
        const int64_t src = int64_t(k) * a.ld + (rows.c0 + r0) * w_pitch + ci;
#pragma unroll
        for (int j = 0; j < kN / kRowStep; ++j) {
            const int r = r0 + j * kRowStep;
            const bool valid = col_valid && rows.c0 + r < a.Cout;
            cp_async16(dst + r * kRow + slot * 8,
                       valid ? chunk.w + src + j * kRowStep * w_pitch : a.w, valid);
        }
    }
}

// Window buffers of a block (reduction_pipeline): a chunk's window is issued
// two steps ahead into the buffer of the chunk before it, but with one tap
// (no halo) the step after next opens the chunk after next, whose window
// would land in the buffer the current step reads: three buffers then.
__host__ __device__ constexpr int window_buffers(int halo) { return halo == 0 ? 3 : 2; }

// The reduction walk of one block: steps (chunk c, tap k), chunks outer,
// taps inner, over this split's chunks (kInBlock: over all of them, the
// splits kept apart by compute). cp.async group s holds step s's
// weight tile (stage s % kDepth; the wgmma conv1d's comes by TMA on its own
// barrier) and, when s opens a chunk, its window (the chunks' windows take
// the window_buffers in turn; the wgmma kernels' by TMA):
// issue(c, k, stage, buffer) issues them. compute(stage, buffer, k, c) runs
// step s once group s has landed for every thread; the barrier before it
// also frees stage (s + 2) % kDepth and the window buffer of the chunk step
// s + 2 opens, if it opens one: with three stages their last readers are
// steps <= s - 1, whose MMAs compute has waited for; with four, steps <= s -
// 2, whose MMAs compute may leave in flight for one step (for the window,
// K >= 3). Steps 0 and 1 are issued up front.
// kAsyncProxy: compute reads shared memory through the async proxy (wgmma),
// which must be fenced against the copies. kOneTap: the conv may have one
// tap (a conv1d's kernel; a transposed conv or a raw input has two or more,
// so two windows, chosen by the chunk's parity: no registers for more).
template <bool kAsyncProxy, bool kInBlock = false, int kDepth = kStages, bool kOneTap = false,
          class Issue, class Compute>
__device__ void reduction_pipeline(const ConvArgs& a, Issue issue, Compute compute) {
    const int all = reduction_chunks(a.ld, a.x_lo != nullptr);
    const int c_first = kInBlock ? 0 : int(blockIdx.z) * a.chunks_per_split;
    const int chunks = kInBlock ? all : min(all, c_first + a.chunks_per_split) - c_first;
    const int steps = chunks * a.K;
    [[maybe_unused]] const int windows = window_buffers(a.dilation * (a.K - 1));
    struct Step {
        int c, k;
        int window;  // kOneTap: the chunk's window buffer
        __device__ int buffer() const { return kOneTap ? window : c % 2; }
    };
    const auto advance = [&](Step& step) {
        if (++step.k == a.K) {
            step.k = 0;
            ++step.c;
            if constexpr (kOneTap) step.window = step.window + 1 == windows ? 0 : step.window + 1;
        }
    };
    Step next{c_first, 0, 0};  // the step issued last
    issue(next.c, next.k, 0, next.buffer());
    cp_async_commit();
    advance(next);
    if (steps > 1) issue(next.c, next.k, 1, next.buffer());
    cp_async_commit();
    Step now{c_first, 0, 0};  // the step computed
    for (int s = 0; s < steps; ++s) {
        cp_async_wait<1>();
        if (kAsyncProxy) fence_async_proxy();
        __syncthreads();
        advance(next);
        if (s + 2 < steps) issue(next.c, next.k, (s + 2) % kDepth, next.buffer());
        cp_async_commit();
        compute(s % kDepth, now.buffer(), now.k, now.c);
        advance(now);
    }
}

// v into y32[at], or (kHalfOut, y_half not null) rounded into y_half[at];
// returns v as stored.
template <bool kHalfOut>
__device__ float store_value(float* y32, __half* y_half, int64_t at, float v) {
    if constexpr (kHalfOut) {
        if (y_half != nullptr) {
            const __half h = __float2half_rn(v);
            y_half[at] = h;
            return __half2float(h);
        }
    }
    y32[at] = v;
    return v;
}

// Where a conv1d block's rows c0 + r (r: row within the block) go: y,
// scaled, with bias and residual, or with several splits the split's
// partial sum alone (split_sum_kernel finishes). Row r's column t is at
// (c0 + r) y_pitch + t in y, (c0 + r) residual_pitch + t in the residual.
// kHalfOut: y itself (not a split's partial sum) goes out as FP16.
template <bool kHalfOut>
struct Output {
    float* y;
    __half* y_half;  // kHalfOut, one split: y's FP16 (y null)
    const float* residual;  // FP16 where residual_is_half
    bool residual_is_half;
    int live_rows, Tout;
    int y_pitch, residual_pitch;  // row pitches (row_pitch)
    float scale, out_scale;
    __device__ Output(const ConvArgs& a, int c0)
        : y(a.partial != nullptr ? a.partial + int64_t(blockIdx.z) * a.Cout * a.Tout
                                 : (kHalfOut ? nullptr : a.y)),
          y_half(kHalfOut && a.partial == nullptr ? a.y_half : nullptr),
          residual(a.partial != nullptr ? nullptr : a.residual),
          residual_is_half(a.residual_is_half),
          live_rows(a.Cout - c0),
          Tout(a.Tout),
          y_pitch(int(row_pitch(a.Tout, y_half != nullptr))),
          residual_pitch(int(row_pitch(a.Tout, a.residual_is_half))),
          scale(a.partial != nullptr ? 1.f : a.w_scale),
          out_scale(a.partial != nullptr ? 1.f : a.out_scale) {}
    // (scale * sum + bias + residual) * out_scale.
    __device__ float value(float sum, float bias, float res) const {
        return (fmaf(sum, scale, bias) + res) * out_scale;
    }
    // v stored at `at`; returns it as stored.
    __device__ float store(int64_t at, float v) const {
        return store_value<kHalfOut>(y, y_half, at, v);
    }
};

// Statistics partials per channel: one per time tile (gridDim.x: the conv
// kernel's), then one for the reflection pad's element.
__device__ int64_t stats_index(const ConvArgs& a, int c, int part) {
    return (int64_t(c) * (int(gridDim.x) + a.y_left) + part) * kPartialDoubles;
}

// Channel c's pad element, y[c, 0] = the value at t = 1 before its
// residual, u, plus the residual at y[c, 0] (kHalfOut: stored as FP16);
// with statistics, its own partial (the channel's last), of the value as
// stored.
template <bool kHalfOut>
__device__ void store_pad(const ConvArgs& a, int c, float u) {
    const int len = a.y_len + a.y_left;
    const float r =
        a.residual != nullptr ? residual_at(a, c * row_pitch(len, a.residual_is_half)) : 0.f;
    const float v = store_value<kHalfOut>(a.y, kHalfOut ? a.y_half : nullptr,
                                          c * row_pitch(len, kHalfOut), u + r);
    if (a.stats != nullptr) {
        double* s = a.stats + stats_index(a, c, int(gridDim.x));
        s[0] = 1.0;
        s[1] = v;
        s[2] = 0.0;
    }
}

// The epilogue, staged: once the reduction is done (its shared buffers are
// free), every thread writes its accumulators into a channel-major fp32
// tile in shared memory, then each warp stores whole channel rows, lane l
// at time steps l, l + 32, ...: coalesced stores (and residual loads) and
// one bias load per row, where storing the accumulator fragments directly
// scatters 4-byte stores over 8 rows per instruction (half the epilogue's
// sectors wasted on the odd row pitches of the generator) with a bounds
// test and a bias load per element. The pitch kTile + 4 makes the wgmma
// layout's tile writes conflict-free (mma.sync's: two-way). With stats, each
// row's warp also writes the row's statistics partial over the tile's time
// steps (the values as stored).
template <int kTile>
constexpr int kStagedPitch = kTile + 4;
template <int kTile, int kN = kCoutTile>
constexpr size_t staged_tile_bytes() {
    return sizeof(float) * size_t(kN) * kStagedPitch<kTile>;
}

// Waits for the block to leave the reduction (every copy landed, every
// shared read done); the tile then overlays the pipeline's buffers.
__device__ float* staged_tile(void* smem) {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
    return reinterpret_cast<float*>(smem);
}

// After the thread's accumulators are in the tile: rows co0 .. co0 + kN - 1
// of y (or the split's partial) from it, warp w taking rows w, w + kWarps, ...
// Every residual value and bias the warp adds is loaded before the barrier,
// all in flight together (64 values per thread, in the registers the
// accumulators left): one memory latency per block, where loading per row
// would wait out one per row (in place, residual == y, no load can move
// above an earlier store). Lane l holds the bias of the warp's row l. The
// values as stored replace the residuals in those registers, and the
// statistics then take all the warp's rows at once (warp_partials).
template <int kTile, int kThreads, int kN = kCoutTile, bool kHalfOut = false>
__device__ void store_staged_tile(const ConvArgs& a, const float* tile, int t0, int c0) {
    constexpr int kWarps = kThreads / 32, kRows = kN / kWarps, kPerLane = kTile / 32;
    static_assert(kRows <= 32, "a lane holds one row's bias");
    const Output<kHalfOut> out(a, c0);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int lane_channel = c0 + warp + kWarps * lane;
    const float lane_bias =
        lane < kRows && a.partial == nullptr && a.b != nullptr && lane_channel < a.Cout
            ? a.b[lane_channel]
            : 0.f;
    // Row r's column t0 + lane + 32 i at at0 + r row_step + 32 i: one 64-bit
    // offset stepped per row (issue slots: per-element index math was most
    // of the epilogue's instructions); column i inside y where 32 i < cols.
    // The residual's likewise, at its pitch.
    const int64_t row_step = int64_t(kWarps) * out.y_pitch;
    const int64_t at0 = int64_t(c0 + warp) * out.y_pitch + t0 + lane;
    const int cols = out.Tout - t0 - lane;
    // The residuals, then y. An FP16 residual is loaded as its raw bits and
    // widened after the barrier: a conversion after each load would wait for
    // it, one memory latency per value instead of one per block.
    float v[kRows][kPerLane];
    auto load_residuals = [&](const auto* residual, auto as_float) {
        const int64_t step = int64_t(kWarps) * out.residual_pitch;
        int64_t at = int64_t(c0 + warp) * out.residual_pitch + t0 + lane;
#pragma unroll
        for (int r = 0; r < kRows; ++r, at += step) {
            const bool row_inside = warp + kWarps * r < out.live_rows;
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) {
                v[r][i] = residual != nullptr && row_inside && 32 * i < cols
                              ? as_float(residual[at + 32 * i])
                              : 0.f;
            }
        }
    };
    if (out.residual_is_half) {
        load_residuals(reinterpret_cast<const unsigned short*>(out.residual),
                       [](unsigned short bits) { return __uint_as_float(bits); });
    } else {
        load_residuals(out.residual, [](float x) { return x; });
    }
    __syncthreads();
    if (out.residual_is_half) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) {
                v[r][i] = __half2float(
                    __ushort_as_half(static_cast<unsigned short>(__float_as_uint(v[r][i]))));
            }
        }
    }
    int64_t at = at0;
#pragma unroll
    for (int r = 0; r < kRows; ++r, at += row_step) {
        const int row = warp + kWarps * r;
        const float bias = __shfl_sync(0xffffffffu, lane_bias, r);
        if (row >= out.live_rows) break;  // rows ascend: the rest are past Cout
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            v[r][i] = out.value(tile[row * kStagedPitch<kTile> + lane + 32 * i], bias, v[r][i]);
            if (32 * i < cols) v[r][i] = out.store(at + 32 * i, v[r][i]);
        }
    }
    if (a.stats == nullptr) return;
    // The warp's rows r: channels c0 + warp + kWarps r, those before live_rows.
    const int rows = (out.live_rows - warp + kWarps - 1) / kWarps;
    warp_partials(v, out.Tout - t0, a.stats + stats_index(a, c0 + warp, int(blockIdx.x)),
                  stats_index(a, kWarps, 0), rows);
}

// The phases' epilogue (transposed convs): with several splits, the
// split's sums in the GEMM's layout ([phases, Cout, Tout]); else per
// channel (a warp each) its outputs t, t + shift = q phases + p for this
// tile's columns q, as one contiguous run: y[c, y_left + t] = scale * sum
// + bias + residual (kHalfOut: stored as FP16, the residual fp32), the pad
// element, and the statistics partial over the run of the values as stored
// (two passes over them, kept in the staged tile). Residual values load
// kBatch at a time, all in flight (in place, residual == y, the compiler
// could not hoist them above the stores).
template <int kTile, int kThreads, bool kHalfOut>
__device__ void store_phases_tile(const ConvArgs& a, float* tile, int t0,
                                  const BlockRows<true>& rows) {
    constexpr int kWarps = kThreads / 32, kBatch = 8;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, s = a.phases;
    __syncthreads();  // the tile is complete
    if (a.partial != nullptr) {
        float* part = a.partial + int64_t(blockIdx.z) * s * a.Cout * a.Tout;
        for (int r = warp; r < kCoutTile; r += kWarps) {
            const int cl = r / s, p = r - cl * s;
            if (cl >= rows.channels || rows.c0 + cl >= a.Cout) break;  // rows ascend
            float* dst = part + (int64_t(p) * a.Cout + rows.c0 + cl) * a.Tout;
            for (int i = lane; i < kTile && t0 + i < a.Tout; i += 32) {
                dst[t0 + i] = tile[r * kStagedPitch<kTile> + i];
            }
        }
        return;
    }
    // This tile's outputs: t in [t_lo, t_hi); lane l starts at t_lo + l and
    // steps by 32, i.e. column q by 32 / s and phase p by 32 % s (carrying).
    const int t_lo = max(0, t0 * s - a.shift);
    const int t_hi = min(a.y_len, min(t0 + kTile, a.Tout) * s - a.shift);
    const int q_step = 32 / s, p_step = 32 - q_step * s;
    const int q_first = (t_lo + lane + a.shift) / s, p_first = t_lo + lane + a.shift - q_first * s;
    auto advance = [&](int& q, int& p) {
        p += p_step;
        q += q_step;
        if (p >= s) {
            p -= s;
            ++q;
        }
    };
    for (int cl = warp; cl < rows.channels && rows.c0 + cl < a.Cout; cl += kWarps) {
        const int c = rows.c0 + cl;
        const float bias = a.b != nullptr ? a.b[c] : 0.f;
        const int len = a.y_len + a.y_left;
        const int64_t y_row = c * row_pitch(len, kHalfOut) + a.y_left;
        const int64_t res_row = int64_t(c) * len + a.y_left;
        float* const sums = tile + cl * s * kStagedPitch<kTile>;  // [p][q - t0]
        int q = q_first, p = p_first;
        double sum = 0.0;
        for (int first = t_lo + lane; first < t_hi; first += 32 * kBatch) {
            float res[kBatch];
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int t = first + 32 * b;
                res[b] = a.residual != nullptr && t < t_hi ? a.residual[res_row + t] : 0.f;
            }
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int t = first + 32 * b;
                if (t < t_hi) {
                    float* at = sums + p * kStagedPitch<kTile> + (q - t0);
                    const float u = fmaf(*at, a.w_scale, bias);
                    const float v = store_value<kHalfOut>(a.y, kHalfOut ? a.y_half : nullptr,
                                                          y_row + t, u + res[b]);
                    if (t == 1 && a.y_left != 0) store_pad<kHalfOut>(a, c, u);
                    *at = v;  // kept for the statistics
                    sum += double(v);
                }
                advance(q, p);
            }
        }
        if (a.stats == nullptr) continue;
        sum = warp_sum(sum);
        const int n = max(0, t_hi - t_lo);
        const double mean = n > 0 ? sum / n : 0.0;
        double m2 = 0.0;
        q = q_first;
        p = p_first;
        for (int t = t_lo + lane; t < t_hi; t += 32) {
            const double d = double(sums[p * kStagedPitch<kTile> + (q - t0)]) - mean;
            m2 += d * d;
            advance(q, p);
        }
        m2 = warp_sum(m2);
        if (lane == 0) {
            double* out = a.stats + stats_index(a, c, blockIdx.x);
            out[0] = n;
            out[1] = sum;
            out[2] = m2;
        }
    }
}

}  // namespace
}  // namespace kokoro::ops::igemm
