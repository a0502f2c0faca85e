// The Context's layers: each looks up its weights, takes its path from the
// precision plan (DeviceWeights::plan) and its scratch from the workspace;
// and the stacked rows' device tables (UtteranceRows).
#include <stdexcept>
#include <string>
#include <utility>

#include "kokoro/check.h"
#include "kokoro/context.h"

namespace kokoro {

namespace {

// The one tensor of x, for the layers that read a plain pointer (convs
// without a tensor-core weight).
const float* single(const ops::ScaledSum& x, const std::string& layer) {
    if (!x.single() || x.half()) {
        throw std::logic_error(layer +
                               ": a sum of tensors or FP16 input needs its tensor-core weight");
    }
    return x.x0.f32;
}

}  // namespace

// -------------------------------------------------------------------- Context

void Context::wait_for(const Context& other) const {
    KOKORO_CUDA_CHECK(cudaEventRecord(other.event, other.stream));
    KOKORO_CUDA_CHECK(cudaStreamWaitEvent(stream, other.event, 0));
}

const float* Context::style(const std::string& fc_prefix, int channels) const {
    const DeviceWeights::StyleSlot& slot = weights.style_slot(fc_prefix);
    if (slot.size != 2 * channels) {
        throw WeightsError("style projection '" + fc_prefix + "' has " + std::to_string(slot.size) +
                           " outputs; the model needs " + std::to_string(2 * channels));
    }
    return style_out[static_cast<int>(slot.half)] + slot.offset;
}

void Context::adain(const float* x, float* y, int C, int T, const std::string& fc_prefix,
                    ops::Activation act, float slope, const float* alpha) const {
    ops::adain(x, y, C, T, style(fc_prefix, C), act, slope, alpha, adain_partials(C, T), stream);
}

void Context::record(const char* key, const float* device, std::vector<int64_t> shape) const {
    if (trace == nullptr) return;
    Trace::Array& array = trace->floats[key];
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    array.shape = std::move(shape);
    array.values.resize(static_cast<size_t>(n));
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(array.values.data(), device, sizeof(float) * n,
                                      cudaMemcpyDeviceToHost, stream));
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream));
}

ops::ChannelPartials Context::conv1d(const std::string& prefix, ops::ScaledSum x, float* y,
                                     const ConvShape& shape, const float* residual,
                                     float leaky_slope, Slot y_stats_slot) const {
    const int c_in = shape.c_in, c_out = shape.c_out, t_in = shape.t_in, kernel = shape.kernel;
    const int stride = shape.stride, pad = shape.pad, dilation = shape.dilation;
    const int groups = shape.groups;
    const bool bias = shape.bias;
    const int64_t numel = int64_t(c_out) * (c_in / groups) * kernel;
    const float* b = bias ? weights.get(prefix + ".bias", c_out) : nullptr;
    const Kernel path = weights.plan(prefix + ".weight").kernel;
    if (path == Kernel::kTensorCoreStrided) {
        if (groups != 1 || dilation != 1) {
            throw std::logic_error(prefix + ": a strided tensor-core conv is dense, undilated");
        }
        const DeviceWeights::HalfConv w = weights.get_half(
            prefix + ".weight",
            ops::conv_weight_polyphase_halves(c_out, kernel, c_in, stride, pad));
        __half* rows = half_rows(c_in, ops::conv1d_strided_input_rows(t_in, stride), w.form);
        ops::to_half_rows(x, rows, c_in, t_in, w.form, stream, leaky_slope);
        float* scratch = op_scratch(ops::conv1d_strided_half_rows_scratch_floats(
            c_in, c_out, t_in, kernel, stride, pad, conv_streams));
        const ops::ChannelPartials y_stats =
            conv_stats(y_stats_slot, c_out,
                       ops::conv1d_strided_half_rows_stats_parts(c_in, c_out, t_in, kernel,
                                                                 stride, pad, conv_streams));
        ops::conv1d_strided_half_rows(rows, w.w, w.scale, b, y, c_in, c_out, t_in, kernel, stride,
                                      pad, residual, scratch, stream, y_stats.data, conv_streams);
        return y_stats;
    }
    if (groups == 1 && stride == 1 && tensor_core(path)) {
        const DeviceWeights::HalfConv w = weights.get_half(
            prefix + ".weight", int64_t(c_out) * kernel * ops::half_rows_pitch(c_in));
        __half* rows = half_rows(c_in, t_in, w.form);
        ops::to_half_rows(x, rows, c_in, t_in, w.form, stream, leaky_slope);
        return conv1d_half_rows(w, rows, y, c_in, c_out, t_in, kernel, pad, dilation, b, residual,
                                y_stats_slot);
    }
    const float* w = weights.get(prefix + ".weight", numel);
    const float* activated = leaky_relu_of(single(x, prefix), int64_t(c_in) * t_in, leaky_slope);
    float* scratch = op_scratch(
        ops::conv1d_scratch_floats(c_in, c_out, t_in, kernel, stride, pad, dilation, groups));
    const ops::ChannelPartials y_stats =
        conv_stats(y_stats_slot, c_out,
                   ops::conv1d_stats_parts(c_in, c_out, t_in, kernel, stride, pad, groups));
    ops::conv1d(blas, activated, w, b, y, c_in, c_out, t_in, kernel, stride, pad, dilation,
                groups, residual, scratch, stream, gemm_math(), y_stats.data);
    return y_stats;
}

