// Normalisations: layer norm over the feature axis (time-major rows or
// channels-first columns), with the plain affine and AdaLayerNorm's style
// affine folded into the same pass; and AdaIN1d (instance norm over time per
// channel + style affine) with the following activation fused in.
//
// Statistics are two-pass (mean, then the mean of squared deviations), as the
// reference computes them; no E[x^2] - E[x]^2 cancellation. Rows: one warp
// per row. Channels-first: 32 time steps per block, 8 thread rows splitting
// the channels.
//
// AdaIN rows (time per channel) reach ~100k samples in the generator, so
// rows longer than one statistics block are split: pass 1 runs up to 64
// blocks per channel, each writing the count, sum and squared deviations
// about its own mean (double) to the caller's scratch; pass 2 tiles every row
// over many blocks, each combining its channel's partials in a fixed order
// (no atomics: bit-for-bit repeatable) before the fused affine + activation.
// Short rows take one fused block per channel. The half-rows variant (FP16
// time-major output for the tensor-core conv) runs pass 1 unless the
// tensor's producer handed over its partials (channel_stats.cuh), then one
// block per channel turns the partials into the channel's affine +
// activation parameters (channel_apply.cuh), then a transposing pass 2
// (half_rows.cuh) applies them; adain_apply stops before the pass, for a
// conv that applies them as it loads its windows (ops/conv/). Bodies move as
// float4 from each row's first 16-byte boundary; heads and tails go scalar.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kokoro/channel_apply.cuh"
#include "kokoro/channel_stats.cuh"
#include "kokoro/check.h"
#include "kokoro/half_rows.cuh"
#include "kokoro/launch.cuh"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

// (1 + style_gamma) * gamma * xhat + beta + style_beta, each term optional.
struct Affine {
    const float *gamma, *beta, *style_gamma, *style_beta;
    __device__ float operator()(float xhat, int c) const {
        float v = xhat;
        if (style_gamma != nullptr) v *= 1.f + style_gamma[c];
        if (gamma != nullptr) v *= gamma[c];
        if (beta != nullptr) v += beta[c];
        if (style_beta != nullptr) v += style_beta[c];
        return v;
    }
};

// One warp per row of x [rows, cols] (+ x_bias, when given, on every row).
// The row is read once into registers (kRowsMaxPerLane per lane, all loads
// in flight together): the rows are short (ALBERT's 768, the prosody's 512)
// and few (one per token), so the pass is latency bound, and three dependent
// sweeps over global memory cost three times its latency. Sums run in column
// order per lane, then the fixed shuffle tree.
constexpr int kRowsMaxPerLane = 32;
constexpr int kRowsMaxCols = 32 * kRowsMaxPerLane;
__global__ void layer_norm_rows_kernel(const float* x, const float* x_bias, float* y, int y_pitch,
                                       int rows, int cols, Affine affine, float eps) {
    await_producers();
    release_dependents();
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* xr = x + int64_t(row) * cols;
    float* yr = y + int64_t(row) * y_pitch;
    float v[kRowsMaxPerLane];
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kRowsMaxPerLane; ++i) {
        const int c = lane + 32 * i;
        v[i] = c < cols ? (x_bias != nullptr ? xr[c] + x_bias[c] : xr[c]) : 0.f;
        sum += v[i];
    }
    const float mean = warp_sum(sum) / float(cols);
    float sq = 0.f;
#pragma unroll
    for (int i = 0; i < kRowsMaxPerLane; ++i) {
        const float d = v[i] - mean;
        if (lane + 32 * i < cols) sq += d * d;
    }
    const float denom = sqrtf(warp_sum(sq) / float(cols) + eps);
#pragma unroll
    for (int i = 0; i < kRowsMaxPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < cols) yr[c] = affine((v[i] - mean) / denom, c);
    }
}

constexpr int kChannelSplit = 8;

