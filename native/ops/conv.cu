// 1-D convolutions on channels-first [C, T] tensors. Weights come with the
// kernel axis in the middle (ops.h): Conv1d [Cout, K, Cin/groups],
// ConvTranspose1d [Cin, K, Cout/groups], so that one tap of every output
// channel is a [Cout, Cin] matrix with row pitch K * Cin.
//
// Conv1d, dense, stride 1, on cuBLAS GEMMs (the convs without a tensor-core
// weight: fewer than 32 input channels), where im2col would take more than
// one chunk (long inputs): per-tap GEMMs, no im2col (shorter ones run as the
// strided convs below). Per time chunk of n outputs, taps grouped by
// alignment class r = (k * dil) mod 4: the input window with its zero
// padding is copied once per class, shifted by r (win[ci, j] = xpad[ci, t0 +
// r + j], row pitch a multiple of 4 floats), then each tap of the class, k *
// dil = 4q + r, is one GEMM
//   acc[Cout, n] (+)= w_k[Cout, Cin] @ win[:, 4q : 4q + n]
// (beta 0 for the first tap, 1 after). Every base and pitch is then 16-byte
// aligned where Cin % 4 == 0, so cuBLAS can pick its Hopper kernels. Chunks
// bound acc and win, which then stay in L2 across the taps. One epilogue
// pass writes y = acc + bias + residual.
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
// Conv1d, pointwise (K = 1, stride 1) with few input channels (the last
// noise conv, 22 -> 128 at the audio frame rate): one memory-bound pass in
// fp32 (conv1d_pointwise_kernel), the block's time tile of x and all of w
// in shared memory, y = b + w x (+ residual) written once, with y's
// statistics partials for the AdaIN after it (a GEMM, a bias pass and
// AdaIN's statistics pass read or wrote y three times).
//
// Conv1d, dense, strided (the noise convs), and stride-1 convs whose im2col
// fits one chunk (short inputs): im2col into `scratch` with
// tap-major rows (cols[k * Cin + ci, t] = xpad[ci, t * stride + k * dil], so
// w is the [Cout, K * Cin] GEMM operand as stored), one GEMM per time chunk,
// then the epilogue for bias and residual; a residual that is y itself folds
// into the GEMM as beta = 1. 1x1 stride-1 convs multiply x directly.
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
// ConvTranspose1d, dense, otherwise: one GEMM puts every tap of every input
// step in cols[k * Cout + co, j] = sum_ci w[ci, k, co] x[ci, j]; a gather
// kernel then overlap-adds, each output t reading the (at most ceil(K /
// stride)) taps that land on it, so no atomics and a fixed summation order.
//
// Grouped (the depthwise upsampler) and tiny convs (F0_conv: 1 channel, k3)
// run as a direct kernel, one thread per output element, in fp32 whatever
// the GemmMath (it applies to the GEMMs only). Where a tensor-core conv reads
// the depthwise upsampler's output, the upsampler writes that conv's half
// rows itself (conv_transpose1d_depthwise_half_rows: the same fp32 values,
// computed inside the half-rows pass's tiles).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <string>
#include <type_traits>
#include <vector>

#include "kokoro/channel_apply.cuh"
#include "kokoro/channel_stats.cuh"
#include "kokoro/check.h"
#include "kokoro/half_rows.cuh"
#include "kokoro/launch.cuh"
#include "kokoro/mma.cuh"
#include "kokoro/ops.h"
#include "kokoro/tensor_map.h"

#include "conv/fp32_kernels.cuh"
#include "conv/polyphase.h"
#include "conv/igemm_tiles.cuh"
#include "conv/igemm_mma_sync.cuh"
#include "conv/igemm_wgmma.cuh"

