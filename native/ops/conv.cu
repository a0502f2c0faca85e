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

namespace kokoro::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kMinGemmReduction = 16;  // Cin * K below this: the direct kernel
constexpr int64_t kIm2colChunkFloats = int64_t(1) << 23;
// Floats of the larger of acc [Cout, n] and win [Cin, ~n] per time chunk.
constexpr int64_t kTapChunkFloats = int64_t(1) << 21;
constexpr int kAlignFloats = 4;  // 16 bytes

bool conv1d_uses_gemm(int Cin, int K, int groups) {
    return groups == 1 && Cin * K >= kMinGemmReduction;
}
bool conv1d_is_pointwise(int K, int stride, int pad) { return K == 1 && stride == 1 && pad == 0; }
// Per-tap GEMMs where im2col would need more than one chunk; shorter convs
// take im2col + ONE GEMM (3 launches instead of a window copy per alignment
// class and a GEMM per tap: these are latency bound).
bool conv1d_uses_taps(int Cin, int K, int stride, int pad, int Tout) {
    return stride == 1 && !conv1d_is_pointwise(K, stride, pad) &&
           int64_t(Cin) * K * Tout > kIm2colChunkFloats;
}
int im2col_chunk_cols(int reduction) {
    return int(std::max<int64_t>(256, kIm2colChunkFloats / reduction));
}
// The pointwise kernel: its time tile, and w plus the tile of x within the
// default shared memory.
constexpr int kPointwiseTile = 128;
constexpr int kPointwiseRows = 16;  // channels per warp pass (warp_partials)
size_t pointwise_smem_bytes(int Cin, int Cout) {
    return sizeof(float) * size_t(Cin) * (Cout + kPointwiseTile);
}
bool conv1d_uses_pointwise(int Cin, int Cout, int K, int stride, int pad, int groups) {
    return groups == 1 && conv1d_is_pointwise(K, stride, pad) &&
           pointwise_smem_bytes(Cin, Cout) <= kDefaultSharedBytes;
}
bool conv_transpose1d_uses_gemm(int Cin, int groups) {
    return groups == 1 && Cin >= kMinGemmReduction;
}

// The time chunking of a per-tap conv: n outputs per chunk (the acc pitch)
// and the window pitch ldx, both multiples of kAlignFloats.
struct TapChunks {
    int n, ldx;
};
TapChunks tap_chunks(int Cin, int Cout, int Tout, int K, int dilation) {
    const int64_t most = std::max<int64_t>(256, kTapChunkFloats / std::max(Cin, Cout));
    const int n = int(std::min<int64_t>(most, round_up(Tout, kAlignFloats))) / kAlignFloats *
                  kAlignFloats;
    return {n, round_up(n + dilation * (K - 1), kAlignFloats)};
}

// Calls fn(k, j) for every tap k of a transposed conv whose input step j
// lands on output t (t = j * stride - pad + k), k ascending.
template <typename Fn>
__device__ void for_each_transposed_tap(int t, int K, int stride, int pad, int Tin, Fn fn) {
    const int p = t + pad;
    for (int k = p % stride; k < K && k <= p; k += stride) {
        const int j = (p - k) / stride;
        if (j < Tin) fn(k, j);
    }
}

// win[ci, j] = x[ci, src0 + j] for j < ldx, zero outside [0, Tin). grid.y = ci.
__global__ void shifted_window_kernel(const float* x, float* win, int Tin, int src0, int ldx) {
    await_producers();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= ldx) return;
    const int src = src0 + j;
    win[int64_t(blockIdx.y) * ldx + j] =
        src >= 0 && src < Tin ? x[int64_t(blockIdx.y) * Tin + src] : 0.f;
}

// cols[r, tt] for r = k * Cin + ci and tt in [0, n): x at column
// (t0 + tt) * stride - pad + k * dil, zero outside [0, Tin). grid.y = r.
__global__ void im2col_kernel(const float* x, float* cols, int Cin, int Tin, int stride, int pad,
                              int dilation, int t0, int n) {
    await_producers();
    const int tt = blockIdx.x * blockDim.x + threadIdx.x;
    if (tt >= n) return;
    const int r = blockIdx.y, k = r / Cin, ci = r % Cin;
    const int src = (t0 + tt) * stride - pad + k * dilation;
    cols[int64_t(r) * n + tt] = src >= 0 && src < Tin ? x[int64_t(ci) * Tin + src] : 0.f;
}

