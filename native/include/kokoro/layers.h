// The model's layers, each built once from the weights: its constructor
// resolves its weights' device pointers and its path from the precision plan
// (DeviceWeights::plan), and a weight the model lacks or of the wrong size
// is a WeightsError there, not in a forward pass. A call operator then runs
// the layer on a Context (stream, workspace, style vectors) and tensors:
// - StyleProjection: an AdaIN's gamma/beta in the style vectors;
// - Conv1d, ConvTranspose1d: with the tensor-core (FP16 half rows),
//   polyphase strided or fp32 path that the plan gives the weight;
// - AdaIN, AdainConv (AdaIN + activation, then a same-length conv),
//   PoolConv1d (an AdainResBlk1d's learned upsampler, then its conv);
// - Linear (cuBLAS or the split FP16 GEMM), BiLstm.
// Layers are immutable and shared by every lane; what they write goes to the
// context's workspace slots (layers_conv.cu, layers_linear.cu).
#pragma once

#include <string>

#include "kokoro/context.h"
#include "kokoro/weights.h"

namespace kokoro {

// A conv's shape: x [c_in, t] -> y [c_out, t_out] by `kernel` taps at
// `stride`, `pad`, `dilation` in `groups` (a transposed conv's also
// `output_padding`), with the weight's bias unless without_bias(). The
// length is the call's.
struct ConvShape {
    int c_in, c_out, kernel;
    int stride = 1, pad = 0, dilation = 1, groups = 1, output_padding = 0;
    bool bias = true;
    ConvShape with_groups(int g) const {
        ConvShape c = *this;
        c.groups = g;
        return c;
    }
    ConvShape with_output_padding(int p) const {
        ConvShape c = *this;
        c.output_padding = p;
        return c;
    }
    ConvShape with_stride(int s) const {
        ConvShape c = *this;
        c.stride = s;
        return c;
    }
    ConvShape with_pad(int p) const {
        ConvShape c = *this;
        c.pad = p;
        return c;
    }
    ConvShape with_dilation(int d) const {
        ConvShape c = *this;
        c.dilation = d;
        return c;
    }
    ConvShape without_bias() const {
        ConvShape c = *this;
        c.bias = false;
        return c;
    }
};

// gamma/beta [2C] of the style projection `fc_prefix` (checked to be 2C
// wide), found in a context's style vectors (Context::style_out).
class StyleProjection {
public:
    StyleProjection(const DeviceWeights& weights, const std::string& fc_prefix, int channels);
    const float* operator()(const Context& ctx) const {
        return ctx.style_out[static_cast<int>(half_)] + offset_;
    }

private:
    StyleHalf half_;
    int offset_;
};

// Conv1d `prefix` of `shape`: x [c_in, t_in] -> y [c_out, t_out]; y =
// conv(act(x)) + residual if given, act = LeakyReLU(leaky_slope) (1: none).
// A conv with a tensor-core plan (precision_plan.h; a strided conv's
// polyphase one too) runs on the FP16 tensor-core kernel (x converted to
// half rows first, in the weight's form, act on the way); the others in
// fp32, or TF32 GEMMs where the context is fast. x may be a ScaledSum of
// several tensors where the conv has a tensor-core weight. y_stats_slot (may
// be kNone): a workspace slot for y's statistics partials, for the AdaIN
// that reads y next; returns them where the conv writes them
// (ops::conv1d_stats_parts). A slot's partials live until the next call
// that names it.
class Conv1d {
public:
    Conv1d(const DeviceWeights& weights, const std::string& prefix, const ConvShape& shape);
    ops::ChannelPartials operator()(const Context& ctx, ops::ScaledSum x, float* y, int t_in,
                                    const float* residual = nullptr, float leaky_slope = 1.f,
                                    Slot y_stats_slot = Slot::kNone) const;
    // Whether the conv runs on the stride-1 tensor-core kernel
    // (on_half_rows, to_half_channels).
    bool tensor_core() const { return path_ == Path::kTensorCore; }
    // The tensor-core conv on half rows [t_in, ld] in form() (or a raw input:
    // ops::HalfInput) with bias b (may be null); y_stats_slot as the call's;
    // out_scale: y = (conv + residual) * out_scale.
    ops::ChannelPartials on_half_rows(const Context& ctx, ops::HalfInput x, ops::FloatOrHalf y,
                                      int t_in, const float* b, ops::ConstFloatOrHalf residual,
                                      Slot y_stats_slot = Slot::kNone,
                                      float out_scale = 1.f) const;
    // The pointwise tensor-core conv (the precision plan's 1x1 block
    // shortcuts) of x [c_in, t]: y [c_out, t] FP16 channels-first in the
    // workspace slot `y_slot`, without bias.
    const __half* to_half_channels(const Context& ctx, const float* x, int t, Slot y_slot) const;
    const ConvShape& shape() const { return shape_; }
    ops::HalfOperands form() const { return half_.form; }
    const float* bias() const { return b_; }

private:
    enum class Path { kFloat, kTensorCore, kStrided };
    std::string name_;  // for messages
    ConvShape shape_;
    Path path_ = Path::kFloat;
    const float* w_ = nullptr;        // kFloat
    DeviceWeights::HalfConv half_{};  // kTensorCore, kStrided
    const float* b_ = nullptr;
};

// ConvTranspose1d `prefix` with bias, x [c_in, t_in] -> y [c_out,
// reflect_left + t_out]: y = pad(conv_transpose(act(x)) + b) + residual,
// act = LeakyReLU(leaky_slope) (1: none), pad the reflection pad
// (reflect_left, 0); residual (may be null) has y's shape and may equal y.
// A tensor-core plan (the generator's upsamplers) runs polyphase on the
// tensor-core kernel, all of it in one pass after the half rows
// (y_stats_slot as Conv1d's; x may be a ScaledSum, y FP16 with an fp32
// residual); the others (the decoder's depthwise pool) as
// ops::conv_transpose1d, fp32, without pad or residual.
class ConvTranspose1d {
public:
    ConvTranspose1d(const DeviceWeights& weights, const std::string& prefix,
                    const ConvShape& shape);
    ops::ChannelPartials operator()(const Context& ctx, ops::ScaledSum x, ops::FloatOrHalf y,
                                    int t_in, float leaky_slope = 1.f, int reflect_left = 0,
                                    const float* residual = nullptr,
                                    Slot y_stats_slot = Slot::kNone) const;
    const ConvShape& shape() const { return shape_; }
    // The operand form of the weight's plan (its tensor-core copy's, if any).
    ops::HalfOperands plan_form() const { return plan_form_; }
    // The fp32 weight and bias (a depthwise pool's, read by PoolConv1d).
    const float* weight() const { return w_; }
    const float* bias() const { return b_; }

private:
    std::string name_;
    ConvShape shape_;
    bool tensor_core_ = false;
    ops::HalfOperands plan_form_;
    const float* w_ = nullptr;
    DeviceWeights::HalfConv half_{};
    const float* b_ = nullptr;
};

// An AdaIN1d + activation: the style projection `fc_prefix`, then
// LeakyReLU(slope) or Snake with the weight `alpha` (act).
struct AdainAct {
    std::string fc_prefix;
    ops::Activation act;
    float slope;
    std::string alpha = {};  // Snake's alpha weight (empty: none)
};

// AdainAct on `channels`: x [C, T] -> y (may equal x).
class AdaIN {
public:
    AdaIN(const DeviceWeights& weights, const AdainAct& spec, int channels);
    void operator()(const Context& ctx, const float* x, float* y, int T) const;
    const float* style(const Context& ctx) const { return style_(ctx); }
    ops::Activation act() const { return act_; }
    float slope() const { return slope_; }
    const float* alpha() const { return alpha_; }

private:
    StyleProjection style_;
    ops::Activation act_;
    float slope_;
    const float* alpha_ = nullptr;
    int channels_;
};

// A dense stride-1 conv with bias that keeps the length: weight `prefix`,
// x [c_in, T] -> y [c_out, T] by `kernel` taps at `dilation`.
struct SameConv {
    std::string prefix;
    int c_in, c_out, kernel, dilation;
};

// AdaIN1d + activation `norm` on x [c_in, T], then the dense stride-1 conv
// `conv` (with bias, same length): y = conv(act(adain(x))) (+ residual). For
// a tensor-core conv the activation is written straight as FP16 half rows;
// otherwise through an fp32 buffer. y may equal residual, not x. x_stats:
// x's statistics partials, as the conv that wrote x returned them (none:
// AdaIN computes them). y_stats_slot (may be kNone): a workspace slot for
// y's partials, for the AdaIN that reads y next; returns them, or none where
// the conv cannot write them (ops::conv1d_half_rows_stats_parts). out_scale:
// y = (conv + residual) * out_scale (tensor-core convs only). x, y and
// residual may be FP16 (ops::FloatOrHalf; tensor-core convs only): an FP16 x
// needs x_stats. An FP16 y without a residual (a hidden that only the next
// AdaIN reads) needs y_stats_slot and leaves out the conv's bias (that AdaIN
// removes each channel's mean, bias included; the values stay nearer zero,
// where FP16's steps are finer); with one (a residual stream, a block's
// output) it keeps it. An FP16 x goes to the conv raw where its kernel takes
// one (ops::HalfInput: the conv applies the AdaIN + Snake as it loads its
// windows, the same operands without the pass).
class AdainConv {
public:
    AdainConv(const DeviceWeights& weights, const AdainAct& norm, const SameConv& conv);
    ops::ChannelPartials operator()(const Context& ctx, ops::ConstFloatOrHalf x,
                                    ops::FloatOrHalf y, int T,
                                    ops::ConstFloatOrHalf residual = nullptr,
                                    ops::ChannelPartials x_stats = {},
                                    Slot y_stats_slot = Slot::kNone, float out_scale = 1.f) const;

private:
    AdaIN norm_;
    Conv1d conv_;
};

// An AdainResBlk1d's learned upsampler (`pool_prefix`: depthwise
// ConvTranspose1d k3, stride 2, pad 1, output pad 1) of x [c, t_in], then
// the conv `conv_prefix` (k3, pad 1, bias) into y [c_out, 2 t_in]: with a
// tensor-core conv the upsampler writes its half rows itself
// (ops::conv_transpose1d_depthwise_half_rows), else through an fp32 buffer.
class PoolConv1d {
public:
    PoolConv1d(const DeviceWeights& weights, const std::string& pool_prefix,
               const std::string& conv_prefix, int c, int c_out);
    void operator()(const Context& ctx, const float* x, float* y, int t_in) const;

private:
    ConvTranspose1d pool_;
    Conv1d conv_;
};

// Linear `prefix` on rows: y [rows, out] = x [rows, in] @ W^T + b (+ beta *
// y), on the split FP16 GEMM where the plan says so (its scratch takes
// Slot::kOpScratch; stacked utterances' rows each get their utterance's
// split plan: Context::utterance_rows), else cuBLAS. x null: the input is in
// the context's split_input(rows, in) already (a split linear's).
class Linear {
public:
    Linear(const DeviceWeights& weights, const std::string& prefix, int in, int out);
    void operator()(const Context& ctx, const float* x, float* y, int rows,
                    float beta = 0.f) const;
    // The same without the bias, which the caller fuses into the next op.
    void without_bias(const Context& ctx, const float* x, float* y, int rows,
                      float beta = 0.f) const;
    // The same without its bias, the split linear's sums (fast) left to the
    // op that reads the returned SplitSums (nothing else may take
    // Slot::kOpScratch before it); other weights' GEMMs write y.
    ops::SplitSums sums(const Context& ctx, const float* x, float* y, int rows,
                        float beta = 0.f) const;
    bool split() const { return split_.w != nullptr; }
    const float* bias() const { return b_; }

private:
    void run(const Context& ctx, const float* x, const float* b, float* y, int rows,
             float beta) const;
    std::string name_;
    int in_, out_;
    const float* w_ = nullptr;              // cuBLAS
    DeviceWeights::SplitLinear split_{};    // split FP16 (w null: none)
    const float* b_ = nullptr;
};

// Bidirectional LSTM `prefix`: x [T, In] -> out [T, 2H]; with stacked
// utterances (Context::utterance_rows, T their rows) every utterance's
// sequence on its own rows (which needs the split input projection: cuBLAS
// picks its kernel by the row count, and stacked rows would not keep each
// utterance's bits).
class BiLstm {
public:
    BiLstm(const DeviceWeights& weights, const std::string& prefix);
    void operator()(const Context& ctx, const float* x, float* out, int T) const;

private:
    std::string name_;
    DeviceWeights::Lstm lstm_;
    DeviceWeights::SplitLinear split_ih_{};  // both directions' input projections (w null: none)
};

}  // namespace kokoro