namespace kokoro::ops {
namespace {
namespace igemm {

// The kernels with the output map's phases and pad compiled in.
bool has_phases(const ConvArgs& a) { return a.phases > 1 || a.y_left > 0; }

// What the plan and the launch need of the current GPU, queried once per conv.
struct Gpu {
    int sms, smem_optin, smem_per_sm;
    bool wgmma;  // device_runs_wgmma()
};

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

// A bound on the wgmma kernels' static shared memory (their TMA barriers),
// for plans made before the kernel is named (launch reads the kernel's own).
constexpr size_t kStaticShareBound = 1024;

// Whether two blocks of `smem` bytes of dynamic shared memory fit an SM
// (each with its static share, and the 1 KB the SM reserves per block).
bool two_blocks_fit(const Gpu& gpu, size_t smem) {
    return 2 * (smem + kStaticShareBound + 1024) <= size_t(gpu.smem_per_sm);
}

// The launch shape: the wide time tile (128) where it gives every SM a
// block (between one and two per SM, the narrow tile's twice as many blocks
// of one MMA warpgroup each issued no more, and read each weight tile twice:
// medium's stage-0 source branch, batch +1.2%), else the narrow one (64)
// with the reduction split over enough blocks to give every SM two (short
// inputs; decoder convs on few frames but 1090 channels); `streams` convs
// at once share that target. Both kernels use the same tiles.
struct Plan {
    int tile, splits, chunks_per_split;
    bool in_block = false;  // the splits walked inside one block (conv1d_wgmma_kernel's kInBlock)
    int64_t blocks(int row_tiles, int Tout) const {
        return int64_t((Tout + tile - 1) / tile) * row_tiles;
    }
};

// Rows of the grid (grid.y): tiles of kCoutTile / phases channels (BlockRows;
// the narrow tile serves Cout <= kNarrowCoutTile only: one row tile either way).
int row_tiles(const ConvArgs& a) {
    const int channels = kCoutTile / a.phases;
    return (a.Cout + channels - 1) / channels;
}

Plan plan(const Gpu& gpu, int Cin, int row_tiles, int Tout, bool split, int streams) {
    const int64_t want = std::max<int64_t>(1, 2 * int64_t(gpu.sms) / streams);
    Plan p{128, 1, 0};
    const int chunks = reduction_chunks(half_rows_pitch(Cin), split);
    if (2 * p.blocks(row_tiles, Tout) >= want) {
        p.chunks_per_split = chunks;
        return p;
    }
    p.tile = 64;
    const int64_t blocks = p.blocks(row_tiles, Tout);
    p.splits = int(std::min<int64_t>(chunks, (want + blocks - 1) / blocks));
    p.chunks_per_split = (chunks + p.splits - 1) / p.splits;
    p.splits = (chunks + p.chunks_per_split - 1) / p.chunks_per_split;  // none empty
    return p;
}

template <class Kernel, class... Extra>
void launch(Kernel kernel, const char* name, size_t smem, int threads, const Gpu& gpu,
            const Plan& p, const ConvArgs& a, cudaStream_t stream, const Extra&... extra) {
    // The dynamic share: the device's limit less the kernel's static shared
    // memory (the wgmma kernels' TMA barriers).
    cudaFuncAttributes attributes{};
    KOKORO_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    const int dynamic_limit = gpu.smem_optin - int(attributes.sharedSizeBytes);
    if (smem > size_t(dynamic_limit)) {
        throw CudaError(std::string(name) + ": a window of " +
                        std::to_string(p.tile + a.dilation * (a.K - 1)) +
                        " steps (dilation x (K - 1) = " + std::to_string(a.dilation * (a.K - 1)) +
                        ") exceeds the GPU's shared memory");
    }
    // Always the device's limit, never this launch's need: engine lanes launch
    // from several host threads, and one lowering the limit between another's
    // call and launch would fail that launch.
    KOKORO_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_limit));
    const dim3 grid(unsigned((a.Tout + p.tile - 1) / p.tile), unsigned(row_tiles(a)),
                    unsigned(p.in_block ? 1 : p.splits));
    launch_dependent(kernel, grid, dim3(threads), smem, stream, name, a, extra...);
}

// The map of a conv1d's FP16 weight, [parts][Cout][K][ld] (parts 2 when
// split: hi, then lo), whose box (64 channels, one tap, kN rows, one part)
// is a weight stage; rows past Cout and channels past ld come in as zeros.
template <int kN>
CUtensorMap weight_map(const ConvArgs& a) {
    return tensor_map<4>("conv1d weight", a.w,
                         {cuuint64_t(a.ld), cuuint64_t(a.K), cuuint64_t(a.Cout),
                          cuuint64_t(a.w_lo != nullptr ? 2 : 1)},
                         {kBK, 1, kN, 1});
}

// The map of the input half rows, [parts][Tin][ld], whose box (64 channels,
// `rows` steps, one part) is a window's share; steps outside [0, Tin) and
// channels past ld come in as zeros.
CUtensorMap window_map(const ConvArgs& a, int rows) {
    return tensor_map<3>("conv input", a.x,
                         {cuuint64_t(a.ld), cuuint64_t(a.Tin),
                          cuuint64_t(a.x_lo != nullptr ? 2 : 1)},
                         {kBK, cuuint32_t(rows), 1});
}

// The map of a raw input (ops::HalfInput), [1][ld][Tin] at rows of
// half_channels_pitch(Tin), whose box (box_rows steps, 64 channels) is a
// chunk's staged window; steps outside [0, Tin) come in as zeros.
CUtensorMap raw_map(const ConvArgs& a, int box_rows) {
    return tensor_map<3>("conv raw input", a.x,
                         {cuuint64_t(a.Tin), cuuint64_t(a.ld), 1},
                         {cuuint32_t(box_rows), kBK, 1}, false,
                         cuuint64_t(half_channels_pitch(a.Tin)));
}

// The kernel for the GPU, the tile, the output map (phases or not), y's
// storage (kHalfOut: FP16; a conv1d of wide Cout tiles only) and the input
// (kRawX: raw, x_apply its parameters; a wgmma conv1d of one split).
template <bool kPhases, bool kHalfOut, bool kRawX>
void launch_mapped(const Gpu& gpu, const Plan& p, HalfKernel which, const ConvArgs& a,
                   const ChannelApply* x_apply, cudaStream_t stream) {
    const int halo = a.dilation * (a.K - 1);
    if (which == HalfKernel::kBest && gpu.wgmma) {
        // kN: the narrow tile where one covers Cout (a conv1d's rows only).
        auto wgmma = [&](auto n) {
            constexpr int kN = decltype(n)::value;
            const CUtensorMap w_map = kPhases ? CUtensorMap{} : weight_map<kN>(a);
            const CUtensorMap x_map = kRawX ? raw_map(a, raw_box_rows(p.tile + halo))
                                            : window_map(a, WindowBoxes(p.tile + halo).rows);
            if constexpr (!kPhases && kN == kCoutTile && !kRawX) {
                if (p.in_block) {
                    return launch(conv1d_wgmma_kernel<2, false, kN, true, kHalfOut, false,
                                                      kInFlightStages>,
                                  "conv1d_wgmma_kernel",
                                  wgmma_smem_bytes<2, kN, false, kInFlightStages>(halo, a.ld),
                                  2 * kWgmmaThreadsPerGroup, gpu, p, a, stream, w_map, x_map,
                                  x_apply);
                }
            }
            if (p.tile == 128) {
                // A conv1d's wide tile keeps its MMAs in flight where two
                // blocks per SM still fit its fourth weight stage (not beside
                // a raw input's staging buffer at the k11 d5 halo, nor beside
                // a one-tap conv's third window).
                if constexpr (!kPhases && kN == kCoutTile) {
                    const size_t smem = wgmma_smem_bytes<2, kN, kRawX, kInFlightStages>(halo, a.ld);
                    if (two_blocks_fit(gpu, smem)) {
                        return launch(conv1d_wgmma_kernel<2, false, kN, false, kHalfOut, kRawX,
                                                          kInFlightStages>,
                                      "conv1d_wgmma_kernel", smem, 2 * kWgmmaThreadsPerGroup, gpu,
                                      p, a, stream, w_map, x_map, x_apply);
                    }
                }
                launch(conv1d_wgmma_kernel<2, kPhases, kN, false, kHalfOut, kRawX>,
                       "conv1d_wgmma_kernel", wgmma_smem_bytes<2, kN, kRawX>(halo, a.ld),
                       2 * kWgmmaThreadsPerGroup, gpu, p, a, stream, w_map, x_map, x_apply);
            } else {
                launch(conv1d_wgmma_kernel<1, kPhases, kN, false, kHalfOut, kRawX>,
                       "conv1d_wgmma_kernel", wgmma_smem_bytes<1, kN, kRawX>(halo, a.ld),
                       kWgmmaThreadsPerGroup, gpu, p, a, stream, w_map, x_map, x_apply);
            }
        };
        using Narrow = std::integral_constant<int, kNarrowCoutTile>;
        using Wide = std::integral_constant<int, kCoutTile>;
        if constexpr (!kPhases && !kHalfOut && !kRawX) {
            if (a.Cout <= kNarrowCoutTile) return wgmma(Narrow{});
        }
        wgmma(Wide{});
    } else if (p.tile == 128) {
        launch(conv1d_mma_sync_kernel<128, kPhases, kHalfOut>, "conv1d_mma_sync_kernel",
               mma_sync_smem_bytes<128>(halo), kMmaThreads, gpu, p, a, stream);
    } else {
        launch(conv1d_mma_sync_kernel<64, kPhases, kHalfOut>, "conv1d_mma_sync_kernel",
               mma_sync_smem_bytes<64>(halo), kMmaThreads, gpu, p, a, stream);
    }
}

void launch(const Gpu& gpu, const Plan& p, HalfKernel which, const ConvArgs& a, bool half_out,
            const ChannelApply* x_apply, cudaStream_t stream) {
    if (has_phases(a)) {
        if (half_out) {
            launch_mapped<true, true, false>(gpu, p, which, a, nullptr, stream);
        } else {
            launch_mapped<true, false, false>(gpu, p, which, a, nullptr, stream);
        }
    } else if (x_apply != nullptr) {
        if (half_out) {
            launch_mapped<false, true, true>(gpu, p, which, a, x_apply, stream);
        } else {
            launch_mapped<false, false, true>(gpu, p, which, a, x_apply, stream);
        }
    } else if (half_out) {
        launch_mapped<false, true, false>(gpu, p, which, a, nullptr, stream);
    } else {
        launch_mapped<false, false, false>(gpu, p, which, a, nullptr, stream);
    }
}

}  // namespace igemm

}  // namespace

