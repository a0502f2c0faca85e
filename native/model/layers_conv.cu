// The conv layers (layers.h): StyleProjection, Conv1d, ConvTranspose1d,
// AdaIN, AdainConv, PoolConv1d. Each resolves its weights and its path from
// the precision plan when built; a call only enqueues work.
#include <stdexcept>
#include <string>

#include "kokoro/layers.h"

namespace kokoro {

namespace {

// The one tensor of x, for the paths that read a plain pointer (convs
// without a tensor-core weight).
const float* single(const ops::ScaledSum& x, const std::string& layer) {
    if (!x.single() || x.half()) {
        throw std::logic_error(layer +
                               ": a sum of tensors or FP16 input needs its tensor-core weight");
    }
    return x.x0.f32;
}

}  // namespace

// ------------------------------------------------------------ StyleProjection

StyleProjection::StyleProjection(const DeviceWeights& weights, const std::string& fc_prefix,
                                 int channels) {
    const DeviceWeights::StyleSlot& slot = weights.style_slot(fc_prefix);
    if (slot.size != 2 * channels) {
        throw WeightsError("style projection '" + fc_prefix + "' has " + std::to_string(slot.size) +
                           " outputs; the model needs " + std::to_string(2 * channels));
    }
    half_ = slot.half;
    offset_ = slot.offset;
}

// --------------------------------------------------------------------- Conv1d

Conv1d::Conv1d(const DeviceWeights& weights, const std::string& prefix, const ConvShape& shape)
    : name_(prefix), shape_(shape) {
    const ConvShape& s = shape_;
    const std::string weight = prefix + ".weight";
    const Kernel kernel = weights.plan(weight).kernel;
    if (s.bias) b_ = weights.get(prefix + ".bias", s.c_out);
    if (kernel == Kernel::kTensorCoreStrided) {
        if (s.groups != 1 || s.dilation != 1) {
            throw std::logic_error(prefix + ": a strided tensor-core conv is dense, undilated");
        }
        path_ = Path::kStrided;
        half_ = weights.get_half(
            weight, ops::conv_weight_polyphase_halves(s.c_out, s.kernel, s.c_in, s.stride, s.pad));
    } else if (s.groups == 1 && s.stride == 1 && kokoro::tensor_core(kernel)) {
        path_ = Path::kTensorCore;
        half_ = weights.get_half(weight,
                                 int64_t(s.c_out) * s.kernel * ops::half_rows_pitch(s.c_in));
    } else {
        w_ = weights.get(weight, int64_t(s.c_out) * (s.c_in / s.groups) * s.kernel);
    }
}

ops::ChannelPartials Conv1d::operator()(const Context& ctx, ops::ScaledSum x, float* y, int t_in,
                                        const float* residual, float leaky_slope,
                                        Slot y_stats_slot) const {
    const int c_in = shape_.c_in, c_out = shape_.c_out, kernel = shape_.kernel;
    const int stride = shape_.stride, pad = shape_.pad, dilation = shape_.dilation;
    const int groups = shape_.groups;
    if (path_ == Path::kStrided) {
        __half* rows =
            ctx.half_rows(c_in, ops::conv1d_strided_input_rows(t_in, stride), half_.form);
        ops::to_half_rows(x, rows, c_in, t_in, half_.form, ctx.stream, leaky_slope);
        float* scratch = ctx.op_scratch(ops::conv1d_strided_half_rows_scratch_floats(
            c_in, c_out, t_in, kernel, stride, pad, ctx.conv_streams));
        const ops::ChannelPartials y_stats =
            ctx.conv_stats(y_stats_slot, c_out,
                           ops::conv1d_strided_half_rows_stats_parts(
                               c_in, c_out, t_in, kernel, stride, pad, ctx.conv_streams));
        ops::conv1d_strided_half_rows(rows, half_.w, half_.scale, b_, y, c_in, c_out, t_in, kernel,
                                      stride, pad, residual, scratch, ctx.stream, y_stats.data,
                                      ctx.conv_streams);
        return y_stats;
    }
    if (path_ == Path::kTensorCore) {
        __half* rows = ctx.half_rows(c_in, t_in, half_.form);
        ops::to_half_rows(x, rows, c_in, t_in, half_.form, ctx.stream, leaky_slope);
        return on_half_rows(ctx, rows, y, t_in, b_, residual, y_stats_slot);
    }
    const float* activated =
        ctx.leaky_relu_of(single(x, name_), int64_t(c_in) * t_in, leaky_slope);
    float* scratch = ctx.op_scratch(
        ops::conv1d_scratch_floats(c_in, c_out, t_in, kernel, stride, pad, dilation, groups));
    const ops::ChannelPartials y_stats =
        ctx.conv_stats(y_stats_slot, c_out,
                       ops::conv1d_stats_parts(c_in, c_out, t_in, kernel, stride, pad, groups));
    ops::conv1d(ctx.blas, activated, w_, b_, y, c_in, c_out, t_in, kernel, stride, pad, dilation,
                groups, residual, scratch, ctx.stream, ctx.gemm_math(), y_stats.data);
    return y_stats;
}

ops::ChannelPartials Conv1d::on_half_rows(const Context& ctx, ops::HalfInput x,
                                          ops::FloatOrHalf y, int t_in, const float* b,
                                          ops::ConstFloatOrHalf residual, Slot y_stats_slot,
                                          float out_scale) const {
    const int c_in = shape_.c_in, c_out = shape_.c_out, kernel = shape_.kernel;
    const int pad = shape_.pad, dilation = shape_.dilation;
    float* scratch = ctx.op_scratch(ops::conv1d_half_rows_scratch_floats(
        c_in, c_out, t_in, kernel, pad, dilation, half_.form, ctx.conv_streams));
    const ops::ChannelPartials y_stats =
        ctx.conv_stats(y_stats_slot, c_out,
                       ops::conv1d_half_rows_stats_parts(c_in, c_out, t_in, kernel, pad, dilation,
                                                         half_.form, ctx.conv_streams));
    ops::conv1d_half_rows(x, half_.w, half_.scale, b, y, c_in, c_out, t_in, kernel, pad, dilation,
                          residual, half_.form, scratch, ctx.stream, ops::HalfKernel::kBest,
                          y_stats.data, ctx.conv_streams, out_scale);
    return y_stats;
}

const __half* Conv1d::to_half_channels(const Context& ctx, const float* x, int t,
                                       Slot y_slot) const {
    const int c_in = shape_.c_in, c_out = shape_.c_out;
    __half* rows = ctx.half_rows(c_in, t, half_.form);
    ops::to_half_rows(x, rows, c_in, t, half_.form, ctx.stream);
    __half* y = ctx.halves(y_slot, ops::half_channels_values(c_out, t));
    on_half_rows(ctx, rows, y, t, nullptr, nullptr);
    return y;
}

// ------------------------------------------------------------ ConvTranspose1d

ConvTranspose1d::ConvTranspose1d(const DeviceWeights& weights, const std::string& prefix,
                                 const ConvShape& shape)
    : name_(prefix), shape_(shape) {
    const ConvShape& s = shape_;
    const std::string weight = prefix + ".weight";
    const WeightPlan plan = weights.plan(weight);
    plan_form_ = half_operands(plan.operands);
    b_ = weights.get(prefix + ".bias", s.c_out);
    tensor_core_ = s.groups == 1 && s.output_padding == 0 && tensor_core(plan.kernel);
    if (tensor_core_) {
        half_ = weights.get_half(weight,
                                 int64_t(s.kernel) * s.c_out * ops::half_rows_pitch(s.c_in));
    } else {
        w_ = weights.get(weight, int64_t(s.c_in) * (s.c_out / s.groups) * s.kernel);
    }
}

ops::ChannelPartials ConvTranspose1d::operator()(const Context& ctx, ops::ScaledSum x,
                                                 ops::FloatOrHalf y, int t_in, float leaky_slope,
                                                 int reflect_left, const float* residual,
                                                 Slot y_stats_slot) const {
    const int c_in = shape_.c_in, c_out = shape_.c_out, kernel = shape_.kernel;
    const int stride = shape_.stride, pad = shape_.pad, output_padding = shape_.output_padding;
    const int groups = shape_.groups;
    if (tensor_core_) {
        __half* rows = ctx.half_rows(c_in, t_in, half_.form);
        ops::to_half_rows(x, rows, c_in, t_in, half_.form, ctx.stream, leaky_slope);
        float* scratch = ctx.op_scratch(ops::conv_transpose1d_half_rows_scratch_floats(
            c_in, c_out, t_in, kernel, stride, pad, half_.form));
        const ops::ChannelPartials y_stats =
            ctx.conv_stats(y_stats_slot, c_out,
                           ops::conv_transpose1d_half_rows_stats_parts(
                               c_in, c_out, t_in, kernel, stride, pad, reflect_left, half_.form));
        ops::conv_transpose1d_half_rows(rows, half_.w, half_.scale, b_, y, c_in, c_out, t_in,
                                        kernel, stride, pad, reflect_left, residual, half_.form,
                                        scratch, ctx.stream, ops::HalfKernel::kBest,
                                        y_stats.data);
        return y_stats;
    }
    if (reflect_left != 0 || residual != nullptr || y.f16 != nullptr) {
        throw std::logic_error("conv_transpose1d " + name_ +
                               ": a pad, residual or FP16 output needs its tensor-core weight");
    }
    float* scratch =
        ctx.op_scratch(ops::conv_transpose1d_scratch_floats(c_in, c_out, t_in, kernel, groups));
    const float* activated =
        ctx.leaky_relu_of(single(x, name_), int64_t(c_in) * t_in, leaky_slope);
    ops::conv_transpose1d(ctx.blas, activated, w_, b_, y.f32, c_in, c_out, t_in, kernel, stride,
                          pad, output_padding, groups, scratch, ctx.stream, ctx.gemm_math());
    return {};
}

// ---------------------------------------------------------------------- AdaIN

AdaIN::AdaIN(const DeviceWeights& weights, const AdainAct& spec, int channels)
    : style_(weights, spec.fc_prefix, channels),
      act_(spec.act),
      slope_(spec.slope),
      alpha_(spec.alpha.empty() ? nullptr : weights.get(spec.alpha, channels)),
      channels_(channels) {}

void AdaIN::operator()(const Context& ctx, const float* x, float* y, int T) const {
    ops::adain(x, y, channels_, T, style_(ctx), act_, slope_, alpha_,
               ctx.adain_partials(channels_, T), ctx.stream);
}

// ------------------------------------------------------------------ AdainConv

AdainConv::AdainConv(const DeviceWeights& weights, const AdainAct& norm, const SameConv& conv)
    : norm_(weights, norm, conv.c_in),
      conv_(weights, conv.prefix,
            ConvShape{conv.c_in, conv.c_out, conv.kernel}
                .with_pad(conv.dilation * (conv.kernel - 1) / 2)
                .with_dilation(conv.dilation)) {
    if (!conv_.tensor_core() && tensor_core(weights.plan(conv.prefix + ".weight").kernel)) {
        throw std::logic_error("adain conv " + conv.prefix + ": a strided plan for a same conv");
    }
}

ops::ChannelPartials AdainConv::operator()(const Context& ctx, ops::ConstFloatOrHalf x,
                                           ops::FloatOrHalf y, int T,
                                           ops::ConstFloatOrHalf residual,
                                           ops::ChannelPartials x_stats, Slot y_stats_slot,
                                           float out_scale) const {
    const ConvShape& shape = conv_.shape();
    const int c_in = shape.c_in, c_out = shape.c_out, kernel = shape.kernel;
    const int pad = shape.pad, dilation = shape.dilation;
    const bool hidden = y.f16 != nullptr && residual.f32 == nullptr && residual.f16 == nullptr;
    if (hidden && y_stats_slot == Slot::kNone) {
        throw std::logic_error("adain conv: an FP16 hidden (no bias, no residual) needs a "
                               "statistics slot");
    }
    if (!conv_.tensor_core()) {
        if (out_scale != 1.f || x.f16 != nullptr || y.f16 != nullptr ||
            residual.f16 != nullptr) {
            throw std::logic_error(
                "adain conv: an output scale or FP16 tensors need its tensor-core weight");
        }
        float* activated = ctx.floats(Slot::kActivated, int64_t(c_in) * T);
        norm_(ctx, x.f32, activated, T);
        conv_(ctx, activated, y.f32, T, residual.f32);
        return {};
    }
    const ops::HalfOperands form = conv_.form();
    const float* b = hidden ? nullptr : conv_.bias();
    const float* s = norm_.style(ctx);
    const ops::Activation act = norm_.act();
    double* scratch = ctx.adain_partials(c_in, T);
    if (x.f16 != nullptr && act == ops::Activation::kSnake &&
        ops::conv1d_takes_raw_input(c_in, c_out, T, kernel, pad, dilation, form,
                                    ctx.conv_streams)) {
        const ops::ChannelApply* apply = ops::adain_apply(
            x_stats, c_in, T, s, act, norm_.slope(), norm_.alpha(), form, scratch, ctx.stream);
        return conv_.on_half_rows(ctx, ops::HalfInput(x.f16, apply), y, T, b, residual,
                                  y_stats_slot, out_scale);
    }
    __half* rows = ctx.half_rows(c_in, T, form);
    ops::adain_half_rows(x, rows, c_in, T, s, act, norm_.slope(), norm_.alpha(), form, scratch,
                         ctx.stream, x_stats);
    return conv_.on_half_rows(ctx, rows, y, T, b, residual, y_stats_slot, out_scale);
}

// ----------------------------------------------------------------- PoolConv1d

namespace {
constexpr int kPoolKernel = 3, kPoolStride = 2, kPoolPad = 1, kPoolOutputPad = 1;
constexpr int kPoolConvKernel = 3, kPoolConvPad = 1;
}  // namespace

PoolConv1d::PoolConv1d(const DeviceWeights& weights, const std::string& pool_prefix,
                       const std::string& conv_prefix, int c, int c_out)
    : pool_(weights, pool_prefix,
            ConvShape{c, c, kPoolKernel}
                .with_stride(kPoolStride)
                .with_pad(kPoolPad)
                .with_output_padding(kPoolOutputPad)
                .with_groups(c)),
      conv_(weights, conv_prefix, ConvShape{c, c_out, kPoolConvKernel}.with_pad(kPoolConvPad)) {}

void PoolConv1d::operator()(const Context& ctx, const float* x, float* y, int t_in) const {
    const int c = pool_.shape().c_in;
    const int t_out =
        ops::conv_transpose1d_out_len(t_in, kPoolKernel, kPoolStride, kPoolPad, kPoolOutputPad);
    if (!conv_.tensor_core()) {
        float* pooled = ctx.floats(Slot::kBlockPooled, int64_t(c) * t_out);
        pool_(ctx, x, pooled, t_in);
        conv_(ctx, pooled, y, t_out);
        return;
    }
    __half* rows = ctx.half_rows(c, t_out, conv_.form());
    ops::conv_transpose1d_depthwise_half_rows(x, pool_.weight(), pool_.bias(), rows, c, t_in,
                                              kPoolKernel, kPoolStride, kPoolPad, kPoolOutputPad,
                                              conv_.form(), ctx.stream);
    conv_.on_half_rows(ctx, rows, y, t_out, conv_.bias(), nullptr);
}

}  // namespace kokoro