// y[c, t] = in[c, t] (+ b[c]) (+ residual[c, t]) for t < n; in has row
// pitch ld_in, y and residual ld_y (either of b, residual may be null; in
// and residual may equal y). grid.y = c.
__global__ void epilogue_kernel(const float* in, int ld_in, const float* b, const float* residual,
                                float* y, int ld_y, int n) {
    await_producers();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const int64_t i = int64_t(blockIdx.y) * ld_y + t;
    float v = in[int64_t(blockIdx.y) * ld_in + t];
    if (b != nullptr) v += b[blockIdx.y];
    if (residual != nullptr) v += residual[i];
    y[i] = v;
}

// Direct grouped conv1d, one thread per y[co, t]. grid.y = co.
__global__ void conv1d_direct_kernel(const float* x, const float* w, const float* b, float* y,
                                     int Cin, int Cout, int Tin, int Tout, int K, int stride,
                                     int pad, int dilation, int groups, const float* residual) {
    await_producers();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= Tout) return;
    const int co = blockIdx.y;
    const int cin_g = Cin / groups, ci0 = co / (Cout / groups) * cin_g;
    const float* wr = w + int64_t(co) * K * cin_g;
    float acc = 0.f;
    for (int ci = 0; ci < cin_g; ++ci) {
        const float* xr = x + int64_t(ci0 + ci) * Tin;
        for (int k = 0; k < K; ++k) {
            const int src = t * stride - pad + k * dilation;
            if (src >= 0 && src < Tin) acc += wr[k * cin_g + ci] * xr[src];
        }
    }
    if (b != nullptr) acc += b[co];
    const int64_t i = int64_t(co) * Tout + t;
    if (residual != nullptr) acc += residual[i];
    y[i] = acc;
}

// Pointwise conv of few input channels (header comment): block = one
// 128-step time tile, warp w channels 16 w .. 16 w + 15 (then + 128, ...),
// lane l steps l + 32 i; sums in input-channel order from the bias. stats
// (may be null): each channel's partial over the tile (channel_stats.cuh).
__global__ void __launch_bounds__(kThreads)
    conv1d_pointwise_kernel(const float* x, const float* w, const float* b, float* y, int Cin,
                            int Cout, int T, const float* residual, double* stats) {
    await_producers();
    constexpr int kWarps = kThreads / 32, kPerLane = kPointwiseTile / 32;
    extern __shared__ float pointwise_smem[];
    float* const ws = pointwise_smem;        // w [Cout, Cin]
    float* const xs = ws + int64_t(Cout) * Cin;  // x [Cin, kPointwiseTile]
    const int t0 = blockIdx.x * kPointwiseTile, parts = int(gridDim.x);
    for (int i = threadIdx.x; i < Cout * Cin; i += kThreads) ws[i] = w[i];
    for (int i = threadIdx.x; i < Cin * kPointwiseTile; i += kThreads) {
        const int k = i / kPointwiseTile, t = t0 + i % kPointwiseTile;
        xs[i] = t < T ? x[int64_t(k) * T + t] : 0.f;
    }
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int c0 = warp * kPointwiseRows; c0 < Cout; c0 += kWarps * kPointwiseRows) {
        const int rows = min(kPointwiseRows, Cout - c0);
        float v[kPointwiseRows][kPerLane];
#pragma unroll
        for (int j = 0; j < kPointwiseRows; ++j) {
            const int c = min(c0 + j, Cout - 1);  // rows past Cout: computed, never stored
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) {
                const int t = t0 + lane + 32 * i;
                v[j][i] = (b != nullptr ? b[c] : 0.f) +
                          (residual != nullptr && t < T ? residual[int64_t(c) * T + t] : 0.f);
            }
        }
        for (int k = 0; k < Cin; ++k) {
            float xv[kPerLane];
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) xv[i] = xs[k * kPointwiseTile + lane + 32 * i];
#pragma unroll
            for (int j = 0; j < kPointwiseRows; ++j) {
                const float wv = ws[min(c0 + j, Cout - 1) * Cin + k];
#pragma unroll
                for (int i = 0; i < kPerLane; ++i) v[j][i] = fmaf(wv, xv[i], v[j][i]);
            }
        }