// x [C, T] normalised over C at each t: threadIdx.x = time, threadIdx.y
// splits the channels; partial sums meet in shared memory.
__global__ void layer_norm_channels_kernel(const float* x, float* y, int C, int T, Affine affine,
                                           float eps) {
    await_producers();
    __shared__ float partial[kChannelSplit][32];
    const int t = blockIdx.x * 32 + threadIdx.x;
    const bool live = t < T;
    auto column_sum = [&](float v) {
        partial[threadIdx.y][threadIdx.x] = v;
        __syncthreads();
        float total = 0.f;
        for (int k = 0; k < kChannelSplit; ++k) total += partial[k][threadIdx.x];
        __syncthreads();
        return total;
    };
    float sum = 0.f;
    if (live) {
        for (int c = threadIdx.y; c < C; c += kChannelSplit) sum += x[int64_t(c) * T + t];
    }
    const float mean = column_sum(sum) / float(C);
    float sq = 0.f;
    if (live) {
        for (int c = threadIdx.y; c < C; c += kChannelSplit) {
            const float d = x[int64_t(c) * T + t] - mean;
            sq += d * d;
        }
    }
    const float denom = sqrtf(column_sum(sq) / float(C) + eps);
    if (!live) return;
    for (int c = threadIdx.y; c < C; c += kChannelSplit) {
        const int64_t i = int64_t(c) * T + t;
        y[i] = affine((x[i] - mean) / denom, c);
    }
}

constexpr int kAdainThreads = 256;
constexpr int kStatsChunk = 4096;  // elements per statistics block; longer rows are split
constexpr int kMaxParts = 64;      // statistics blocks per channel at most
constexpr int kApplyVecs = 512;    // float4s per apply block (2 per thread)

int stats_parts(int T) { return std::clamp((T + kStatsChunk - 1) / kStatsChunk, 1, kMaxParts); }

// One block's share of a row xr [T]: the row is a scalar head up to the first
// 16-byte boundary, a float4 body and a scalar tail; `part` of `parts` takes
// body vectors [v0, v1), the first part also the head, the last the tail.
struct Piece {
    int head, vecs, tail, v0, v1;
    bool first, last;

    __device__ Piece(const float* xr, int T, int part, int parts) {
        head = min(T, int((16 - reinterpret_cast<uintptr_t>(xr) % 16) % 16 / sizeof(float)));
        vecs = (T - head) / 4;
        tail = T - head - 4 * vecs;
        const int per = (vecs + parts - 1) / parts;
        v0 = min(vecs, part * per);
        v1 = min(vecs, v0 + per);
        first = part == 0;
        last = part == parts - 1;
    }
    __device__ int count() const { return 4 * (v1 - v0) + (first ? head : 0) + (last ? tail : 0); }
    // vec(i) for each 16-byte aligned body element i (4 at a time), scalar(i)
    // for each head / tail element, spread over the block's threads.
    template <typename Vec, typename Scalar>
    __device__ void visit(Vec vec, Scalar scalar) const {
        for (int v = v0 + int(threadIdx.x); v < v1; v += blockDim.x) vec(head + 4 * v);
        const int t = threadIdx.x;
        if (first && t < head) scalar(t);
        if (last && t < tail) scalar(head + 4 * vecs + t);
    }
};

// Block-wide sum over the piece of term(x), in double.
template <typename Term>
__device__ double piece_sum(const float* xr, const Piece& p, Term term, double* scratch) {
    double acc = 0.0;
    p.visit(
        [&](int i) {
            const float4 q = *reinterpret_cast<const float4*>(xr + i);
            acc += (term(q.x) + term(q.y)) + (term(q.z) + term(q.w));
        },
        [&](int i) { acc += term(xr[i]); });
    return block_sum(acc, scratch);
}

// Sum and sum of squared deviations from the piece's own mean (two passes;
// the second re-reads the piece from cache).
__device__ double2 piece_stats(const float* xr, const Piece& p, double* scratch) {
    const double sum = piece_sum(xr, p, [](float v) { return double(v); }, scratch);
    const int n = p.count();
    const double center = n > 0 ? sum / n : 0.0;
    const double m2 = piece_sum(
        xr, p,
        [center](float v) {
            const double d = double(v) - center;
            return d * d;
        },
        scratch);
    return make_double2(sum, m2);
}

struct AdainArgs {
    const float* x;
    float* y;
    int C, T;
    const float* style;
    Activation act;
    float slope;
    const float* alpha;
    bool vec_store;  // y's rows share x's 16-byte alignment
    // Snake's sine by the hardware approximation (__sinf, ~1e-6 absolute
    // here): for rounded FP16 half rows only, whose 11 bits it cannot
    // disturb; the accurate sinf (a range reduction of ~20 instructions per
    // element) made that pass issue-bound.
    bool approx_sine;
};