ops::ChannelPartials Context::adain_conv1d(ops::ConstFloatOrHalf x, ops::FloatOrHalf y,
                                           const AdainAct& norm, const SameConv& conv,
                                           ops::ConstFloatOrHalf residual,
                                           ops::ChannelPartials x_stats,
                                           Slot y_stats_slot, float out_scale) const {
    const std::string& fc_prefix = norm.fc_prefix;
    const ops::Activation act = norm.act;
    const float slope = norm.slope;
    const float* alpha = norm.alpha;
    const std::string& conv_prefix = conv.prefix;
    const int c_in = conv.c_in, c_out = conv.c_out, T = conv.T, kernel = conv.kernel;
    const int dilation = conv.dilation;
    const int pad = dilation * (kernel - 1) / 2;
    const std::string weight = conv_prefix + ".weight";
    const bool hidden = y.f16 != nullptr && residual.f32 == nullptr && residual.f16 == nullptr;
    if (hidden && y_stats_slot == Slot::kNone) {
        throw std::logic_error("adain_conv1d " + conv_prefix +
                               ": an FP16 hidden (no bias, no residual) needs a statistics slot");
    }
    if (!tensor_core(weights.plan(weight).kernel)) {
        if (out_scale != 1.f || x.f16 != nullptr || y.f16 != nullptr ||
            residual.f16 != nullptr) {
            throw std::logic_error("adain_conv1d " + conv_prefix +
                                   ": an output scale or FP16 tensors need its tensor-core weight");
        }
        float* activated = floats(Slot::kActivated, int64_t(c_in) * T);
        adain(x.f32, activated, c_in, T, fc_prefix, act, slope, alpha);
        conv1d(conv_prefix, activated, y.f32,
               ConvShape{c_in, c_out, T, kernel}.with_pad(pad).with_dilation(dilation),
               residual.f32);
        return {};
    }
    const DeviceWeights::HalfConv w =
        weights.get_half(weight, int64_t(c_out) * kernel * ops::half_rows_pitch(c_in));
    const float* b = hidden ? nullptr : weights.get(conv_prefix + ".bias", c_out);
    const float* s = style(fc_prefix, c_in);
    double* scratch = adain_partials(c_in, T);
    if (x.f16 != nullptr && act == ops::Activation::kSnake &&
        ops::conv1d_takes_raw_input(c_in, c_out, T, kernel, pad, dilation, w.form,
                                    conv_streams)) {
        const ops::ChannelApply* apply =
            ops::adain_apply(x_stats, c_in, T, s, act, slope, alpha, w.form, scratch, stream);
        return conv1d_half_rows(w, ops::HalfInput(x.f16, apply), y, c_in, c_out, T, kernel, pad,
                                dilation, b, residual, y_stats_slot, out_scale);
    }
    __half* rows = half_rows(c_in, T, w.form);
    ops::adain_half_rows(x, rows, c_in, T, s, act, slope, alpha, w.form, scratch, stream, x_stats);
    return conv1d_half_rows(w, rows, y, c_in, c_out, T, kernel, pad, dilation, b, residual,
                            y_stats_slot, out_scale);
}