#pragma unroll
        for (int j = 0; j < kPointwiseRows; ++j) {
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) {
                const int t = t0 + lane + 32 * i;
                if (j < rows && t < T) y[int64_t(c0 + j) * T + t] = v[j][i];
            }
        }
        if (stats != nullptr) {
            warp_partials(v, T - t0, stats + (int64_t(c0) * parts + blockIdx.x) * kPartialDoubles,
                          int64_t(parts) * kPartialDoubles, rows);
        }
    }
}

// Overlap-add of the per-tap GEMM output cols [K * Cout, Tin] (+ bias). grid.y = co.
__global__ void col2im_kernel(const float* cols, const float* b, float* y, int Cout, int Tin,
                              int Tout, int K, int stride, int pad) {
    await_producers();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= Tout) return;
    const int co = blockIdx.y;
    float acc = 0.f;
    for_each_transposed_tap(t, K, stride, pad, Tin, [&](int k, int j) {
        acc += cols[(int64_t(k) * Cout + co) * Tin + j];
    });
    if (b != nullptr) acc += b[co];
    y[int64_t(co) * Tout + t] = acc;
}

// Direct grouped transposed conv, one thread per y[co, t]. grid.y = co.
__global__ void conv_transpose1d_direct_kernel(const float* x, const float* w, const float* b,
                                               float* y, int Cin, int Cout, int Tin, int Tout,
                                               int K, int stride, int pad, int groups) {
    await_producers();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= Tout) return;
    const int co = blockIdx.y;
    const int cout_g = Cout / groups, cin_g = Cin / groups;
    const int g = co / cout_g, co_l = co % cout_g;
    float acc = 0.f;
    for_each_transposed_tap(t, K, stride, pad, Tin, [&](int k, int j) {
        for (int ci = g * cin_g; ci < (g + 1) * cin_g; ++ci) {
            acc += w[(int64_t(ci) * K + k) * cout_g + co_l] * x[int64_t(ci) * Tin + j];
        }
    });
    if (b != nullptr) acc += b[co];
    y[int64_t(co) * Tout + t] = acc;
}

// A depthwise transposed conv's output as a write_half_rows source (index
// c Tout + t), each value as conv_transpose1d_direct_kernel computes it:
// taps ascending, then the bias.
struct DepthwiseTransposedSource {
    const float* x;
    const float* w;
    const float* b;
    int Tin, Tout, K, stride, pad;
    __device__ float operator[](int64_t i) const {
        const int c = int(i / Tout), t = int(i - int64_t(c) * Tout);
        float acc = 0.f;
        for_each_transposed_tap(t, K, stride, pad, Tin, [&](int k, int j) {
            acc += w[int64_t(c) * K + k] * x[int64_t(c) * Tin + j];
        });
        if (b != nullptr) acc += b[c];
        return acc;
    }
};

__global__ void depthwise_transposed_half_rows_kernel(DepthwiseTransposedSource x, __half* y,
                                                      __half* y_lo, int C) {
    await_producers();
    write_half_rows(x, y, y_lo, C, x.Tout, [](int) { return [](float v) { return v; }; });
}

dim3 per_channel_grid(int C, int T) { return dim3(unsigned((T + kThreads - 1) / kThreads), unsigned(C)); }

void launch_epilogue(const float* in, int ld_in, const float* b, const float* residual, float* y,
                     int C, int ld_y, int n, cudaStream_t stream) {
    launch_dependent(epilogue_kernel, per_channel_grid(C, n), dim3(kThreads), 0, stream,
                     "epilogue_kernel", in, ld_in, b, residual, y, ld_y, n);
}