// An activation and its sine fixed at compile time, and the one place that
// maps a call's (act, approx_sine) to it: fn(ActivationKind<...>{}).
template <Activation kAct, bool kApproxSine>
struct ActivationKind {
    static constexpr Activation act = kAct;
    static constexpr bool approx_sine = kApproxSine;
};
// (Host code launches with it, device code applies with it: the execution
// space check is off for this one template, as it is for CUTLASS's.)
#pragma nv_exec_check_disable
template <class Fn>
__host__ __device__ auto with_activation(Activation act, bool approx_sine, Fn fn) {
    switch (act) {
        case Activation::kLeakyRelu:
            return fn(ActivationKind<Activation::kLeakyRelu, false>{});
        case Activation::kSnake:
            return approx_sine ? fn(ActivationKind<Activation::kSnake, true>{})
                               : fn(ActivationKind<Activation::kSnake, false>{});
        default:
            return fn(ActivationKind<Activation::kNone, false>{});
    }
}

// Channel c's ChannelApply (channel_apply.cuh) from its mean and variance.
__device__ ChannelApply channel_apply(const AdainArgs& a, int c, double mean, double var) {
    const float alpha = a.act == Activation::kSnake ? a.alpha[c] : 1.f;
    const double gain = (1.0 + double(a.style[c])) / sqrt(var + 1e-5);
    return ChannelApply(float(mean), float(gain), a.style[a.C + c], alpha);
}

// f applied with the call's activation (uniform: from AdainArgs).
__device__ float apply_call(const AdainArgs& a, const ChannelApply& f, float x) {
    return with_activation(a.act, a.approx_sine, [&](auto kind) {
        return f.apply<decltype(kind)::act, decltype(kind)::approx_sine>(x, a.slope);
    });
}

__device__ void apply_piece(const AdainArgs& a, int c, const Piece& p, const ChannelApply& f) {
    const float* xr = a.x + int64_t(c) * a.T;
    float* yr = a.y + int64_t(c) * a.T;
    p.visit(
        [&](int i) {
            const float4 q = *reinterpret_cast<const float4*>(xr + i);
            const float4 r = make_float4(apply_call(a, f, q.x), apply_call(a, f, q.y),
                                           apply_call(a, f, q.z), apply_call(a, f, q.w));
            if (a.vec_store) {
                *reinterpret_cast<float4*>(yr + i) = r;
            } else {
                yr[i] = r.x;
                yr[i + 1] = r.y;
                yr[i + 2] = r.z;
                yr[i + 3] = r.w;
            }
        },
        [&](int i) { yr[i] = apply_call(a, f, xr[i]); });
}

// Rows of one statistics block: one block per channel, statistics and apply.
__global__ void adain_fused_kernel(AdainArgs a) {
    await_producers();
    __shared__ double scratch[kAdainThreads / 32];
    const int c = blockIdx.x;
    const Piece p(a.x + int64_t(c) * a.T, a.T, 0, 1);
    const double2 s = piece_stats(a.x + int64_t(c) * a.T, p, scratch);
    apply_piece(a, c, p, channel_apply(a, c, s.x / a.T, s.y / a.T));
}

// A partial {n, sum, m2}'s squared deviations about the channel's mean
// (Chan et al.): m2 + n (sum / n - mean)^2, computed as m2 + (sum - n mean)^2 / n.
__device__ double m2_about(double n, double sum, double m2, double mean) {
    const double d = sum - n * mean;
    return m2 + d * d / n;
}

// Long rows, pass 1: block (part, c) writes {count, sum, m2} of its piece to
// partials[(c * parts + part) * 3]. With `apply` (rows of one part: the
// half-rows AdaIN), the channel's ChannelApply instead, from its one partial
// as adain_finalize_kernel would combine it: one kernel fewer.
__global__ void adain_stats_kernel(AdainArgs a, double* partials, ChannelApply* apply) {
    await_producers();
    __shared__ double scratch[kAdainThreads / 32];
    const int c = blockIdx.y, part = blockIdx.x;
    const float* xr = a.x + int64_t(c) * a.T;
    const Piece p(xr, a.T, part, gridDim.x);
    const double2 s = piece_stats(xr, p, scratch);
    if (threadIdx.x != 0) return;
    if (apply != nullptr) {
        const double mean = s.x / a.T;
        apply[c] = channel_apply(a, c, mean, m2_about(p.count(), s.x, s.y, mean) / a.T);
        return;
    }
    double* out = partials + (int64_t(c) * gridDim.x + part) * kPartialDoubles;
    out[0] = p.count();
    out[1] = s.x;
    out[2] = s.y;
}

