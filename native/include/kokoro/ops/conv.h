// Ops of native/ops/conv*.cu: conv1d and transposed conv: fp32 (conv.cu), tensor-core, strided
// (conv_tensor_core.cu) and depthwise (conv.cu), weight relayouts (conv_relayout.cu).
// Conventions: kokoro/ops.h.
// (The family headers include each other in the order the families build on
// one another: each holds the types the later ones use.)
#pragma once

#include "kokoro/ops/norm.h"

namespace kokoro::ops {

// ----------------------------------------------------------------- conv*.cu
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

}  // namespace kokoro::ops