// The per-tap path (header comment); scratch holds acc [Cout, n] then win [Cin, ldx].
void conv1d_taps(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
                 int Cin, int Cout, int Tin, int Tout, int K, int pad, int dilation,
                 const float* residual, float* scratch, cudaStream_t stream, GemmMath math) {
    const TapChunks chunks = tap_chunks(Cin, Cout, Tout, K, dilation);
    float* acc = scratch;
    float* win = scratch + int64_t(Cout) * chunks.n;
    for (int t0 = 0; t0 < Tout; t0 += chunks.n) {
        const int n = std::min(chunks.n, Tout - t0);
        bool first = true;
        for (int r = 0; r < kAlignFloats; ++r) {
            bool copied = false;
            for (int k = 0; k < K; ++k) {
                const int offset = k * dilation;
                if (offset % kAlignFloats != r) continue;
                if (!copied) {
                    launch_dependent(shifted_window_kernel, per_channel_grid(Cin, chunks.ldx),
                                     dim3(kThreads), 0, stream, "shifted_window_kernel", x, win,
                                     Tin, t0 - pad + r, chunks.ldx);
                    copied = true;
                }
                matmul(handle, false, false, Cout, n, Cin, w + int64_t(k) * Cin, K * Cin,
                       win + (offset - r), chunks.ldx, first ? 0.f : 1.f, acc, chunks.n, stream,
                       math);
                first = false;
            }
        }
        launch_epilogue(acc, chunks.n, b, residual == nullptr ? nullptr : residual + t0, y + t0,
                        Cout, Tout, n, stream);
    }
}

