// Ops of native/ops/norm.cu: LayerNorm, AdaLayerNorm, AdaIN and its statistics. Conventions:
// kokoro/ops.h.
// (The family headers include each other in the order the families build on
// one another: each holds the types the later ones use.)
#pragma once

#include "kokoro/ops/elementwise.h"

namespace kokoro::ops {

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

}  // namespace kokoro::ops