int conv1d_stats_parts(int Cin, int Cout, int Tin, int K, int stride, int pad, int groups) {
    const int Tout = conv1d_out_len(Tin, K, stride, pad, 1);
    if (Cout == 0 || Tout <= 0 || !conv1d_uses_pointwise(Cin, Cout, K, stride, pad, groups)) {
        return 0;
    }
    return (Tout + kPointwiseTile - 1) / kPointwiseTile;
}

int conv1d_out_len(int Tin, int K, int stride, int pad, int dilation) {
    return (Tin + 2 * pad - dilation * (K - 1) - 1) / stride + 1;
}

int conv_transpose1d_out_len(int Tin, int K, int stride, int pad, int output_padding) {
    return (Tin - 1) * stride - 2 * pad + (K - 1) + output_padding + 1;
}

int64_t conv1d_scratch_floats(int Cin, int Cout, int Tin, int K, int stride, int pad,
                              int dilation, int groups) {
    if (!conv1d_uses_gemm(Cin, K, groups) || conv1d_is_pointwise(K, stride, pad)) return 0;
    const int Tout = conv1d_out_len(Tin, K, stride, pad, dilation);
    if (Tout <= 0) return 0;
    if (conv1d_uses_taps(Cin, K, stride, pad, Tout)) {
        const TapChunks chunks = tap_chunks(Cin, Cout, Tout, K, dilation);
        return int64_t(Cout) * chunks.n + int64_t(Cin) * chunks.ldx;
    }
    const int reduction = Cin * K;
    return int64_t(reduction) * std::min(Tout, im2col_chunk_cols(reduction));
}