// The implicit-GEMM conv on the tensor cores (header comment): two kernels
// of one design, mma.sync (sm_80 on) and wgmma (sm_90a), sharing the operand
// copies, the reduction pipeline, the launch plan and the split sums.
namespace igemm {

constexpr int kBK = 64;            // reduction channels per chunk
constexpr int kPieces = kBK / 8;   // 16-byte pieces per chunk row
constexpr int kPitch = kBK + 8;    // halves per padded shared row: 144 bytes, ldmatrix conflict-free
constexpr int kStages = 3;         // weight tiles in flight
constexpr int kCoutTile = 128;     // output channels per block
// ... or, on the wgmma kernel, for convs of few output channels (conv_post:
// 22), whose 128-row tile spent ~6x the needed MMAs.
constexpr int kNarrowCoutTile = 32;

// The arguments of both kernels: for each of `phases` output phases, the
// GEMM sum[c, q] = sum_{k, ci} w_p[c, k, ci] x[q + k * dil - pad, ci] over
// Cout channels and Tout columns, then y = w_scale * sum (+ b) (+ residual)
// (a conv1d's times out_scale) through the output map below; x: half rows
// [Tin, ld], w: FP16, a conv1d's [Cout, K, ld], a transposed conv's [K
// phases, Cout, ld] (phase
// p, channel c, tap k at row ((K - 1 - k) phases + p) Cout + c: see
// transposed_call); residual may equal y. Split operands: x_lo and w_lo
// hold the lo parts (null when rounded). grid (time tiles, channel tiles
// (BlockRows), splits): split z sums reduction chunks [z *
// chunks_per_split, (z + 1) * chunks_per_split); with more than one split
// each writes its sum to partial[z] ([phases, Cout, Tout]) and
// split_sum_kernel finishes. stats (one split only): y's statistics
// partials, one per time tile (+ one for the reflection pad's element).
// The output map: column q of phase p is y's time step t = q * phases + p -
// shift, kept where 0 <= t < y_len, at y[c, y_left + t] (rows of y_left +
// y_len); y_left 1 also stores t = 1 at y[c, 0] (the reflection pad (1,
// 0)). A conv1d has phases 1, shift 0, y_len Tout, y_left 0; a polyphase
// transposed conv one phase per stride step. The kernels with kHalfOut
// store y as FP16 (y_half): the rounded values are y, and its statistics
// are theirs. A conv1d's residual may be FP16 (residual_is_half). FP16 rows
// of y_left + y_len values are half_channels_pitch(y_left + y_len) apart
// (ops.h; row_pitch).
// (128 bytes, no 64-bit fields: a larger parameter block cost the wgmma
// kernels ~50 bytes of spills.)
struct ConvArgs {
    const __half* x;
    const __half* x_lo;
    const __half* w;
    const __half* w_lo;
    const float* b;
    union {
        const float* residual;
        const __half* residual_half;  // residual_is_half
    };
    union {
        float* y;
        __half* y_half;  // the kHalfOut kernels' y: FP16, channels-first
    };
    float* partial;  // null: one split
    double* stats;   // null: none
    float w_scale;
    float out_scale;  // y = (w_scale * sum + b + residual) * out_scale
    int ld, Cout, Tin, Tout, K, pad, dilation, chunks_per_split;
    int phases, shift, y_len;
    short y_left;
    bool residual_is_half;
};
static_assert(sizeof(ConvArgs) == 128, "the kernels' parameter block");

// The residual at `at` (residual set), as fp32.
__device__ float residual_at(const ConvArgs& a, int64_t at) {
    return a.residual_is_half ? __half2float(a.residual_half[at]) : a.residual[at];
}

// The pitch of y's or the residual's rows of `len` values: FP16 ones at
// half_channels_pitch (ops.h).
__host__ __device__ inline int64_t row_pitch(int len, bool half) {
    return half ? half_channels_pitch(len) : len;
}

// Reduction chunks: 64 channels of one product of operand parts each; split
// operands take three per 64 channels.
__host__ __device__ int reduction_chunks(int ld, bool split) {
    return (split ? 3 : 1) * ((ld + kBK - 1) / kBK);
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

// ------------------------------------------------------------- mma.sync
// A block computes 128 (Cout) x kTile (T) with 8 warps (64 x kTile / 4
// each) of m16n8k16 MMAs, both operands by ldmatrix.
constexpr int kWarpsM = 2, kWarpsN = 4;
constexpr int kMmaThreads = 32 * kWarpsM * kWarpsN;
constexpr int kWarpM = kCoutTile / kWarpsM;  // 64
constexpr int kMTiles = kWarpM / 16;          // m16n8k16 tiles per warp along Cout

template <int kTile>
size_t mma_sync_smem_bytes(int halo) {
    return std::max(staged_tile_bytes<kTile>(),
                    sizeof(__half) * kPitch *
                        (size_t(kStages) * kCoutTile +
                         size_t(window_buffers(halo)) * (kTile + halo)));
}

template <int kTile, bool kPhases, bool kHalfOut = false>
__global__ void __launch_bounds__(kMmaThreads, 2) conv1d_mma_sync_kernel(const ConvArgs a) {
    await_producers();
    constexpr int kWarpN = kTile / kWarpsN;
    constexpr int kNTiles = kWarpN / 8;
    static_assert(kNTiles % 2 == 0, "B fragments load two n-tiles per ldmatrix.x4");
    extern __shared__ uint4 smem_vec[];
    __half* const w_smem = reinterpret_cast<__half*>(smem_vec);
    __half* const win_smem = w_smem + kStages * kCoutTile * kPitch;
    const int rows = kTile + a.dilation * (a.K - 1);
    const BlockRows<kPhases> block_rows(a);
    const int t0 = blockIdx.x * kTile;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / kWarpsN * kWarpM, wn = warp % kWarpsN * kWarpN;
    // ldmatrix row addresses: A rows lane % 16, k half lane / 16; B (rows are
    // time steps) n = lane % 8 + 8 * (lane / 16), k half (lane / 8) % 2.
    const int a_off = (wm + lane % 16) * kPitch + lane / 16 * 8;
    const int b_off = (wn + lane % 8 + lane / 16 * 8) * kPitch + lane / 8 % 2 * 8;

    float acc[kMTiles][kNTiles][4] = {};
    reduction_pipeline<false, false, kStages, !kPhases>(
        a,
        [&](int c, int k, int stage, int buffer) {
            load_weights<kMmaThreads, false>(w_smem + stage * kCoutTile * kPitch, a, block_rows,
                                             k, c);
            if (k == 0) {
                load_window<kMmaThreads>(win_smem + buffer * rows * kPitch, a, t0 - a.pad, rows,
                                         c);
            }
        },
        [&](int stage, int buffer, int k, int) {
            const __half* as = w_smem + stage * kCoutTile * kPitch + a_off;
            const __half* bs = win_smem + (buffer * rows + k * a.dilation) * kPitch + b_off;
#pragma unroll
            for (int kk = 0; kk < kBK; kk += 16) {
                uint32_t af[kMTiles][4], bf[kNTiles / 2][4];
#pragma unroll
                for (int mi = 0; mi < kMTiles; ++mi) ldmatrix_x4(af[mi], as + mi * 16 * kPitch + kk);
#pragma unroll
                for (int np = 0; np < kNTiles / 2; ++np) {
                    ldmatrix_x4(bf[np], bs + np * 16 * kPitch + kk);
                }
#pragma unroll
                for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
                    for (int ni = 0; ni < kNTiles; ++ni) {
                        mma_f16(acc[mi][ni], af[mi], bf[ni / 2][ni % 2 * 2],
                                bf[ni / 2][ni % 2 * 2 + 1]);
                    }
                }
            }
        });

    // acc[mi][ni][2 half + e]: channel wm + 16 mi + g + 8 half, time wn + 8 ni + 2 tq + e.
    float* const tile = staged_tile(smem_vec);
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float* row = tile + (wm + mi * 16 + g + 8 * half) * kStagedPitch<kTile> + wn + 2 * tq;
#pragma unroll
            for (int ni = 0; ni < kNTiles; ++ni) {
#pragma unroll
                for (int e = 0; e < 2; ++e) row[ni * 8 + e] = acc[mi][ni][2 * half + e];
            }
        }
    }
    if constexpr (kPhases) {
        store_phases_tile<kTile, kMmaThreads, kHalfOut>(a, tile, t0, block_rows);
    } else {
        store_staged_tile<kTile, kMmaThreads, kCoutTile, kHalfOut>(a, tile, t0, block_rows.c0);
    }
}

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

