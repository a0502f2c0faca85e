// The op interface of the native engine: one function per op, grouped by op
// family (one .cu file per family under native/ops/). Model parts
// (native/model/) compose these ops; the Python CPU backend (kokoro_gpu/ops/)
// holds the reference implementation of every one of them.
//
// Conventions, shared by every op:
// - All tensors are float32 device pointers, dense, row-major, except the
//   FP16 "half rows" operands of the tensor-core convolution (half_rows.cuh:
//   time-major [T, ld], ld = C rounded up to 8, pad columns zero), rounded
//   or split (HalfOperands below).
// - Sequences in the convolutional parts are channels-first: [C, T] (the
//   PyTorch [1, C, T] layout without the batch axis). Linear layers and
//   attention work on time-major [T, C] rows.
// - Weights have weight norm already folded. Linear weights are in
//   PyTorch's layout [out, in]; conv weights have the kernel axis moved to
//   the middle (conv_weight_to_device_layout): Conv1d [Cout, K, Cin/groups],
//   ConvTranspose1d [Cin, K, Cout/groups].
// - Every op is enqueued on `stream` and returns immediately; launch errors
//   are checked (KOKORO_CHECK_LAUNCH) and thrown as kokoro::CudaError.
// - Output buffers never alias inputs unless the op says "in place".
// - Ops taking a cuBLAS handle bind it to `stream`; the handle must stay in
//   CUBLAS_DEFAULT_MATH. Their GEMMs run in the GemmMath they are given:
//   plain fp32 by default, or TF32 tensor cores (fp32 accumulation) where the
//   caller opts in per call.
// - Ops taking `scratch` need a device buffer of at least the size the
//   matching *_scratch_floats function returns (0 means it may be null); the
//   buffer may be shared between ops enqueued on the same stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cufft.h>

