// The tensor-core convs' host side: conv1d_half_rows, the strided conv1d
// and the transposed conv on the implicit-GEMM kernels, with their scratch
// and statistics sizes. Each call is checked and turned into ConvArgs and a
// launch plan (conv/igemm_plan.h) here; conv/igemm_dispatch.h picks the
// compiled kernel (its instances in conv_igemm_*.cu), and a split reduction's
// sums are finished here (conv/igemm_split_sum.cuh). Layouts and the fp32
// convs: conv.cu.
//
// Conv1d, dense, stride 1, on the tensor cores (conv1d_half_rows; every
// dense conv with at least 32 input channels, in both precisions, and fast
// precision's 1x1 block shortcuts of the decoder and the N stack, K = 1): one
// implicit-GEMM kernel, y[Cout, T] = W[Cout, K * Cin] @ X[K * Cin, T] with
// X[(k, ci), t] = x[t + k * dil - pad, ci] never materialised. Operands are
// FP16 with fp32 accumulation (mma.sync m16n8k16; wgmma on Hopper): FP16
// rather than BF16 for its 11-bit significand (the TF32
// precision at twice TF32's rate); the inputs are normalised activations and
// folded weights, far inside FP16's range. The input comes as half rows
// (half_rows.cuh: time-major [Tin, ld], ld = Cin rounded up to 8, written by
// the preceding AdaIN + activation or by to_half_rows) and the weight as
// [Cout, K, ld] FP16 (converted at upload), so a tap is a shift by whole
// 16-byte-aligned rows and every operand load is a 16-byte cp.async (the
// wgmma kernels' windows and conv1d weight tiles: TMA copies) and an
// ldmatrix. A block computes a 128 (Cout) x kBN (T) tile with 8 warps (64 x
// kBN / 4 each), walking the reduction as 64-channel chunks (outer) x taps
// (inner): per chunk the window of rows t0 - pad .. t0 - pad + kBN + dil (K
// - 1) is copied to shared memory once and every tap reads its shifted
// operand from it; the weight tile W[m0 : m0 + 128, k, ci0 : ci0 + 64]
// streams per step. Three weight stages and two windows (three at K = 1:
// window_buffers) pipeline the copies
// behind the MMAs (the wgmma conv1d's wide tile: four stages, each step's
// MMAs left in flight over the next step's barrier and copies); every
// ldmatrix is conflict-free (mma.sync's 144-byte rows; wgmma's 128-byte rows
// in its swizzle, as TMA writes them).
// kBN is 128, or 64 where 128 would not give every SM a block; where 64
// leaves SMs without two blocks (short inputs, the decoder's 1090-channel
// convs on few frames), the reduction chunks are split over blocks that write
// partial sums to `scratch`, added in a fixed order by a second kernel
// (repeatable bits, no atomics). On a GPU shared with other lanes (a batch's
// lane: shared_gpu.h) the wgmma kernel walks such a split reduction inside
// one block per tile instead, each split's sums apart and then added in the
// same order, and a statistics pass writes the partials as the sum kernel
// does: the same bits, without the extra blocks (the other lanes fill the
// GPU) and the partial sums' traffic. A wgmma conv1d of one Cout tile and
// one split also takes its input raw (ops::HalfInput: FP16 channels-first as a
// residual block's convs store it, with its AdaIN's per-channel
// parameters): each chunk's window comes by TMA as it is into a staging
// buffer, and the block's threads write the window from it through AdaIN +
// Snake, as the half-rows pass would have (the same FP16 operands, the same
// bits), the next chunk's while the chunk's last step's MMAs run; it spares
// the pass's write and read of the rows and its launch, and costs the
// transform inside the conv (a block's first window exposed: with two Cout
// tiles, each transforming every window, it lost). The epilogue stages the
// block's tile in shared memory, then scales the sums (the FP16 weights are
// stored times a power of two, see conv_weight_to_half_rows), adds bias and
// residual and stores y (fp32, channels-first) a channel row at a time,
// coalesced. Split operands
// (precision "fp32", ops.h HalfOperands) need no other kernel: the reduction
// walks three chunks per 64 channels, x_hi w_hi, x_hi w_lo and x_lo w_hi,
// into the same accumulators (three times the MMAs, float32-level sums).
//
// Conv1d of stride s > 1 on the tensor cores (conv1d_strided_half_rows: the
// fast generator's first noise conv, 22 -> 256 channels, K 12, stride 6, on
// the source STFT): the stride-1 conv of its polyphase form. Time-major half
// rows of x with s rows read as one row of s * ld channels are the s phases
// side by side, and tap k lands on phase (k - pad) mod s of a row
// floor((k - pad) / s) away, so the weight relaid as [Cout, taps, s * ld]
// (zeros where no tap lands) makes it one conv1d_half_rows GEMM over
// ceil(Tin / s) rows: no im2col, the same kernel and epilogue (statistics
// included); its MMAs include the zeros (432 reduction columns for 264).
//
// ConvTranspose1d, dense, on the tensor cores (conv_transpose1d_half_rows:
// the generator's upsamplers): polyphase. Output t = q stride + p - pad
// sums taps p + j stride at inputs q - j, so each of the stride phases is
// a conv1d of K / stride taps over the same half rows; the phases are more
// output rows of the same implicit-GEMM kernels (a block holds every phase
// of 128 / stride channels), whose epilogue writes each channel's
// interleaved outputs as one contiguous run, folds in the bias, a residual
// and a reflection pad (1, 0), and writes the statistics partials of what
// it stored. No columns buffer, no overlap-add pass. The phases' code is a
// template parameter of the kernels: a conv1d's keeps its own epilogue.
#include <cstdint>
#include <string>