// Channel c's statistics partial over this block's kThreads columns, v the
// value stored at the thread's column (inside: a column of y): what a split
// reduction's statistics are (the conv kernel's blocks cannot write them:
// none sees final sums).
__device__ void store_block_stats(const ConvArgs& a, int c, bool inside, float v) {
    __shared__ double scratch[kThreads / 32];
    const int n = min(int(blockDim.x), a.Tout - int(blockIdx.x * blockDim.x));
    const double sum = block_sum(inside ? double(v) : 0.0, scratch);
    const double d = inside ? double(v) - sum / n : 0.0;
    const double m2 = block_sum(d * d, scratch);
    if (threadIdx.x == 0) {
        double* s = a.stats + stats_index(a, c, int(blockIdx.x));
        s[0] = n;
        s[1] = sum;
        s[2] = m2;
    }
}

// The splits' sums: sum[p, c, q] = sum_z partial[z, p, c, q], z in order
// (fixed summation order: repeatable bits), then stored as the conv kernel
// stores; a conv1d's (no phases) with statistics also writes each block's
// partial over its kThreads columns (store_block_stats). grid.y = p Cout + c.
template <bool kPhases, bool kHalfOut = false>
__global__ void split_sum_kernel(const ConvArgs a, int splits) {
    await_producers();
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = int(blockIdx.y), p = kPhases ? row / a.Cout : 0, c = row - p * a.Cout;
    const int t = kPhases ? q * a.phases + p - a.shift : q;  // the output map
    const bool inside = q < a.Tout && t >= 0 && t < a.y_len;
    float v = 0.f;
    if (inside) {
        const int64_t i = int64_t(row) * a.Tout + q, n = int64_t(a.phases) * a.Cout * a.Tout;
        float sum = 0.f;
        for (int z = 0; z < splits; ++z) sum += a.partial[z * n + i];
        const float u = fmaf(sum, a.w_scale, a.b != nullptr ? a.b[c] : 0.f);
        const int len = a.y_len + a.y_left;  // the output map's rows
        const int64_t at = c * row_pitch(len, kHalfOut) + a.y_left + t;
        const int64_t res_at = c * row_pitch(len, a.residual_is_half) + a.y_left + t;
        v = (u + (a.residual != nullptr ? residual_at(a, res_at) : 0.f)) * a.out_scale;
        v = store_value<kHalfOut>(a.y, kHalfOut ? a.y_half : nullptr, at, v);
        if (kPhases && t == 1 && a.y_left != 0) store_pad<kHalfOut>(a, c, u);
    }
    if (kPhases || a.stats == nullptr) return;  // uniform over the block
    store_block_stats(a, c, inside, v);
}

// A conv1d's statistics partials read back from y, as split_sum_kernel
// writes them: after its split reduction ran inside the conv's blocks
// (kInBlock). grid.y = c.
template <bool kHalfOut>
__global__ void split_stats_kernel(const ConvArgs a) {
    await_producers();
    const int q = int(blockIdx.x * blockDim.x + threadIdx.x), c = int(blockIdx.y);
    const bool inside = q < a.Tout;
    const int64_t at = c * row_pitch(a.Tout, kHalfOut) + q;
    float v = 0.f;
    if (inside) v = kHalfOut ? __half2float(a.y_half[at]) : a.y[at];
    store_block_stats(a, c, inside, v);
}

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