namespace kokoro::ops {

// The arithmetic of a GEMM: kFp32 is cublasSgemm (no TF32); kTf32 rounds the
// operands to TF32 on the tensor cores and accumulates in fp32.
enum class GemmMath { kFp32 = 0, kTf32 = 1 };

// ---------------------------------------------------------------- linear.cu
// Row-major GEMM on cuBLAS: C[M, N] = op(A) @ op(B) + beta * C, where op(A) is
// [M, K] (A stored [K, M] when trans_a) and op(B) is [K, N] (B stored [N, K]
// when trans_b); lda, ldb, ldc are row pitches in elements.
void matmul(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, const float* A,
            int lda, const float* B, int ldb, float beta, float* C, int ldc, cudaStream_t stream,
            GemmMath math = GemmMath::kFp32);
// `batch` independent row-major GEMMs as one cublasSgemmStridedBatched, plain
// fp32: C_b = op(A_b) @ op(B_b) + beta * C_b with A_b = A + b * stride_a (B_b,
// C_b alike; strides in elements), each as in matmul.
void matmul_batched(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K,
                    const float* A, int lda, int64_t stride_a, const float* B, int ldb,
                    int64_t stride_b, float beta, float* C, int ldc, int64_t stride_c, int batch,
                    cudaStream_t stream);
// y[rows, out] = x[rows, in] @ w[out, in]^T (+ b[out]) (+ beta * y). Plain GEMM
// on cuBLAS (the one vendor op besides the FFTs). `b` may be null.
void linear(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
            int rows, int in, int out, cudaStream_t stream, float beta = 0.f,
            GemmMath math = GemmMath::kFp32);

// Which kernel runs a tensor-core op on FP16 operands (the split linear,
// the half-rows convs): the best this build and GPU run (wgmma where the
// build holds sm_90a code and the GPU is compute capability 9.0, else
// mma.sync), or mma.sync everywhere (tests check both on Hopper).
enum class HalfKernel { kBest, kMmaSync };

// Linear on split FP16 operands (precision "fast"'s ALBERT and bert_encoder,
// where TF32 or rounded FP16 would change the durations): each operand v =
// hi + lo (hi = fp16(v), lo = fp16(v - hi)), stored hi part then lo part,
// rows zero-padded to split_pitch(in). The kernel sums x_hi w_hi + x_hi w_lo
// + x_lo w_hi per 64-wide reduction chunk on the tensor cores and adds each
// chunk's sum to fp32 accumulators in registers: the tensor cores' own
// accumulation (which truncates) never runs longer than one chunk, so the
// result is as accurate as an fp32 GEMM's (cuBLAS's FP16 GEMM on the same
// split operands was ~5x SGEMM's error, enough to double the audio error).
constexpr int kSplitChunk = 64;
// Row pitch (in halves) of each part of a split operand with `in` columns.
inline int split_pitch(int in) { return kSplitChunk * ((in + kSplitChunk - 1) / kSplitChunk); }
// Host-side: w [out, in] -> dst [2, out, split_pitch(in)] (hi, then lo),
// stored as weight_rows_to_half stores it; returns its w_scale (exact).
float linear_weight_to_split_half(const float* w, __half* dst, int out, int in);
// y[rows, out] = (x[rows, in] @ w^T) * w_scale (+ beta * y) (+ b[out]), w as
// linear_weight_to_split_half stores it; x_split: 2 * rows *
// split_pitch(in) FP16 scratch for x's parts (x null: x_split holds them
// already, as gelu_new_split writes them); scratch:
// linear_split_half_scratch_floats(...) floats (the partial sums where the
// reduction is split over blocks; 0: may be null). |x| must stay within
// FP16's range. y may not alias x. row_chunks (device [rows], may be null):
// rows stacked from several inputs (a batch's utterances), row m's reduction
// split every row_chunks[m] chunks as a call on its input alone plans it
// (linear_split_half_row_chunks); each row then has the bits of a call on its
// input alone (the splits are added in order inside one block: no scratch).
void linear_split_half(const float* x, __half* x_split, const __half* w_split, float w_scale,
                       const float* b, float* y, int rows, int in, int out, float* scratch,
                       cudaStream_t stream, float beta = 0.f,
                       HalfKernel kernel = HalfKernel::kBest,
                       const int32_t* row_chunks = nullptr);
// The scratch floats of linear_split_half (with_row_chunks: a call given row_chunks).
int64_t linear_split_half_scratch_floats(int rows, int in, int out,
                                         HalfKernel kernel = HalfKernel::kBest,
                                         bool with_row_chunks = false);
// linear_split_half's row_chunks for inputs of `lengths` rows stacked: each
// row the reduction chunks per split that a call on its input alone plans.
std::vector<int32_t> linear_split_half_row_chunks(const std::vector<int>& lengths, int in,
                                                  int out, HalfKernel kernel = HalfKernel::kBest);
// `batch` GEMMs on operands split already, y_i [rows, out] (row pitch ldy)
// = (x_i @ w_i^T) * scale with x_i = x_split + i * x_stride ([2, rows,
// pitch]: hi, then lo), w_i = w_split + i * w_stride ([2, out, pitch]), y_i
// = y + i * y_stride; pitch a multiple of kSplitChunk, pad columns zero.
// The same kernels and accuracy as linear_split_half, the reduction never
// split over blocks.
void matmul_split_half_batched(const __half* x_split, int64_t x_stride, const __half* w_split,
                               int64_t w_stride, float scale, float* y, int ldy, int64_t y_stride,
                               int rows, int out, int pitch, int batch, cudaStream_t stream,
                               HalfKernel kernel = HalfKernel::kBest);
// A split linear's output as its blocks left it, for the op that reads it to
// add up (one kernel fewer in a serial chain: ALBERT's GELU):
// value i = (partial[0][i] + partial[1][i] + ...) * w_scale + beta * y[i],
// as linear_split_half's own sum kernel forms it. From a pointer: that
// tensor (partial null).
struct SplitSums {
    const float* partial = nullptr;  // [splits, n]; null: y holds the values
    const float* y = nullptr;
    int64_t n = 0;
    int splits = 1;
    float w_scale = 1.f;
    float beta = 0.f;
    SplitSums(const float* x) : y(x) {}  // NOLINT(google-explicit-constructor)
    SplitSums(const float* partial_, int splits_, int64_t n_, float w_scale_, const float* y_,
              float beta_)
        : partial(partial_), y(y_), n(n_), splits(splits_), w_scale(w_scale_), beta(beta_) {}
    __host__ __device__ float operator[](int64_t i) const {
        if (partial == nullptr) return y[i];
        float sum = partial[i];
        for (int z = 1; z < splits; ++z) sum += partial[z * n + i];
        float v = sum * w_scale;
        if (beta != 0.f) v += beta * y[i];
        return v;
    }
    // Its values from element `offset` on (a stacked utterance's rows).
    SplitSums from(int64_t offset) const {
        SplitSums s = *this;
        if (s.partial != nullptr) s.partial += offset;
        if (s.y != nullptr) s.y += offset;
        return s;
    }
};
// linear_split_half without a bias, its split sums left to the reader:
// returns them (y: beta's term, or the values where the reduction was not
// split). The scratch must stay untouched until the reader has run.
SplitSums linear_split_half_sums(const float* x, __half* x_split, const __half* w_split,
                                 float w_scale, float* y, int rows, int in, int out,
                                 float* scratch, cudaStream_t stream, float beta = 0.f,
                                 HalfKernel kernel = HalfKernel::kBest,
                                 const int32_t* row_chunks = nullptr);

// ------------------------------------------------------------ elementwise.cu
// out[t, :] = table[ids[t], :] for t < T.
void embedding(const int32_t* ids, const float* table, float* out, int T, int dim,
               cudaStream_t stream);
// out[t, :] = word[ids[t]] + pos[p] + type0, for ALBERT's embeddings: p =
// positions[t] (device; stacked utterances' positions within their own), or
// t where positions is null.
void albert_embeddings(const int32_t* ids, const float* word, const float* pos,
                       const float* type0, float* out, int T, int dim, cudaStream_t stream,
                       const int32_t* positions = nullptr);
// y [rows, cols] = tanh form of GELU (HF "gelu_new") of x + bias (bias
// [cols], may be null: the producing linear layer's, fused here); y may be
// x's tensor.
void gelu_new(SplitSums x, float* y, int64_t rows, int cols, const float* bias,
              cudaStream_t stream);
// The same written as the split FP16 operand of the linear that reads it
// (y_split [2, rows, split_pitch(cols)], as linear_split_half's x_split):
// no fp32 tensor, no split pass.
void gelu_new_split(SplitSums x, __half* y_split, int64_t rows, int cols, const float* bias,
                    cudaStream_t stream);
// y = x >= 0 ? x : slope * x (y may equal x).
void leaky_relu(const float* x, float* y, int64_t n, float slope, cudaStream_t stream);
// out = (a + b) * scale (out may equal a or b).
void add_scaled(const float* a, const float* b, float* out, int64_t n, float scale,
                cudaStream_t stream);
// n rounded up to a multiple of `to` (both positive), in n's type.
template <typename T, typename U>
__host__ __device__ constexpr T round_up(T n, U to) {
    return (n + T(to) - 1) / T(to) * T(to);
}
// Row pitch of the half rows of a C-channel tensor: C rounded up to 8 (16 bytes).
__host__ __device__ inline int half_rows_pitch(int C) { return round_up(C, 8); }
// The FP16 operands of the tensor-core conv, in one of two forms. kRounded
// (precision "fast"): each value rounded to FP16 (11 significant bits).
// kSplit (precision "fp32"): v = hi + lo, hi = fp16(v), lo = fp16(v - hi)
// (~22 significant bits), the lo part stored right after the hi part in the
// same layout; the conv then sums x_hi w_hi + x_hi w_lo + x_lo w_hi (three
// FP16 products, fp32 accumulation), float32-level accuracy on the tensor
// cores.
enum class HalfOperands { kRounded, kSplit };
// FP16 parts stored per value.
inline int half_parts(HalfOperands form) { return form == HalfOperands::kSplit ? 2 : 1; }
// The lo rows of half rows [T, half_rows_pitch(C)] in `form` (kSplit: after
// the hi rows; null when rounded).
inline __half* half_rows_lo(__half* rows, int C, int T, HalfOperands form) {
    return form == HalfOperands::kSplit ? rows + int64_t(T) * half_rows_pitch(C) : nullptr;
}
// Row pitch of an FP16 channels-first tensor [C, T] (FloatOrHalf's f16): T
// rounded up to 8, so that every row starts 16-byte aligned, as the TMA
// copies of a conv's raw input (HalfInput) need. Columns T.. are never read
// as values.
__host__ __device__ inline int half_channels_pitch(int T) { return round_up(T, 8); }
// The values such a tensor [C, T] holds, its row padding included.
inline int64_t half_channels_values(int C, int T) { return int64_t(C) * half_channels_pitch(T); }
// A channels-first tensor in fp32, or in FP16 where an AdaIN reads it next
// (conv1d_half_rows writes it, adain_half_rows or the next conv's window
// loads read it with its producer's statistics), perhaps also a conv's
// residual: half the bytes at FP16's relative precision (fast precision's
// residual blocks, generator.cu); FP16 rows at half_channels_pitch(T). At
// most one pointer is set (none: no tensor); a plain pointer converts.
template <typename F, typename H>
struct FloatOrHalfT {
    F* f32 = nullptr;
    H* f16 = nullptr;
    FloatOrHalfT(std::nullptr_t) {}  // NOLINT(google-explicit-constructor)
    FloatOrHalfT(F* p) : f32(p) {}  // NOLINT(google-explicit-constructor)
    FloatOrHalfT(H* p) : f16(p) {}  // NOLINT(google-explicit-constructor)
    template <typename F2, typename H2>  // to the const form
    FloatOrHalfT(const FloatOrHalfT<F2, H2>& o) : f32(o.f32), f16(o.f16) {}  // NOLINT
};
using FloatOrHalf = FloatOrHalfT<float, __half>;
using ConstFloatOrHalf = FloatOrHalfT<const float, const __half>;
// A tensor read as the sum of up to three same-shaped tensors times a scale,
// ((x0 + x1) + x2) * scale, in fp32: the mean of the generator's residual
// blocks, its sums formed by the op that reads it rather than by passes of
// their own. The terms are all fp32 [C, T], or all FP16 channels-first (rows
// at half_channels_pitch(T): fast precision's block outputs). From a single
// pointer: that tensor.
struct ScaledSum {
    ConstFloatOrHalf x0 = nullptr;
    ConstFloatOrHalf x1 = nullptr;  // null: none
    ConstFloatOrHalf x2 = nullptr;  // null: none (set only with x1)
    float scale = 1.f;
    ScaledSum(const float* x) : x0(x) {}  // NOLINT(google-explicit-constructor)
    ScaledSum(const float* a, const float* b, float s, const float* c = nullptr)
        : x0(a), x1(b), x2(c), scale(s) {}
    ScaledSum(const __half* a, const __half* b, float s, const __half* c = nullptr)
        : x0(a), x1(b), x2(c), scale(s) {}
    bool half() const { return x0.f16 != nullptr; }
    bool single() const { return x1.f32 == nullptr && x1.f16 == nullptr && scale == 1.f; }
};
// x [C, T] (fp32 or FP16 terms) -> half rows y [T, half_rows_pitch(C)] (FP16, pad columns
// zero; kSplit: hi rows, then lo rows): the tensor-core conv's input where no
// AdaIN precedes it; leaky_slope other than 1 applies LeakyReLU(leaky_slope)
// on the way (the generator's activations before its upsamplers and conv_post).
void to_half_rows(ScaledSum x, __half* y, int C, int T, HalfOperands form, cudaStream_t stream,
                  float leaky_slope = 1.f);
// Copy a [rows, cols] block between row pitches (concatenation along
// channels, slicing). Pitches in elements.
void copy_rows(const float* src, int src_pitch, float* dst, int dst_pitch, int rows, int cols,
               cudaStream_t stream);
// out[c, t] = in[t, c]: [T, C] -> [C, T].
void transpose(const float* in, float* out, int rows, int cols, cudaStream_t stream);
// Duration head: dur[t] = max(1, round_half_even(sum_j sigmoid(logits[t, j]) / speed)).
void durations_from_logits(const float* logits, int T, int max_dur, float speed,
                           int32_t* dur, cudaStream_t stream);
// frame_token[f] = token index covering frame f, from per-token durations
// (the alignment matrix as an index map). Frames beyond sum(dur) untouched.
void frame_token_index(const int32_t* dur, int T, int32_t* frame_token, cudaStream_t stream);
// out[c, f] = x[c, frame_token[f]]: x [C, T] expanded to [C, F] (x @ aln).
void expand_frames(const float* x, const int32_t* frame_token, float* out, int C, int T, int F,
                   cudaStream_t stream);
// The same on time-major rows: out[f, c] = x[frame_token[f], c], x [T, C] -> out [F, C].
void expand_frame_rows(const float* x, const int32_t* frame_token, float* out, int C, int F,
                       cudaStream_t stream);
// Nearest-neighbour upsampling along time: [C, T] -> [C, T * scale].
void upsample_nearest(const float* x, float* out, int C, int T, int scale, cudaStream_t stream);
// PyTorch F.interpolate(mode="linear", scale_factor=scale, align_corners=False):
// [C, Tin] -> [C, floor(Tin * scale)], source index (j + 0.5) / scale - 0.5 clamped.
void interpolate_linear(const float* x, float* out, int C, int Tin, int Tout, double scale,
                        cudaStream_t stream);
// ReflectionPad1d((left, right)) along time: [C, T] -> [C, left + T + right].
void reflection_pad(const float* x, float* out, int C, int T, int left, int right,
                    cudaStream_t stream);

// ------------------------------------------------------------------ norm.cu
// Layer norm of each row of a [rows, cols] matrix over its cols:
// y = (x - mean) / sqrt(var + eps) * (1 + style_gamma) * gamma + beta + style_beta,
// where each of gamma, beta, style_gamma, style_beta may be null (identity).
// gamma/beta are the affine parameters; style_gamma/style_beta (AdaLayerNorm)
// come from a style projection. y may equal x; cols <= 1024 (a row lives in
// one warp's registers). x_bias (may be null): a [cols] vector added to
// every row of x first (the bias of the linear layer that produced x, fused
// here instead of its own pass). y_pitch: y's row pitch (0: cols; the
// duration encoder writes the first columns of a wider buffer).
void layer_norm_rows(const float* x, float* y, int rows, int cols, const float* gamma,
                     const float* beta, const float* style_gamma, const float* style_beta,
                     float eps, cudaStream_t stream, const float* x_bias = nullptr,
                     int y_pitch = 0);
// Same over the channel axis of a channels-first [C, T] tensor (text encoder's
// LayerNorm, AdaLayerNorm on [C, T]).
void layer_norm_channels(const float* x, float* y, int C, int T, const float* gamma,
                         const float* beta, const float* style_gamma, const float* style_beta,
                         float eps, cudaStream_t stream);

// Activation applied after AdaIN (fused into the same kernel).
enum class Activation { kNone = 0, kLeakyRelu = 1, kSnake = 2 };

// AdaIN1d: instance norm over time per channel (eps 1e-5, biased variance),
// then (1 + gamma[c]) * xhat + beta[c], with style[0:C] = gamma and
// style[C:2C] = beta; then the activation: LeakyReLU(act_slope) or Snake
// x + sin(alpha[c] x)^2 / alpha[c]. x, y: [C, T]; y may equal x. Long rows
// split their statistics over several blocks, whose partials go to
// `scratch`: adain_scratch_doubles(C, T) doubles (not floats).
void adain(const float* x, float* y, int C, int T, const float* style, Activation act,
           float act_slope, const float* alpha, double* scratch, cudaStream_t stream);
int64_t adain_scratch_doubles(int C, int T);
// Per-channel statistics partials of a [C, T] tensor (channel_stats.cuh):
// channel c's partial p at data[(c * parts + p) * 3] = {count, sum, sum of
// squared deviations about the partial's mean}, in double. parts 0: none.
constexpr int kPartialDoubles = 3;
struct ChannelPartials {
    double* data = nullptr;
    int parts = 0;
};
// The same AdaIN + activation written as half rows y [T, half_rows_pitch(C)]
// (FP16, pad columns zero; kSplit: hi rows, then lo rows) for the
// tensor-core conv that follows. `given`: x's statistics partials as its
// producer wrote them (conv1d_half_rows), which skips the statistics pass;
// an FP16 x needs them.
void adain_half_rows(ConstFloatOrHalf x, __half* y, int C, int T, const float* style,
                     Activation act, float act_slope, const float* alpha, HalfOperands form,
                     double* scratch, cudaStream_t stream, ChannelPartials given = {});
// The per-channel parameters adain_half_rows applies (channel_apply.cuh:
// AdaIN's statistics and style affine, the activation's alpha), from x's
// statistics partials as its producer wrote them, without the pass: for a
// tensor-core conv that applies them as it loads x (HalfInput). Returns C
// of them, in `scratch` (adain_scratch_doubles(C, T) doubles).
struct ChannelApply;
const ChannelApply* adain_apply(ChannelPartials given, int C, int T, const float* style,
                                Activation act, float act_slope, const float* alpha,
                                HalfOperands form, double* scratch, cudaStream_t stream);

// ------------------------------------------------------------------ conv.cu
// Host-side: a PyTorch conv weight [A, B, K] in the device layout [A, K, B]
// (dst[a, k, i] = src[a, i, k]); dst must not overlap src.
void conv_weight_to_device_layout(const float* src, float* dst, int64_t A, int B, int K);
// Conv1d: x [Cin, Tin] -> y [Cout, Tout], Tout = (Tin + 2 pad - dil (K - 1) - 1) / stride + 1.
// w [Cout, K, Cin / groups]; b [Cout] or null. If `residual` is non-null,
// y = conv(x) + residual (residual [Cout, Tout], may equal y). Dense stride-1
// convs whose im2col exceeds one chunk run as one GEMM per tap (chunked over
// time), other dense ones as im2col + one GEMM per chunk, both in the given
// GemmMath; grouped and tiny ones as a direct fp32 kernel, and pointwise ones
// of few input channels as one fp32 pass that can also write y's statistics
// partials: `stats` (may be null), conv1d_stats_parts(...) per channel.
void conv1d(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
            int Cin, int Cout, int Tin, int K, int stride, int pad, int dilation, int groups,
            const float* residual, float* scratch, cudaStream_t stream,
            GemmMath math = GemmMath::kFp32, double* stats = nullptr);
// The statistics partials per channel conv1d writes (one per 128 steps), 0
// where it writes none (every conv but the pointwise ones of few channels).
int conv1d_stats_parts(int Cin, int Cout, int Tin, int K, int stride, int pad, int groups);
int conv1d_out_len(int Tin, int K, int stride, int pad, int dilation);
// A tensor-core conv's input: half rows [Tin, half_rows_pitch(Cin)], or,
// with `apply`, a raw FP16 channels-first tensor [Cin, Tin] (rows at
// half_channels_pitch(Tin)) as a conv stored it, its AdaIN's parameters
// (adain_apply, activation Snake, rounded operands): the conv's kernel
// applies them to each window as it loads it, and its operands are the very
// FP16 values adain_half_rows would have written (no pass, the same bits).
// Where conv1d_takes_raw_input says so.
struct HalfInput {
    const __half* x = nullptr;
    const ChannelApply* apply = nullptr;
    HalfInput(const __half* rows) : x(rows) {}  // NOLINT(google-explicit-constructor)
    HalfInput(const __half* raw, const ChannelApply* applied) : x(raw), apply(applied) {}
};
// Conv1d, dense, stride 1, K >= 1, on the tensor cores: x half rows [Tin,
// ld] (ld = half_rows_pitch(Cin)) or a raw input (HalfInput), w FP16 [Cout,
// K, ld] as conv_weight_to_half_rows stores it, with its w_scale; both
// operands in `form`; fp32 accumulation; b, residual and y as conv1d, but
// residual may be FP16 too (read as its values).
// `scratch`: conv1d_half_rows_scratch_floats(...) floats (partial sums where
// the reduction is split over blocks; 0: may be null).
// `kernel`: HalfKernel above. `stats` (may be null): the epilogue also
// writes y's statistics partials there (ChannelPartials,
// conv1d_half_rows_stats_parts(...) per channel), for the AdaIN that reads y
// next. `streams`: how many such convs run at once (concurrent streams): the
// launch plan fills the GPU for all of them together; give the scratch and
// statistics functions the same. `out_scale`: y = (conv(x) + b + residual) *
// out_scale, rounded once more (an AdainResBlk1d's (residual + shortcut) /
// sqrt(2)); the statistics are y's as stored. An FP16 y (more than 32
// output channels) holds those values rounded.
void conv1d_half_rows(HalfInput x, const __half* w, float w_scale, const float* b,
                      FloatOrHalf y, int Cin, int Cout, int Tin, int K, int pad, int dilation,
                      ConstFloatOrHalf residual, HalfOperands form, float* scratch,
                      cudaStream_t stream, HalfKernel kernel = HalfKernel::kBest,
                      double* stats = nullptr, int streams = 1, float out_scale = 1.f);
// Whether conv1d_half_rows (kernel kBest, these `streams`) takes a raw
// input: the wgmma kernels, rounded operands, Cin a multiple of 64, 33 to
// 128 output channels (one tile of them), a reduction not split over blocks.
bool conv1d_takes_raw_input(int Cin, int Cout, int Tin, int K, int pad, int dilation,
                            HalfOperands form, int streams = 1);
int64_t conv1d_half_rows_scratch_floats(int Cin, int Cout, int Tin, int K, int pad, int dilation,
                                        HalfOperands form, int streams = 1);
// The statistics partials per channel conv1d_half_rows writes: one per time
// tile, or where the reduction is split over blocks (no block sees final
// sums) one per 256 steps, written by the kernel that adds the splits.
int conv1d_half_rows_stats_parts(int Cin, int Cout, int Tin, int K, int pad, int dilation,
                                 HalfOperands form, int streams = 1);
// Host-side: a device-layout conv weight [A, K, B] (fp32) as the tensor-core
// conv's FP16 [A, K, ld] (ld = half_rows_pitch(B), pad columns zero; kSplit:
// hi, then lo), stored times a power of two that brings max |w| into [2^13,
// 2^14) (far from FP16's underflow, which would cost small weights and lo
// parts their significant bits). Returns w_scale, the inverse power of two
// the conv multiplies its sums by (exact). dst: half_parts(form) * A * K * ld.
float conv_weight_to_half_rows(const float* src, __half* dst, int64_t A, int K, int B,
                               HalfOperands form);
// Host-side, the FP16 weights' one conversion: src [rows, cols] (fp32) ->
// dst [half_parts(form), rows, pitch] (pitch >= cols, pad columns zero;
// kSplit: hi, then lo), times the power of two that brings max |src| into
// [2^13, 2^14) (1 for an all-zero src). Returns its inverse (exact).
float weight_rows_to_half(const float* src, __half* dst, int64_t rows, int cols, int pitch,
                          HalfOperands form);
int64_t conv1d_scratch_floats(int Cin, int Cout, int Tin, int K, int stride, int pad,
                              int dilation, int groups);
// ConvTranspose1d: x [Cin, Tin] -> y [Cout, Tout],
// Tout = (Tin - 1) stride - 2 pad + (K - 1) + output_padding + 1.
// w [Cin, K, Cout / groups]; b [Cout] or null. Dense ones run as one GEMM onto
// every tap (cols [K * Cout, Tin]) + an overlap-add gather; grouped ones
// (the depthwise upsampler) as a direct kernel.
void conv_transpose1d(cublasHandle_t handle, const float* x, const float* w, const float* b,
                      float* y, int Cin, int Cout, int Tin, int K, int stride, int pad,
                      int output_padding, int groups, float* scratch, cudaStream_t stream,
                      GemmMath math = GemmMath::kFp32);
int conv_transpose1d_out_len(int Tin, int K, int stride, int pad, int output_padding);
int64_t conv_transpose1d_scratch_floats(int Cin, int Cout, int Tin, int K, int groups);
// ConvTranspose1d, dense, on the tensor cores (the generator's upsamplers):
// y = pad(conv_transpose(x) + b) + residual, with pad the reflection pad
// (reflect_left, 0) (reflect_left 0 or 1) and y [Cout, reflect_left +
// Tout], fp32 or FP16 (rounded, rows at half_channels_pitch(reflect_left +
// Tout), more than 32 output channels; its statistics the rounded
// values'); residual (fp32, may be null) has y's shape and may equal an fp32
// y. Polyphase:
// each of the stride output phases is a conv of K / stride taps over x, so
// all of them are ONE conv1d_half_rows GEMM with stride x Cout rows whose
// epilogue interleaves the phases into y (no overlap-add, no atomics).
// Needs K a multiple of the stride, K >= 2 stride, 0 <= pad < stride, no
// output padding. x: half rows [Tin, half_rows_pitch(Cin)]; w as
// conv_transpose_weight_to_half_rows stores it, with its w_scale; scratch,
// kernel and stats as conv1d_half_rows's (stats: one partial per time tile,
// then one for the pad's element; none where the reduction is split).
void conv_transpose1d_half_rows(const __half* x, const __half* w, float w_scale, const float* b,
                                FloatOrHalf y, int Cin, int Cout, int Tin, int K, int stride,
                                int pad, int reflect_left, const float* residual, HalfOperands form,
                                float* scratch, cudaStream_t stream,
                                HalfKernel kernel = HalfKernel::kBest,
                                double* stats = nullptr);
int64_t conv_transpose1d_half_rows_scratch_floats(int Cin, int Cout, int Tin, int K, int stride,
                                                  int pad, HalfOperands form);
int conv_transpose1d_half_rows_stats_parts(int Cin, int Cout, int Tin, int K, int stride, int pad,
                                           int reflect_left, HalfOperands form);
// Conv1d of stride > 1, dense, no dilation, on the tensor cores (the
// generator's strided noise convs, precision "fast"): the stride-1 conv of its
// polyphase form. Input step s t - pad + k of tap k is s (t + m) + p (m =
// floor((k - pad) / s), 0 <= p < s), i.e. row t + m of phase p, so with x's
// half rows [conv1d_strided_input_rows(Tin, s), ld] (ld = half_rows_pitch(Cin);
// the op zeroes the rows past Tin) read as 1 / s as many rows of s * ld
// channels (phase-major), the conv is one conv1d_half_rows GEMM of its
// polyphase taps over them, no im2col. w as
// conv_weight_to_polyphase_half_rows stores it (rounded), with its w_scale;
// y [Cout, conv1d_out_len(Tin, K, s, pad, 1)] fp32 (+ b + residual); scratch,
// stats and streams as conv1d_half_rows's. Needs at least two polyphase taps.
int conv1d_strided_input_rows(int Tin, int stride);  // Tin rounded up to the stride
void conv1d_strided_half_rows(__half* x, const __half* w, float w_scale, const float* b, float* y,
                              int Cin, int Cout, int Tin, int K, int stride, int pad,
                              const float* residual, float* scratch, cudaStream_t stream,
                              double* stats = nullptr, int streams = 1);
int64_t conv1d_strided_half_rows_scratch_floats(int Cin, int Cout, int Tin, int K, int stride,
                                                int pad, int streams = 1);
int conv1d_strided_half_rows_stats_parts(int Cin, int Cout, int Tin, int K, int stride, int pad,
                                         int streams = 1);
// Host-side: a device-layout strided conv weight [Cout, K, Cin] (fp32) as
// conv1d_strided_half_rows's FP16 [Cout, taps, s * ld] (rounded; tap j =
// m + its left pad, phase p's channels at p * ld, zero where no tap lands),
// scaled as conv_weight_to_half_rows; returns w_scale. dst:
// conv_weight_polyphase_halves(...) values.
float conv_weight_to_polyphase_half_rows(const float* src, __half* dst, int Cout, int K, int Cin,
                                         int stride, int pad);
int64_t conv_weight_polyphase_halves(int Cout, int K, int Cin, int stride, int pad);
// ConvTranspose1d, depthwise (groups = C in and out: the AdainResBlk1d's
// learned upsampler "pool"), written straight as the half rows of its
// output for the tensor-core conv after it: rows [Tout, half_rows_pitch(C)]
// in `form`, as to_half_rows lays them out, each value the fp32 one that
// conv_transpose1d computes (the same taps in the same order, then the
// bias), rounded (kSplit: hi, lo). w [C, K, 1] (device layout), b [C] or
// null. No fp32 output and no conversion pass.
void conv_transpose1d_depthwise_half_rows(const float* x, const float* w, const float* b,
                                          __half* rows, int C, int Tin, int K, int stride,
                                          int pad, int output_padding, HalfOperands form,
                                          cudaStream_t stream);
// Host-side: a device-layout transposed-conv weight [Cin, K, Cout] (fp32) as
// conv_transpose1d_half_rows's FP16 [K, Cout, ld] (ld =
// half_rows_pitch(Cin); kSplit: hi, then lo), scaled as
// conv_weight_to_half_rows; returns w_scale. dst: half_parts(form) * K *
// Cout * ld.
float conv_transpose_weight_to_half_rows(const float* src, __half* dst, int Cin, int K, int Cout,
                                         HalfOperands form);

// ------------------------------------------------------------------ lstm.cu
// Bidirectional single-layer LSTM, PyTorch gate order (i, f, g, o), zero
// initial state. x [T, In]; w_ih [2, 4H, In], w_hh [2, 4H, H], b [2, 4H]
// (b_ih + b_hh folded at load); out [T, 2H] (forward half then reverse half).
// The input projection is one GEMM for both directions; the whole time loop
// runs on the device. `scratch` holds at least lstm_scratch_floats(T, H).
// max_cluster_blocks caps the cluster path's blocks per direction (lstm.cu;
// the tests pin 8, the portable cluster size, to run its narrower shape).
void lstm_bidirectional(cublasHandle_t handle, const float* x, const float* w_ih,
                        const float* w_hh, const float* b, float* out, int T, int In, int H,
                        float* scratch, cudaStream_t stream, int max_cluster_blocks = 16);
int64_t lstm_scratch_floats(int T, int H);
// The recurrence alone, on input projections gx (both directions' gates,
// bias included) computed by the caller: lstm_bidirectional's second half.
// Sequences stacked as rows: sequence i's steps are the next lengths[i] rows
// of gx [rows, 8H] and out [rows, 2H] (a batch's group: up to four recur in
// one launch, which reads W_hh once per step for all; each sequence's bits
// are those of its own call).
void lstm_recurrence(const float* gx, const float* w_hh, float* out,
                     const std::vector<int>& lengths, int H, cudaStream_t stream,
                     int max_cluster_blocks = 16);

// ------------------------------------------------------------- attention.cu
// Bidirectional multi-head attention on packed projections:
// q, k, v [T, heads * head_dim], rows ld_qkv >= heads * head_dim floats apart
// (3 * heads * head_dim when they are the column blocks of one fused QKV
// projection) -> out [T, heads * head_dim] (dense),
// softmax(q k^T / sqrt(head_dim) + mask) v, where keys at positions >=
// valid_len get the additive mask (HF's large negative value). Plain fp32
// throughout (two batched SGEMMs around a softmax pass, never TF32);
// `scratch` holds at least attention_scratch_floats(T, heads) (the scores).
void attention(cublasHandle_t handle, const float* q, const float* k, const float* v, float* out,
               int T, int heads, int head_dim, int ld_qkv, int valid_len, float* scratch,
               cudaStream_t stream);
int64_t attention_scratch_floats(int T, int heads);
// The same on the tensor cores, as precision "fast" runs ALBERT's linears
// (split FP16 operands, float32-level accuracy): q, k, v the column blocks
// of one packed projection [T, 3 * heads * head_dim], given as its split
// linear's sums (SplitSums) plus its bias (may be null); scores as for
// attention, halves attention_split_half_scratch_halves(...) FP16 scratch.
void attention_split_half(SplitSums qkv, const float* qkv_bias, float* out, int T, int heads,
                          int head_dim, int valid_len, float* scores, __half* halves,
                          cudaStream_t stream, HalfKernel kernel = HalfKernel::kBest);
int64_t attention_split_half_scratch_halves(int T, int heads, int head_dim);

// ------------------------------------------------------------------ stft.cu
// Forward STFT of a signal (n_fft 20, hop 5, periodic Hann, centred with
// reflect padding) as magnitude and phase: x [N] -> out [2 * (n_fft/2 + 1), frames]
// (magnitudes first, then atan2 phases), frames = N / hop + 1. Batched cuFFT.
class Stft {
public:
    Stft(int n_fft, int hop);
    ~Stft();
    Stft(const Stft&) = delete;
    Stft& operator=(const Stft&) = delete;
    int frames(int n) const { return n / hop_ + 1; }
    // Makes the plans and scratch for `frames` frames now (forward and
    // inverse call it too), so that a graph capture that follows finds them.
    void reserve(int frames, cudaStream_t stream);
    // Forward: magnitude and phase of x [n], n > n_fft / 2 (reflect padding).
    void forward(const float* x, int n, float* out, cudaStream_t stream);
    // Spectral head + inverse: logits [2 * (n_fft/2 + 1), frames] ->
    // spec = exp(logits[:bins]), phase = sin(logits[bins:]), complex spectrum
    // spec * e^{i phase}, inverse FFT, window, overlap-add, divided by the
    // window-square envelope, centre trimmed: audio [hop * (frames - 1)].
    void inverse_from_logits(const float* logits, int frames, float* audio, cudaStream_t stream);

private:
    int n_fft_, hop_, planned_frames_ = 0;
    cufftHandle fwd_plan_ = 0, inv_plan_ = 0;
    float* window_ = nullptr;              // device [n_fft]
    float* frames_buf_ = nullptr;          // device [planned_frames_, n_fft]
    cufftComplex* spectrum_buf_ = nullptr; // device [planned_frames_, n_fft/2 + 1]
};

// ---------------------------------------------------------------- source.cu
// The harmonic-plus-noise source (SineGen + l_linear + tanh) from the frame
// F0 curve: f0 [Tf] (already the decoder's 2F-rate curve) upsampled x `upp`
// (nearest) to n = Tf * upp samples; harmonics k = 1..n_harm; phases
// integrated at the frame rate as the official SineGen does (rad resampled by
// 1 / upp, a parallel scan in double precision, resampled back x upp); voiced
// where f0 > voiced_threshold; gaussian noise of std noise_std (voiced) or
// sine_amp / 3 (unvoiced). Initial phases of harmonics 2..n_harm (uniform
// [0, 1)) and the noise come from Philox4x32-10 keyed by `*seed` (device
// memory, so that a captured graph takes a new seed per replay), a pure
// function of (seed, harmonic, sample); both are zero when `deterministic`
// (and `seed` is then not read).
// lin_w [n_harm], lin_b [1]; out [n] = tanh(lin_w . harmonics + lin_b).
// `scratch` holds harmonic_source_scratch_doubles(...) doubles.
void harmonic_source(const float* f0, int Tf, int upp, int n_harm, int sample_rate,
                     float sine_amp, float noise_std, float voiced_threshold,
                     const float* lin_w, const float* lin_b, bool deterministic, const uint64_t* seed,
                     float* out, double* scratch, cudaStream_t stream);
int64_t harmonic_source_scratch_doubles(int Tf, int upp, int n_harm);

}  // namespace kokoro::ops