ops::ChannelPartials Context::conv1d_half_rows(const DeviceWeights::HalfConv& w,
                                               ops::HalfInput x, ops::FloatOrHalf y, int c_in,
                                               int c_out, int t_in, int kernel, int pad,
                                               int dilation, const float* b,
                                               ops::ConstFloatOrHalf residual,
                                               Slot y_stats_slot, float out_scale) const {
    float* scratch = op_scratch(ops::conv1d_half_rows_scratch_floats(
        c_in, c_out, t_in, kernel, pad, dilation, w.form, conv_streams));
    const ops::ChannelPartials y_stats =
        conv_stats(y_stats_slot, c_out,
                   ops::conv1d_half_rows_stats_parts(c_in, c_out, t_in, kernel, pad, dilation,
                                                     w.form, conv_streams));
    ops::conv1d_half_rows(x, w.w, w.scale, b, y, c_in, c_out, t_in, kernel, pad, dilation,
                          residual, w.form, scratch, stream, ops::HalfKernel::kBest,
                          y_stats.data, conv_streams, out_scale);
    return y_stats;
}

void Context::pool_conv1d(const std::string& pool_prefix, const std::string& conv_prefix,
                          const float* x, float* y, int c, int c_out, int t_in) const {
    constexpr int kPoolKernel = 3, kPoolStride = 2, kPoolPad = 1, kPoolOutputPad = 1;
    constexpr int kConvKernel = 3, kConvPad = 1;
    const int t_out =
        ops::conv_transpose1d_out_len(t_in, kPoolKernel, kPoolStride, kPoolPad, kPoolOutputPad);
    const std::string conv_weight = conv_prefix + ".weight";
    if (!tensor_core(weights.plan(conv_weight).kernel)) {
        float* pooled = floats(Slot::kBlockPooled, int64_t(c) * t_out);
        conv_transpose1d(pool_prefix, x, pooled,
                         ConvShape{c, c, t_in, kPoolKernel}
                             .with_stride(kPoolStride)
                             .with_pad(kPoolPad)
                             .with_output_padding(kPoolOutputPad)
                             .with_groups(c));
        conv1d(conv_prefix, pooled, y, ConvShape{c, c_out, t_out, kConvKernel}.with_pad(kConvPad));
        return;
    }
    const DeviceWeights::HalfConv w =
        weights.get_half(conv_weight, int64_t(c_out) * kConvKernel * ops::half_rows_pitch(c));
    __half* rows = half_rows(c, t_out, w.form);
    ops::conv_transpose1d_depthwise_half_rows(
        x, weights.get(pool_prefix + ".weight", int64_t(c) * kPoolKernel),
        weights.get(pool_prefix + ".bias", c), rows, c, t_in, kPoolKernel, kPoolStride, kPoolPad,
        kPoolOutputPad, w.form, stream);
    conv1d_half_rows(w, rows, y, c, c_out, t_out, kConvKernel, kConvPad, 1,
                     weights.get(conv_prefix + ".bias", c_out), nullptr);
}

const __half* Context::conv1x1_half(const std::string& prefix, const float* x, int c_in,
                                    int c_out, int t, Slot y_slot) const {
    const DeviceWeights::HalfConv w =
        weights.get_half(prefix + ".weight", int64_t(c_out) * ops::half_rows_pitch(c_in));
    __half* rows = half_rows(c_in, t, w.form);
    ops::to_half_rows(x, rows, c_in, t, w.form, stream);
    __half* y = halves(y_slot, ops::half_channels_values(c_out, t));
    conv1d_half_rows(w, rows, y, c_in, c_out, t, 1, 0, 1, nullptr, nullptr);
    return y;
}