// Sums add(acc, b) over a channel's partials b as kAdainThreads threads and
// block_sum would: thread i takes b = i, i + kAdainThreads, ... in order,
// then the warps' sums (warp_sum) are added in warp order. kWarps warps do
// it: the whole block (each thread one of those threads), or one warp, whose
// lane l stands for threads l + 32 j, keeping their sums apart (the same
// additions in the same order: the same bits, without the block's barriers
// and with a warp's share of the SMs). scratch: block_sum's.
template <int kWarps, class Add>
__device__ double ordered_sum(int parts, double* scratch, Add add) {
    constexpr int kThreadWarps = kAdainThreads / 32, kPerLane = kThreadWarps / kWarps;
    static_assert(kWarps == 1 || kWarps == kThreadWarps, "a warp or the block");
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % kWarps;
    double s[kPerLane] = {};
    for (int b0 = 0; b0 < parts; b0 += kAdainThreads) {
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const int b = b0 + 32 * (warp + kWarps * j) + lane;
            if (b < parts) add(s[j], b);
        }
    }
    if constexpr (kWarps == 1) {
        double total = 0.0;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) total += warp_sum(s[j]);
        return total;
    } else {
        return block_sum(s[0], scratch);
    }
}

// Pass 2's statistics of channel c by kWarps warps (ordered_sum): Chan et
// al.: m2 = sum of m2_b + n_b (mean_b - mean)^2; fixed reduction trees, so
// every run adds in the same order. Returns (mean, variance) in every thread.
template <int kWarps = kAdainThreads / 32>
__device__ double2 combine_partials(const AdainArgs& a, const double* partials, int parts, int c,
                                    double* scratch) {
    const double* pc = partials + int64_t(c) * parts * kPartialDoubles;
    const double sum = ordered_sum<kWarps>(
        parts, scratch, [&](double& acc, int b) { acc += pc[b * kPartialDoubles + 1]; });
    const double mean = sum / a.T;
    const double m2 = ordered_sum<kWarps>(parts, scratch, [&](double& acc, int b) {
        const double* part = pc + b * kPartialDoubles;
        if (part[0] > 0) acc += m2_about(part[0], part[1], part[2], mean);
    });
    return make_double2(mean, m2 / a.T);
}

// Long rows, pass 2: block (tile, c) combines the channel's partials, then
// applies its tile.
__global__ void adain_apply_kernel(AdainArgs a, const double* partials, int parts) {
    await_producers();
    __shared__ double scratch[kAdainThreads / 32];
    const int c = blockIdx.y;
    const double2 s = combine_partials(a, partials, parts, c, scratch);
    apply_piece(a, c, Piece(a.x + int64_t(c) * a.T, a.T, blockIdx.x, gridDim.x),
                channel_apply(a, c, s.x, s.y));
}

// Pass 2 into half rows, step 1: kWarps warps combine a channel's partials
// into its ChannelApply (stored after the partials in scratch). A block per
// channel for one utterance's latency: a conv's partials (one per 128 steps)
// run to ~1000. A warp per channel on a GPU shared with other lanes
// (shared_gpu.h), the same bits on an eighth of the blocks (128 - 1024
// blocks of a few microseconds each per call; a batch +1%).
template <int kWarps>
__global__ void adain_finalize_kernel(AdainArgs a, const double* partials, int parts,
                                      ChannelApply* apply) {
    await_producers();
    __shared__ double scratch[kAdainThreads / 32];
    constexpr int kChannels = kAdainThreads / 32 / kWarps;  // per block
    const int c = int(blockIdx.x) * kChannels + int(threadIdx.x) / 32 / kWarps;
    if (kWarps == 1 && c >= a.C) return;  // (whole warps: no block barrier below)
    const double2 s = combine_partials<kWarps>(a, partials, parts, c, scratch);
    if (threadIdx.x % (32 * kWarps) == 0) apply[c] = channel_apply(a, c, s.x, s.y);
}

