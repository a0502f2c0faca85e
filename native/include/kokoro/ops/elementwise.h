// Ops of native/ops/elementwise.cu: embeddings, activations, copies, durations, frame expansion,
// resampling, half rows. Conventions: kokoro/ops.h.
// (The family headers include each other in the order the families build on
// one another: each holds the types the later ones use.)
#pragma once

#include "kokoro/ops/linear.h"

namespace kokoro::ops {

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

}  // namespace kokoro::ops