ops::ChannelPartials Context::conv_transpose1d(const std::string& prefix, ops::ScaledSum x,
                                               ops::FloatOrHalf y, const ConvShape& shape,
                                               float leaky_slope, int reflect_left,
                                               const float* residual, Slot y_stats_slot) const {
    const int c_in = shape.c_in, c_out = shape.c_out, t_in = shape.t_in, kernel = shape.kernel;
    const int stride = shape.stride, pad = shape.pad, output_padding = shape.output_padding;
    const int groups = shape.groups;
    const std::string weight = prefix + ".weight";
    const float* b = weights.get(prefix + ".bias", c_out);
    if (groups == 1 && output_padding == 0 && tensor_core(weights.plan(weight).kernel)) {
        const DeviceWeights::HalfConv w =
            weights.get_half(weight, int64_t(kernel) * c_out * ops::half_rows_pitch(c_in));
        __half* rows = half_rows(c_in, t_in, w.form);
        ops::to_half_rows(x, rows, c_in, t_in, w.form, stream, leaky_slope);
        float* scratch = op_scratch(ops::conv_transpose1d_half_rows_scratch_floats(
            c_in, c_out, t_in, kernel, stride, pad, w.form));
        const ops::ChannelPartials y_stats =
            conv_stats(y_stats_slot, c_out,
                       ops::conv_transpose1d_half_rows_stats_parts(
                           c_in, c_out, t_in, kernel, stride, pad, reflect_left, w.form));
        ops::conv_transpose1d_half_rows(rows, w.w, w.scale, b, y, c_in, c_out, t_in, kernel, stride,
                                        pad, reflect_left, residual, w.form, scratch, stream,
                                        ops::HalfKernel::kBest, y_stats.data);
        return y_stats;
    }
    const float* w = weights.get(weight, int64_t(c_in) * (c_out / groups) * kernel);
    if (reflect_left != 0 || residual != nullptr || y.f16 != nullptr) {
        throw std::logic_error("conv_transpose1d " + prefix +
                               ": a pad, residual or FP16 output needs its tensor-core weight");
    }
    float* scratch =
        op_scratch(ops::conv_transpose1d_scratch_floats(c_in, c_out, t_in, kernel, groups));
    const float* activated = leaky_relu_of(single(x, prefix), int64_t(c_in) * t_in, leaky_slope);
    ops::conv_transpose1d(blas, activated, w, b, y.f32, c_in, c_out, t_in, kernel, stride, pad,
                          output_padding, groups, scratch, stream, gemm_math());
    return {};
}

const float* Context::leaky_relu_of(const float* x, int64_t n, float leaky_slope) const {
    if (leaky_slope == 1.f) return x;
    float* activated = floats(Slot::kActivated, n);
    ops::leaky_relu(x, activated, n, leaky_slope, stream);
    return activated;
}

ops::ChannelPartials Context::conv_stats(Slot slot, int c, int parts) const {
    if (slot == Slot::kNone || parts == 0) return {};
    return {ws.doubles({slot, 0, slot_stream},
                       int64_t(c) * parts * ops::kPartialDoubles),
            parts};
}

void Context::linear(const std::string& prefix, const float* x, float* y, int rows, int in, int out,
                     float beta, bool with_bias) const {
    const std::string weight = prefix + ".weight";
    const float* b = with_bias ? weights.get(prefix + ".bias", out) : nullptr;
    if (weights.plan(weight).kernel == Kernel::kSplitLinear) {
        split_linear(weight, x, b, y, rows, in, out, beta);
        return;
    }
    if (x == nullptr) throw std::logic_error(prefix + ": a split input needs its split weight");
    ops::linear(blas, x, weights.get(weight, int64_t(out) * in), b, y, rows, in, out, stream, beta,
                gemm_math());
}

// -------------------------------------------------------------- UtteranceRows

UtteranceRows::UtteranceRows(std::vector<int> lengths, Workspace& ws, cudaStream_t stream,
                             SplitShapes& shapes, RowsKind kind)
    : lengths_(std::move(lengths)), ws_(&ws), shapes_(&shapes), kind_(kind) {
    std::vector<int32_t> positions;
    for (const int T : lengths_) {
        offsets_.push_back(rows_);
        rows_ += T;
        for (int t = 0; t < T; ++t) positions.push_back(t);
    }
    if (!stacked()) return;
    const Slot slot = kind_ == RowsKind::kTokens ? Slot::kTokenPositions : Slot::kFramePositions;
    int32_t* dev = ws.ints(slot, rows_);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(dev, positions.data(), sizeof(int32_t) * rows_,
                                      cudaMemcpyHostToDevice, stream));
    positions_ = dev;
    for (const auto& [in, out] : SplitShapes(shapes)) row_chunks(in, out, stream);
}