// Step 2: block (time tiles, channel tile) writes its transposed tiles
// (half_rows.cuh) of x (a.x, or FP16 values: HalfSource), each thread with
// its two channels' ChannelApply in registers; the activation a template
// parameter (adain_half_rows_launch picks it).
template <Activation kAct, bool kApproxSine, typename Source>
__global__ void adain_half_rows_kernel(AdainArgs a, Source x, const ChannelApply* apply,
                                       __half* y, __half* y_lo) {
    await_producers();
    const int c0 = blockIdx.y * kHalfRowsTileC;
    const float slope = a.slope;
    write_half_rows(x, y, y_lo, a.C, a.T, [&](int r) {
        const ChannelApply f = c0 + r < a.C ? apply[c0 + r] : ChannelApply{};
        return [f, slope](float v) { return f.template apply<kAct, kApproxSine>(v, slope); };
    });
}

void adain_half_rows_launch(const AdainArgs& a, ConstFloatOrHalf x, const ChannelApply* apply,
                            __half* y, __half* y_lo, cudaStream_t stream) {
    with_activation(a.act, a.approx_sine, [&](auto kind) {
        auto launch = [&](auto source) {
            launch_dependent(adain_half_rows_kernel<decltype(kind)::act,
                                                    decltype(kind)::approx_sine, decltype(source)>,
                             half_rows_grid(a.C, a.T), dim3(kHalfRowsThreads), 0, stream,
                             "adain_half_rows_kernel", a, source, apply, y, y_lo);
        };
        if (x.f16 != nullptr) {
            launch(HalfSource{x.f16});
        } else {
            launch(x.f32);
        }
    });
}

}  // namespace

void layer_norm_rows(const float* x, float* y, int rows, int cols, const float* gamma,
                     const float* beta, const float* style_gamma, const float* style_beta,
                     float eps, cudaStream_t stream, const float* x_bias, int y_pitch) {
    if (rows == 0) return;
    if (cols > kRowsMaxCols) {
        throw CudaError("layer_norm_rows: rows of " + std::to_string(cols) + " columns, at most " +
                        std::to_string(kRowsMaxCols));
    }
    const int threads = 256, rows_per_block = threads / 32;
    launch_dependent(layer_norm_rows_kernel,
                     dim3(unsigned((rows + rows_per_block - 1) / rows_per_block)), dim3(threads), 0,
                     stream, "layer_norm_rows_kernel", x, x_bias, y, y_pitch > 0 ? y_pitch : cols,
                     rows, cols, Affine{gamma, beta, style_gamma, style_beta}, eps);
}

void layer_norm_channels(const float* x, float* y, int C, int T, const float* gamma,
                         const float* beta, const float* style_gamma, const float* style_beta,
                         float eps, cudaStream_t stream) {
    if (T == 0) return;
    launch_dependent(layer_norm_channels_kernel, dim3(unsigned((T + 31) / 32)),
                     dim3(32, kChannelSplit), 0, stream, "layer_norm_channels_kernel", x, y, C, T,
                     Affine{gamma, beta, style_gamma, style_beta}, eps);
}

namespace {
// The partials, then (half rows only) one ChannelApply per channel, from
// a 16-byte boundary (its float4).
constexpr int kApplyDoubles = (sizeof(ChannelApply) + sizeof(double) - 1) / sizeof(double);
static_assert(sizeof(ChannelApply) % 16 == 0, "ChannelApply arrays keep 16-byte alignment");
int64_t apply_offset_doubles(int C, int parts) {
    return round_up(int64_t(C) * parts * kPartialDoubles, 2);
}
}  // namespace

int64_t adain_scratch_doubles(int C, int T) {
    return apply_offset_doubles(C, stats_parts(T)) + int64_t(C) * kApplyDoubles;
}