void conv_weight_to_device_layout(const float* src, float* dst, int64_t A, int B, int K) {
    for (int64_t a = 0; a < A; ++a) {
        const float* s = src + a * B * K;
        float* d = dst + a * B * K;
        for (int k = 0; k < K; ++k) {
            for (int i = 0; i < B; ++i) d[int64_t(k) * B + i] = s[int64_t(i) * K + k];
        }
    }
}

float conv_weight_to_half_rows(const float* src, __half* dst, int64_t A, int K, int B,
                               HalfOperands form) {
    return weight_rows_to_half(src, dst, A * K, B, half_rows_pitch(B), form);
}

float weight_rows_to_half(const float* src, __half* dst, int64_t rows, int cols, int pitch,
                          HalfOperands form) {
    float most = 0.f;
    for (int64_t i = 0; i < rows * cols; ++i) most = std::max(most, std::fabs(src[i]));
    int exponent = 0;  // most = f * 2^exponent, f in [0.5, 1)
    std::frexp(most, &exponent);
    const float up = most > 0.f ? std::ldexp(1.f, std::clamp(14 - exponent, -100, 100)) : 1.f;
    __half* lo = form == HalfOperands::kSplit ? dst + rows * pitch : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
        for (int i = 0; i < pitch; ++i) {
            const float v = i < cols ? src[r * cols + i] * up : 0.f;  // exact: a power of two
            __half hi, rest;
            split_half(v, hi, rest);
            dst[r * pitch + i] = hi;
            if (lo != nullptr) lo[r * pitch + i] = rest;
        }
    }
    return 1.f / up;  // exact: a power of two
}

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

// A strided conv1d's polyphase form (conv1d_strided_half_rows): taps m of
// floor(-pad / stride) .. floor((K - 1 - pad) / stride), as a stride-1 conv
// of `taps` taps with left pad `pad`.
struct Polyphase {
    int taps, pad;
    Polyphase(int K, int stride, int conv_pad)
        : taps(floor_div(K - 1 - conv_pad, stride) - floor_div(-conv_pad, stride) + 1),
          pad(-floor_div(-conv_pad, stride)) {}
    static int floor_div(int a, int b) { return a >= 0 ? a / b : -((b - 1 - a) / b); }
};

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

float conv_transpose_weight_to_half_rows(const float* src, __half* dst, int Cin, int K, int Cout,
                                         HalfOperands form) {
    std::vector<float> tap_major(size_t(K) * Cout * Cin);
    for (int64_t ci = 0; ci < Cin; ++ci) {
        for (int64_t k = 0; k < K; ++k) {
            for (int64_t co = 0; co < Cout; ++co) {
                tap_major[size_t((k * Cout + co) * Cin + ci)] = src[(ci * K + k) * Cout + co];
            }
        }
    }
    return conv_weight_to_half_rows(tap_major.data(), dst, int64_t(K) * Cout, 1, Cin, form);
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

int64_t conv_weight_polyphase_halves(int Cout, int K, int Cin, int stride, int pad) {
    return int64_t(Cout) * Polyphase(K, stride, pad).taps * stride * half_rows_pitch(Cin);
}

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

float conv_weight_to_polyphase_half_rows(const float* src, __half* dst, int Cout, int K, int Cin,
                                         int stride, int pad) {
    const Polyphase poly(K, stride, pad);
    const int ld = half_rows_pitch(Cin), width = stride * ld;
    std::vector<float> rows(size_t(conv_weight_polyphase_halves(Cout, K, Cin, stride, pad)), 0.f);
    for (int64_t co = 0; co < Cout; ++co) {
        for (int k = 0; k < K; ++k) {
            const int m = Polyphase::floor_div(k - pad, stride), p = k - pad - m * stride;
            float* const to = rows.data() + (co * poly.taps + m + poly.pad) * width + p * ld;
            std::copy_n(src + (co * K + k) * Cin, Cin, to);
        }
    }
    return conv_weight_to_half_rows(rows.data(), dst, Cout, poly.taps, width,
                                    HalfOperands::kRounded);
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