const int32_t* UtteranceRows::row_chunks(int in, int out, cudaStream_t stream) const {
    if (!stacked()) return nullptr;
    const auto key = std::make_pair(in, out);
    const auto found = row_chunks_.find(key);
    if (found != row_chunks_.end()) return found->second;
    const std::vector<int32_t> chunks = ops::linear_split_half_row_chunks(lengths_, in, out);
    // One buffer per shape, at a fixed index, so that later rows of the same
    // shape reuse it.
    const SlotKey slot(
        kind_ == RowsKind::kTokens ? Slot::kTokenRowChunks : Slot::kFrameRowChunks,
        (int64_t(in) << 32) | uint32_t(out));
    int32_t* dev = ws_->ints(slot, rows_);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(dev, chunks.data(), sizeof(int32_t) * rows_,
                                      cudaMemcpyHostToDevice, stream));
    row_chunks_.emplace(key, dev);
    shapes_->insert(key);
    return dev;
}

Context::SplitPlans Context::split_plans(int rows, int in, int out) const {
    SplitPlans p;
    if (utterance_rows != nullptr && utterance_rows->stacked()) {
        if (rows != utterance_rows->rows()) {
            throw std::logic_error("a split linear on stacked utterances takes all of their rows");
        }
        p.row_chunks = utterance_rows->row_chunks(in, out, stream);
    }
    p.scratch = floats(Slot::kOpScratch,
                       ops::linear_split_half_scratch_floats(rows, in, out, ops::HalfKernel::kBest,
                                                             p.row_chunks != nullptr));
    return p;
}

void Context::split_linear(const std::string& weight, const float* x, const float* b, float* y,
                           int rows, int in, int out, float beta) const {
    const DeviceWeights::SplitLinear w = weights.get_split_linear(weight, out, in);
    const SplitPlans p = split_plans(rows, in, out);
    ops::linear_split_half(x, split_input(rows, in), w.w, w.scale, b, y, rows, in, out, p.scratch,
                           stream, beta, ops::HalfKernel::kBest, p.row_chunks);
}

ops::SplitSums Context::linear_sums(const std::string& prefix, const float* x, float* y,
                                    int rows, int in, int out, float beta) const {
    const std::string weight = prefix + ".weight";
    if (weights.plan(weight).kernel != Kernel::kSplitLinear) {
        linear(prefix, x, y, rows, in, out, beta, false);
        return y;
    }
    const DeviceWeights::SplitLinear w = weights.get_split_linear(weight, out, in);
    const SplitPlans p = split_plans(rows, in, out);
    return ops::linear_split_half_sums(x, split_input(rows, in), w.w, w.scale, y, rows, in, out,
                                       p.scratch, stream, beta, ops::HalfKernel::kBest,
                                       p.row_chunks);
}

void Context::lstm(const std::string& prefix, const float* x, float* out, int T) const {
    const DeviceWeights::Lstm l = weights.lstm(prefix);
    const bool stacked = utterance_rows != nullptr && utterance_rows->stacked();
    if (weights.plan(prefix + ".weight_ih").kernel != Kernel::kSplitLinear) {
        // (cuBLAS picks its kernel by the row count: stacked rows would not
        // keep each utterance's bits)
        if (stacked) throw std::logic_error(prefix + ": stacked utterances need a split LSTM");
        float* scratch = floats(Slot::kOpScratch, ops::lstm_scratch_floats(T, l.hidden));
        ops::lstm_bidirectional(blas, x, l.w_ih, l.w_hh, l.b, out, T, l.in, l.hidden, scratch,
                                stream);
        return;
    }
    // Both directions' input projections as one split linear (its scratch
    // takes Slot::kOpScratch), then the recurrence, of every stacked utterance
    // at once.
    float* gx = floats(Slot::kLstmGates, ops::lstm_scratch_floats(T, l.hidden));
    split_linear(prefix + ".weight_ih", x, l.b, gx, T, l.in, 8 * l.hidden);
    const std::vector<int> lengths = stacked ? utterance_rows->lengths() : std::vector<int>{T};
    ops::lstm_recurrence(gx, l.w_hh, out, lengths, l.hidden, stream);
}

}  // namespace kokoro