int64_t conv_transpose1d_scratch_floats(int Cin, int Cout, int Tin, int K, int groups) {
    return conv_transpose1d_uses_gemm(Cin, groups) ? int64_t(Cout) * K * Tin : 0;
}

void conv1d(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
            int Cin, int Cout, int Tin, int K, int stride, int pad, int dilation, int groups,
            const float* residual, float* scratch, cudaStream_t stream, GemmMath math,
            double* stats) {
    const int Tout = conv1d_out_len(Tin, K, stride, pad, dilation);
    if (Cout == 0 || Tout <= 0) return;
    // The pointwise pass's time tiles, one statistics partial each (0: not
    // that pass).
    const int pointwise_tiles = conv1d_stats_parts(Cin, Cout, Tin, K, stride, pad, groups);
    if (stats != nullptr && pointwise_tiles == 0) {
        throw CudaError("conv1d: statistics asked of a conv that gives none (check "
                        "conv1d_stats_parts first)");
    }
    if (pointwise_tiles > 0) {
        launch_dependent(conv1d_pointwise_kernel, dim3(unsigned(pointwise_tiles)),
                         dim3(kThreads), pointwise_smem_bytes(Cin, Cout), stream,
                         "conv1d_pointwise_kernel", x, w, b, y, Cin, Cout, Tout, residual, stats);
        return;
    }
    if (!conv1d_uses_gemm(Cin, K, groups)) {
        launch_dependent(conv1d_direct_kernel, per_channel_grid(Cout, Tout), dim3(kThreads),
                         0, stream, "conv1d_direct_kernel", x, w, b, y, Cin, Cout, Tin, Tout, K,
                         stride, pad, dilation, groups, residual);
        return;
    }
    if (conv1d_uses_taps(Cin, K, stride, pad, Tout)) {
        conv1d_taps(handle, x, w, b, y, Cin, Cout, Tin, Tout, K, pad, dilation, residual, scratch,
                    stream, math);
        return;
    }
    const bool residual_in_place = residual == y;
    const float beta = residual_in_place ? 1.f : 0.f;
    const int reduction = Cin * K;
    if (conv1d_is_pointwise(K, stride, pad)) {
        matmul(handle, false, false, Cout, Tout, Cin, w, Cin, x, Tin, beta, y, Tout, stream, math);
    } else {
        const int chunk = im2col_chunk_cols(reduction);
        for (int t0 = 0; t0 < Tout; t0 += chunk) {
            const int n = std::min(chunk, Tout - t0);
            launch_dependent(im2col_kernel, per_channel_grid(reduction, n), dim3(kThreads), 0,
                             stream, "im2col_kernel", x, scratch, Cin, Tin, stride, pad, dilation,
                             t0, n);
            matmul(handle, false, false, Cout, n, reduction, w, reduction, scratch, n, beta, y + t0,
                   Tout, stream, math);
        }
    }
    const float* residual_pass = residual_in_place ? nullptr : residual;
    if (b != nullptr || residual_pass != nullptr) {
        launch_epilogue(y, Tout, b, residual_pass, y, Cout, Tout, Tout, stream);
    }
}

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