void adain(const float* x, float* y, int C, int T, const float* style, Activation act,
           float act_slope, const float* alpha, double* scratch, cudaStream_t stream) {
    if (C == 0 || T == 0) return;
    const bool vec_store =
        (reinterpret_cast<uintptr_t>(x) - reinterpret_cast<uintptr_t>(y)) % 16 == 0;
    const AdainArgs args{x, y, C, T, style, act, act_slope, alpha, vec_store, false};
    const int parts = stats_parts(T);
    if (parts == 1) {
        launch_dependent(adain_fused_kernel, dim3(unsigned(C)), dim3(kAdainThreads), 0, stream,
                         "adain_fused_kernel", args);
        return;
    }
    launch_dependent(adain_stats_kernel, dim3(unsigned(parts), unsigned(C)), dim3(kAdainThreads), 0,
                     stream, "adain_stats_kernel", args, scratch,
                     static_cast<ChannelApply*>(nullptr));
    const int tiles = std::max(1, (T / 4 + kApplyVecs - 1) / kApplyVecs);
    launch_dependent(adain_apply_kernel, dim3(unsigned(tiles), unsigned(C)), dim3(kAdainThreads), 0,
                     stream, "adain_apply_kernel", args, scratch, parts);
}

namespace {
// The ChannelApply of every channel into scratch (after its own partials,
// see adain_scratch_doubles): from `given` (the producer's partials), else
// from a statistics pass over x (fp32), which writes them itself where
// the rows are one part.
ChannelApply* channel_applies(const AdainArgs& args, double* scratch, cudaStream_t stream,
                              ChannelPartials given) {
    const int C = args.C, own_parts = stats_parts(args.T);
    const ChannelPartials stats = given.parts > 0 ? given : ChannelPartials{scratch, own_parts};
    auto* apply =
        reinterpret_cast<ChannelApply*>(scratch + apply_offset_doubles(C, own_parts));
    // Rows of one part: the statistics kernel writes the ChannelApply too.
    const bool finalized = given.parts == 0 && own_parts == 1;
    if (given.parts == 0) {
        launch_dependent(adain_stats_kernel, dim3(unsigned(own_parts), unsigned(C)),
                         dim3(kAdainThreads), 0, stream, "adain_stats_kernel", args, scratch,
                         finalized ? apply : nullptr);
    }
    if (!finalized) {
        // A warp per channel on a GPU shared with other lanes, else a block.
        constexpr int kWarps = kAdainThreads / 32;
        const bool per_warp = gpu_shared();
        launch_dependent(per_warp ? adain_finalize_kernel<1> : adain_finalize_kernel<kWarps>,
                         dim3(unsigned(per_warp ? (C + kWarps - 1) / kWarps : C)),
                         dim3(kAdainThreads), 0, stream, "adain_finalize_kernel", args, stats.data,
                         stats.parts, apply);
    }
    return apply;
}

AdainArgs half_rows_args(const float* x, int C, int T, const float* style, Activation act,
                         float act_slope, const float* alpha, HalfOperands form) {
    // Rounded operands take Snake's approximate sine (AdainArgs::approx_sine).
    return {x, nullptr, C, T, style, act, act_slope, alpha, false,
            form == HalfOperands::kRounded};
}
}  // namespace

void adain_half_rows(ConstFloatOrHalf x, __half* y, int C, int T, const float* style,
                     Activation act, float act_slope, const float* alpha, HalfOperands form,
                     double* scratch, cudaStream_t stream, ChannelPartials given) {
    if (C == 0 || T == 0) return;
    if (x.f16 != nullptr && given.parts == 0) {
        throw CudaError("adain_half_rows: an FP16 input needs its producer's statistics partials");
    }
    const AdainArgs args = half_rows_args(x.f32, C, T, style, act, act_slope, alpha, form);
    const ChannelApply* apply = channel_applies(args, scratch, stream, given);
    __half* y_lo = half_rows_lo(y, C, T, form);
    adain_half_rows_launch(args, x, apply, y, y_lo, stream);
}

const ChannelApply* adain_apply(ChannelPartials given, int C, int T, const float* style,
                                Activation act, float act_slope, const float* alpha,
                                HalfOperands form, double* scratch, cudaStream_t stream) {
    if (given.parts == 0) {
        throw CudaError("adain_apply: needs the input's statistics partials (its producer's)");
    }
    if (C == 0 || T == 0) return nullptr;
    return channel_applies(half_rows_args(nullptr, C, T, style, act, act_slope, alpha, form),
                           scratch, stream, given);
}

}  // namespace kokoro::ops