#include "kokoro/channel_apply.cuh"
#include "kokoro/channel_stats.cuh"
#include "kokoro/check.h"
#include "kokoro/half_rows.cuh"
#include "kokoro/launch.cuh"
#include "kokoro/mma.cuh"
#include "kokoro/ops.h"
#include "kokoro/shared_gpu.h"

#include "conv/per_channel_grid.h"
#include "conv/polyphase.h"
#include "conv/igemm_traits.h"
#include "conv/igemm_plan.h"
#include "conv/igemm_dispatch.h"
#include "conv/igemm_tiles.cuh"
#include "conv/igemm_wgmma.cuh"
#include "conv/igemm_split_sum.cuh"

namespace kokoro::ops {
namespace igemm {
namespace {

Gpu current_gpu() {
    int device = 0;
    Gpu g{0, 0, 0, device_runs_wgmma()};
    KOKORO_CUDA_CHECK(cudaGetDevice(&device));
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&g.sms, cudaDevAttrMultiProcessorCount, device));
    KOKORO_CUDA_CHECK(
        cudaDeviceGetAttribute(&g.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&g.smem_per_sm,
                                             cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    return g;
}

}  // namespace
}  // namespace igemm

namespace {
// A tensor-core call as the kernels see it: the GEMMs and their output map
// (ConvArgs, pointers unset) and the launch plan.
struct HalfCall {
    igemm::ConvArgs args{};
    igemm::Gpu gpu{};
    igemm::Plan plan{};
    bool split = false;
    bool empty() const { return args.Cout == 0 || args.Tout <= 0; }
    int64_t scratch_floats() const {
        if (empty() || plan.splits == 1) return 0;
        return int64_t(plan.splits) * args.phases * args.Cout * args.Tout;
    }
    // One per time tile, or with a split reduction one per split_sum block
    // (a conv1d's; a transposed conv's split reduction gives none).
    int stats_parts() const {
        if (empty()) return 0;
        if (plan.splits == 1) return (args.Tout + plan.tile - 1) / plan.tile + args.y_left;
        return igemm::has_phases(args) ? 0 : (args.Tout + kThreads - 1) / kThreads;
    }
};

// `phases` GEMMs of Cout rows and Tout columns over K taps; the output map
// is a conv1d's until the caller changes it (the plan depends on the
// phases only).
HalfCall half_call(int Cin, int Cout, int Tin, int Tout, int K, int pad, int dilation, int phases,
                   HalfOperands form, int streams = 1) {
    HalfCall c;
    c.split = form == HalfOperands::kSplit;
    igemm::ConvArgs& a = c.args;
    a.ld = half_rows_pitch(Cin);
    a.Cout = Cout;
    a.Tin = Tin;
    a.Tout = Tout;
    a.K = K;
    a.pad = pad;
    a.dilation = dilation;
    a.phases = phases;
    a.shift = 0;
    a.y_len = Tout;
    a.y_left = 0;
    a.out_scale = 1.f;
    if (c.empty()) return c;
    c.gpu = igemm::current_gpu();
    c.plan = igemm::plan(c.gpu, Cin, igemm::row_tiles(a), Tout, c.split, streams);
    a.chunks_per_split = c.plan.chunks_per_split;
    return c;
}

HalfCall conv1d_call(int Cin, int Cout, int Tin, int K, int pad, int dilation, HalfOperands form,
                     int streams) {
    if (K < 1) throw CudaError("conv1d_half_rows: needs K >= 1, got " + std::to_string(K));
    return half_call(Cin, Cout, Tin, conv1d_out_len(Tin, K, 1, pad, dilation), K, pad, dilation,
                     1, form, streams);
}

// Polyphase: with t + pad = q stride + p, output t of phase p sums taps p +
// j stride (j < K / stride) at inputs q - j, i.e. a conv1d of K / stride
// taps (left pad K / stride - 1) whose tap k is the transposed conv's tap p
// + (K / stride - 1 - k) stride: in the [K, Cout, ld] weight, phase p's
// channel c at tap k is row (p + (K / stride - 1 - k) stride) Cout + c.
HalfCall transposed_call(int Cin, int Cout, int Tin, int K, int stride, int pad, int reflect_left,
                         HalfOperands form) {
    const int y_len = conv_transpose1d_out_len(Tin, K, stride, pad, 0);
    if (stride < 1 || stride > 64 || K % stride != 0 || K < 2 * stride || pad < 0 ||
        pad >= stride) {
        throw CudaError("conv_transpose1d_half_rows: needs a stride of at most 64, K a multiple "
                        "of the stride, at least two strides, and 0 <= pad < stride; got K " +
                        std::to_string(K) + ", stride " + std::to_string(stride) + ", pad " +
                        std::to_string(pad));
    }
    if (reflect_left < 0 || reflect_left > 1 || (reflect_left == 1 && y_len < 2)) {
        throw CudaError("conv_transpose1d_half_rows: a reflection pad of 0 or 1, on at least 2 "
                        "outputs; got " + std::to_string(reflect_left) + " on " +
                        std::to_string(y_len));
    }
    const int taps = K / stride;
    const int columns = y_len > 0 ? (y_len - 1 + pad) / stride + 1 : 0;
    HalfCall c = half_call(Cin, Cout, Tin, columns, taps, taps - 1, 1, stride, form);
    igemm::ConvArgs& a = c.args;
    a.shift = pad;
    a.y_len = y_len;
    a.y_left = short(reflect_left);
    return c;
}


HalfCall strided_call(int Cin, int Cout, int Tin, int K, int stride, int pad, int streams) {
    const Polyphase poly(K, stride, pad);
    if (stride < 2 || pad < 0 || poly.taps < 2) {
        throw CudaError("conv1d_strided_half_rows: needs a stride of at least 2, pad >= 0 and "
                        "taps over at least two strides; got K " + std::to_string(K) +
                        ", stride " + std::to_string(stride) + ", pad " + std::to_string(pad));
    }
    return half_call(stride * half_rows_pitch(Cin), Cout,
                     conv1d_strided_input_rows(Tin, stride) / stride,
                     conv1d_out_len(Tin, K, stride, pad, 1), poly.taps, poly.pad, 1, 1,
                     HalfOperands::kRounded, streams);
}

// Whether the call takes a raw input (ops::HalfInput): conv1d_takes_raw_input.
bool takes_raw_input(const HalfCall& c, HalfKernel kernel) {
    const igemm::ConvArgs& a = c.args;
    const int halo = a.dilation * (a.K - 1), window_rows = c.plan.tile + halo;
    const size_t smem = c.plan.tile == 128
                            ? igemm::wgmma_smem_bytes<2, igemm::kCoutTile, true>(halo, a.ld)
                            : igemm::wgmma_smem_bytes<1, igemm::kCoutTile, true>(halo, a.ld);
    // One Cout tile: every tile of a time range transforms its windows anew
    // (with two, twice the pass's work: slower than the pass, measured).
    return !c.empty() && kernel == HalfKernel::kBest && c.gpu.wgmma && !c.split &&
           !igemm::has_phases(a) && a.K >= 2 && c.plan.splits == 1 &&
           a.Cout > igemm::kNarrowCoutTile &&
           igemm::row_tiles(a) == 1 && a.ld % igemm::kBK == 0 &&
           igemm::raw_box_rows(window_rows) <= 256 &&
           smem + igemm::kStaticShareBound <= size_t(c.gpu.smem_optin);
}

void run(HalfCall c, HalfInput x, const __half* w, float w_scale, const float* b,
         FloatOrHalf y, ConstFloatOrHalf residual, float* scratch, cudaStream_t stream,
         HalfKernel kernel, double* stats) {
    if (c.empty()) return;
    if (x.apply != nullptr && !takes_raw_input(c, kernel)) {
        throw CudaError("tensor-core conv: this call cannot take a raw input (ask "
                        "conv1d_takes_raw_input first)");
    }
    const bool half_out = y.f16 != nullptr;
    if (residual.f16 != nullptr && igemm::has_phases(c.args)) {
        throw CudaError("tensor-core conv: an FP16 residual needs a conv1d");
    }
    if (half_out && c.args.Cout <= igemm::kNarrowCoutTile) {
        throw CudaError("tensor-core conv: an FP16 output needs more than " +
                        std::to_string(igemm::kNarrowCoutTile) + " output channels");
    }
    if (stats != nullptr && c.stats_parts() == 0) {
        throw CudaError("tensor-core conv: statistics asked of a call that gives none (check "
                        "its stats_parts function first)");
    }
    igemm::ConvArgs& a = c.args;
    a.x = x.x;
    a.x_lo = c.split ? x.x + int64_t(a.Tin) * a.ld : nullptr;
    a.w = w;
    // Either weight layout holds phases x Cout x K rows (conv1d: [Cout, K,
    // ld]; transposed: [K = taps x stride, Cout, ld]).
    a.w_lo = c.split ? w + int64_t(a.phases) * a.Cout * a.K * a.ld : nullptr;
    a.b = b;
    a.residual_is_half = residual.f16 != nullptr;
    if (a.residual_is_half) {
        a.residual_half = residual.f16;
    } else {
        a.residual = residual.f32;
    }
    if (half_out) {
        a.y_half = y.f16;
    } else {
        a.y = y.f32;
    }
    // A split reduction on a GPU shared with other lanes (launch.cuh) runs
    // inside one block per tile (wgmma, a conv1d of wide Cout tiles): the
    // same sums in the same order, fewer blocks, no partial sums' traffic.
    igemm::Plan plan = c.plan;
    plan.in_block = plan.splits > 1 && gpu_shared() && kernel == HalfKernel::kBest &&
                    c.gpu.wgmma && !igemm::has_phases(a) && a.Cout > igemm::kNarrowCoutTile;
    if (plan.in_block) plan.tile = 128;  // the tile does not enter the sums: half the weight reads
    a.partial = plan.splits > 1 && !plan.in_block ? scratch : nullptr;
    a.stats = plan.splits > 1 ? nullptr : stats;  // split: the sum or stats kernel writes them
    a.w_scale = w_scale;
    igemm::launch(c.gpu, plan, kernel, a, half_out, x.apply, stream);
    if (plan.splits == 1) return;
    a.stats = stats;
    if (!plan.in_block) {
        const bool phases = igemm::has_phases(a);
        launch_dependent(phases ? (half_out ? igemm::split_sum_kernel<true, true>
                                            : igemm::split_sum_kernel<true>)
                         : half_out ? igemm::split_sum_kernel<false, true>
                                    : igemm::split_sum_kernel<false>,
                         per_channel_grid(a.phases * a.Cout, a.Tout), dim3(kThreads), 0, stream,
                         "split_sum_kernel", a, plan.splits);
    } else if (stats != nullptr) {
        launch_dependent(half_out ? igemm::split_stats_kernel<true>
                                  : igemm::split_stats_kernel<false>,
                         per_channel_grid(a.Cout, a.Tout),
                         dim3(kThreads), 0, stream, "split_stats_kernel", a);
    }
}
}  // namespace

int64_t conv1d_half_rows_scratch_floats(int Cin, int Cout, int Tin, int K, int pad, int dilation,
                                        HalfOperands form, int streams) {
    return conv1d_call(Cin, Cout, Tin, K, pad, dilation, form, streams).scratch_floats();
}

int conv1d_half_rows_stats_parts(int Cin, int Cout, int Tin, int K, int pad, int dilation,
                                 HalfOperands form, int streams) {
    return conv1d_call(Cin, Cout, Tin, K, pad, dilation, form, streams).stats_parts();
}

bool conv1d_takes_raw_input(int Cin, int Cout, int Tin, int K, int pad, int dilation,
                            HalfOperands form, int streams) {
    return takes_raw_input(conv1d_call(Cin, Cout, Tin, K, pad, dilation, form, streams),
                           HalfKernel::kBest);
}

void conv1d_half_rows(HalfInput x, const __half* w, float w_scale, const float* b,
                      FloatOrHalf y, int Cin, int Cout, int Tin, int K, int pad, int dilation,
                      ConstFloatOrHalf residual, HalfOperands form, float* scratch,
                      cudaStream_t stream, HalfKernel kernel, double* stats, int streams,
                      float out_scale) {
    HalfCall call = conv1d_call(Cin, Cout, Tin, K, pad, dilation, form, streams);
    call.args.out_scale = out_scale;
    run(call, x, w, w_scale, b, y, residual, scratch, stream, kernel, stats);
}

int64_t conv_transpose1d_half_rows_scratch_floats(int Cin, int Cout, int Tin, int K, int stride,
                                                  int pad, HalfOperands form) {
    return transposed_call(Cin, Cout, Tin, K, stride, pad, 0, form).scratch_floats();
}

int conv_transpose1d_half_rows_stats_parts(int Cin, int Cout, int Tin, int K, int stride, int pad,
                                           int reflect_left, HalfOperands form) {
    return transposed_call(Cin, Cout, Tin, K, stride, pad, reflect_left, form).stats_parts();
}

void conv_transpose1d_half_rows(const __half* x, const __half* w, float w_scale, const float* b,
                                FloatOrHalf y, int Cin, int Cout, int Tin, int K, int stride,
                                int pad, int reflect_left, const float* residual, HalfOperands form,
                                float* scratch, cudaStream_t stream, HalfKernel kernel,
                                double* stats) {
    run(transposed_call(Cin, Cout, Tin, K, stride, pad, reflect_left, form), x, w, w_scale, b, y,
        residual, scratch, stream, kernel, stats);
}

int conv1d_strided_input_rows(int Tin, int stride) { return round_up(Tin, stride); }

int64_t conv1d_strided_half_rows_scratch_floats(int Cin, int Cout, int Tin, int K, int stride,
                                                int pad, int streams) {
    return strided_call(Cin, Cout, Tin, K, stride, pad, streams).scratch_floats();
}

int conv1d_strided_half_rows_stats_parts(int Cin, int Cout, int Tin, int K, int stride, int pad,
                                         int streams) {
    return strided_call(Cin, Cout, Tin, K, stride, pad, streams).stats_parts();
}

void conv1d_strided_half_rows(__half* x, const __half* w, float w_scale, const float* b, float* y,
                              int Cin, int Cout, int Tin, int K, int stride, int pad,
                              const float* residual, float* scratch, cudaStream_t stream,
                              double* stats, int streams) {
    const HalfCall call = strided_call(Cin, Cout, Tin, K, stride, pad, streams);
    if (call.empty()) return;
    const int64_t rows = conv1d_strided_input_rows(Tin, stride), ld = half_rows_pitch(Cin);
    if (rows > Tin) {
        KOKORO_CUDA_CHECK(cudaMemsetAsync(x + Tin * ld, 0, sizeof(__half) * (rows - Tin) * ld,
                                          stream));
    }
    run(call, x, w, w_scale, b, y, residual, scratch, stream, HalfKernel::kBest, stats);
}

}  // namespace kokoro::ops