void conv_transpose1d_depthwise_half_rows(const float* x, const float* w, const float* b,
                                          __half* rows, int C, int Tin, int K, int stride,
                                          int pad, int output_padding, HalfOperands form,
                                          cudaStream_t stream) {
    const int Tout = conv_transpose1d_out_len(Tin, K, stride, pad, output_padding);
    if (C == 0 || Tout <= 0) return;
    launch_dependent(depthwise_transposed_half_rows_kernel, half_rows_grid(C, Tout),
                     dim3(kHalfRowsThreads), 0, stream, "depthwise_transposed_half_rows_kernel",
                     DepthwiseTransposedSource{x, w, b, Tin, Tout, K, stride, pad}, rows,
                     half_rows_lo(rows, C, Tout, form), C);
}

void conv_transpose1d(cublasHandle_t handle, const float* x, const float* w, const float* b,
                      float* y, int Cin, int Cout, int Tin, int K, int stride, int pad,
                      int output_padding, int groups, float* scratch, cudaStream_t stream,
                      GemmMath math) {
    const int Tout = conv_transpose1d_out_len(Tin, K, stride, pad, output_padding);
    if (Cout == 0 || Tout <= 0) return;
    if (!conv_transpose1d_uses_gemm(Cin, groups)) {
        launch_dependent(conv_transpose1d_direct_kernel, per_channel_grid(Cout, Tout),
                         dim3(kThreads), 0, stream, "conv_transpose1d_direct_kernel", x, w, b, y,
                         Cin, Cout, Tin, Tout, K, stride, pad, groups);
        return;
    }
    matmul(handle, true, false, K * Cout, Tin, Cin, w, K * Cout, x, Tin, 0.f, scratch, Tin, stream,
           math);
    launch_dependent(col2im_kernel, per_channel_grid(Cout, Tout), dim3(kThreads), 0, stream,
                     "col2im_kernel", scratch, b, y, Cout, Tin, Tout, K, stride, pad);
}

}  // namespace kokoro::ops
