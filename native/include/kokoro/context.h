// What every model part runs with:
// - Trace: host copies of the intermediates of docs/DESIGN.md, taken only
//   when the caller asks for them;
// - UtteranceRows: the rows of one utterance or of several stacked;
// - Context: config, weights, workspace, cuBLAS handle, stream, style
//   vectors, optional trace, and whether its part runs fast (the precision
//   plan's part table), with the layers that look up their weights and take
//   their path from the plan. Two contexts on two streams may run model
//   parts concurrently: each keys its workspace slots with its own stream,
//   and wait_for() orders them by events.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kokoro/ops.h"
#include "kokoro/weights.h"
#include "kokoro/workspace.h"

namespace kokoro {

// Host copies of intermediates, by docs/DESIGN.md trace key.
struct Trace {
    struct Array {
        std::vector<int64_t> shape;
        std::vector<float> values;
    };
    std::map<std::string, Array> floats;
    std::map<std::string, std::vector<int64_t>> ints;
};

// The split linears' shapes (in, out) that stacked rows have met (a
// lane's: UtteranceRows).
using SplitShapes = std::set<std::pair<int, int>>;

// The rows a layer runs on, tokens or frames: one utterance's T, or several
// utterances' stacked (a batch's group: utterance i at rows offset(i) ..
// offset(i) + length(i) - 1). Row-wise ops take a stack as more rows. Its
// device tables (the workspace slots of its RowsKind, uploaded on the given stream,
// or a shape's on the stream of the op that first reads it: row_chunks)
// give each row its position within its utterance and, per linear shape,
// the split plan a call on its utterance alone would take (ops::
// linear_split_half's row_chunks): every row then has the bits of that
// call. The tables of every shape in `shapes` are uploaded when the rows
// are made, and a shape met later joins it: the uploads cannot go into a
// graph capture, which therefore needs a pass over the same shapes before
// it (Lane::run_phase's first sight of a key runs uncaptured).
// Which rows: a lane's token and frame rows keep their tables apart.
enum class RowsKind { kTokens, kFrames };

class UtteranceRows {
public:
    explicit UtteranceRows(int T) : lengths_{T}, offsets_{0}, rows_(T) {}
    UtteranceRows(std::vector<int> lengths, Workspace& ws, cudaStream_t stream,
                  SplitShapes& shapes, RowsKind kind = RowsKind::kTokens);
    int rows() const { return rows_; }
    int count() const { return int(lengths_.size()); }
    int length(int i) const { return lengths_[i]; }
    const std::vector<int>& lengths() const { return lengths_; }
    int longest() const { return *std::max_element(lengths_.begin(), lengths_.end()); }
    int offset(int i) const { return offsets_[i]; }
    bool stacked() const { return lengths_.size() > 1; }
    // Device [rows]: each row's position in its utterance (null: one utterance).
    const int32_t* positions() const { return positions_; }
    // Device [rows]: each row's reduction chunks per split for a split linear
    // in -> out (null: one utterance, the linear plans its own). A shape met
    // here first is uploaded on `stream`, that of the op that reads it (a
    // shape's linears all run on one stream; the text encoder's LSTM runs on
    // the side stream: uploaded on the main stream, its table could land
    // after the side stream's GEMM read it).
    const int32_t* row_chunks(int in, int out, cudaStream_t stream) const;

private:
    std::vector<int> lengths_, offsets_;
    int rows_ = 0;
    Workspace* ws_ = nullptr;
    SplitShapes* shapes_ = nullptr;
    RowsKind kind_ = RowsKind::kTokens;
    const int32_t* positions_ = nullptr;
    mutable std::map<std::pair<int, int>, const int32_t*> row_chunks_;
};

// A conv's shape: x [c_in, t_in] -> y [c_out, t_out] by `kernel` taps at
// `stride`, `pad`, `dilation` in `groups` (a transposed conv's also
// `output_padding`), with the weight's bias unless without_bias().
struct ConvShape {
    int c_in, c_out, t_in, kernel;
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

// An AdaIN1d + activation: the style projection `fc_prefix`, then
// LeakyReLU(slope) or Snake(alpha) (act).
struct AdainAct {
    std::string fc_prefix;
    ops::Activation act;
    float slope;
    const float* alpha;
};

// A dense stride-1 conv with bias that keeps the length: weight `prefix`,
// x [c_in, T] -> y [c_out, T] by `kernel` taps at `dilation`.
struct SameConv {
    std::string prefix;
    int c_in, c_out, T, kernel, dilation;
};

// One utterance's style on the device: ref_s's prosody half s
// [style_dim] and the style projections of each bank (Context::style_out).
struct UtteranceStyle {
    const float* s;
    float* projections[2];
};

struct Context {
    const ModelConfig& cfg;
    const DeviceWeights& weights;
    Workspace& ws;
    cublasHandle_t blas;        // bound to `stream`, used by this context alone (null: none)
    cudaStream_t stream;
    cudaEvent_t event;          // marks this context's progress for wait_for()
    const float* style_out[2];  // fc(s) results of each style bank, on the device
    Trace* trace;               // null unless intermediates were asked for
    bool fast;                  // TF32 GEMMs (precision "fast"; the conv forms follow the weights)
    const char* tag;            // the stream's name in phase marks ("" for the main stream)
    int slot_stream;            // the stream that keys this context's workspace slots
    PhaseMarks* marks;          // null unless phase timing is on
    int conv_streams = 1;       // tensor-core convs running at once (their plans share the GPU)
    // Stacked utterances' rows (the split linears' plans; null: none).
    const UtteranceRows* utterance_rows = nullptr;

    // The workspace buffer `slot` (its `index`-th) of this context's stream.
    float* floats(Slot slot, int64_t count, int64_t index = 0) const {
        return ws.floats({slot, index, slot_stream}, count);
    }
    __half* halves(Slot slot, int64_t count, int64_t index = 0) const {
        return ws.halves({slot, index, slot_stream}, count);
    }
    // The partial-statistics scratch of an AdaIN on [C, T] (ops::adain_scratch_doubles).
    double* adain_partials(int C, int T) const {
        return ws.doubles({Slot::kAdainPartials, 0, slot_stream}, ops::adain_scratch_doubles(C, T));
    }
    // Work enqueued on this context from now on waits for everything
    // enqueued on `other` so far (an event; also a graph-capture edge).
    void wait_for(const Context& other) const;
    // The same context in precision "fast" (true) or fp32 (false).
    Context with_fast(bool f) const {
        Context c = *this;
        c.fast = f;
        return c;
    }
    Context with_conv_streams(int n) const {
        Context c = *this;
        c.conv_streams = n;
        return c;
    }
    // The same context whose split linears run on the rows of `t` (which
    // must outlive it): each of t's rows gets its utterance's split plan.
    Context with_utterance_rows(const UtteranceRows& t) const {
        Context c = *this;
        c.utterance_rows = &t;
        return c;
    }
    // The same with `style`'s projections (Context::style).
    Context with_style(const UtteranceStyle& style) const {
        Context c = *this;
        c.style_out[0] = style.projections[0];
        c.style_out[1] = style.projections[1];
        return c;
    }
    // The same stream with `other`'s workspace slots: only where other's
    // work is done and ordered before everything enqueued here.
    Context with_slots_of(const Context& other) const {
        Context c = *this;
        c.tag = other.tag;
        c.slot_stream = other.slot_stream;
        return c;
    }
    ops::GemmMath gemm_math() const { return fast ? ops::GemmMath::kTf32 : ops::GemmMath::kFp32; }
    const float* w(const std::string& name, int64_t numel) const {
        return weights.get(name, numel);
    }
    // gamma/beta [2C] of the style projection `fc_prefix`, checked to be 2C wide.
    const float* style(const std::string& fc_prefix, int channels) const;
    // A phase-timing mark `name` on this context's stream; no-op unless timing is on.
    void mark(const std::string& name) const {
        if (marks != nullptr) marks->record(name, stream);
    }
    // Copies a device tensor to the trace (waits for the stream); no-op without a trace.
    void record(const char* key, const float* device, std::vector<int64_t> shape) const;

    // The layers below look up `prefix.weight` (and `prefix.bias` when `bias`)
    // and take their scratch from the workspace.
    // Conv1d x [c_in, t_in] -> y [c_out, t_out]; y = conv(act(x)) + residual
    // if given, act = LeakyReLU(leaky_slope) (1: none). Convs with a
    // tensor-core plan (precision_plan.h; a strided conv's polyphase one
    // too) run on the FP16 tensor-core kernel (x converted to half
    // rows first, in the weight's form, act on the way); the others in fp32,
    // or TF32 GEMMs where `fast`.
    // x may be a ScaledSum of several tensors where the conv has a
    // tensor-core weight. y_stats_slot (may be kNone): as adain_conv1d's;
    // returns y's partials where the conv writes them (ops::conv1d_stats_parts).
    ops::ChannelPartials conv1d(const std::string& prefix, ops::ScaledSum x, float* y,
                                const ConvShape& shape, const float* residual = nullptr,
                                float leaky_slope = 1.f, Slot y_stats_slot = Slot::kNone) const;
    // AdaIN1d + activation `norm` on x [c_in, T], then the dense stride-1
    // conv `conv` (with bias, same length): y = conv(act(adain(x))) (+
    // residual). For a tensor-core conv
    // the activation is written straight as FP16 half rows; otherwise through
    // an fp32 buffer. y may equal residual, not x. x_stats: x's statistics
    // partials, as the conv that wrote x returned them (none: AdaIN computes
    // them). y_stats_slot (may be kNone): a workspace slot for y's partials,
    // for the AdaIN that reads y next; returns them, or none where the conv
    // cannot write them (ops::conv1d_half_rows_stats_parts). A slot's
    // partials live until the next call that names it. out_scale: y = (conv
    // + residual) * out_scale (tensor-core convs only). x, y and residual
    // may be FP16 (ops::FloatOrHalf; tensor-core convs only): an FP16 x
    // needs x_stats. An FP16 y without a residual (a hidden that only the
    // next AdaIN reads) needs y_stats_slot and leaves out the conv's bias
    // (that AdaIN removes each channel's mean, bias included; the values
    // stay nearer zero, where FP16's steps are finer); with one (a residual
    // stream, a block's output) it keeps it. An FP16 x goes to the conv raw where
    // its kernel takes one (ops::HalfInput: the conv applies the AdaIN + Snake
    // as it loads its windows, the same operands without the pass).
    ops::ChannelPartials adain_conv1d(ops::ConstFloatOrHalf x, ops::FloatOrHalf y,
                                      const AdainAct& norm, const SameConv& conv,
                                      ops::ConstFloatOrHalf residual = nullptr,
                                      ops::ChannelPartials x_stats = {},
                                      Slot y_stats_slot = Slot::kNone,
                                      float out_scale = 1.f) const;
    // The tensor-core conv with weight `w` on half rows [t_in, ld] in w's
    // form (or a raw input); y_stats_slot and out_scale as adain_conv1d's.
    ops::ChannelPartials conv1d_half_rows(const DeviceWeights::HalfConv& w, ops::HalfInput x,
                                          ops::FloatOrHalf y, int c_in, int c_out, int t_in,
                                          int kernel, int pad, int dilation, const float* b,
                                          ops::ConstFloatOrHalf residual,
                                          Slot y_stats_slot = Slot::kNone,
                                          float out_scale = 1.f) const;
    // An AdainResBlk1d's learned upsampler (`pool_prefix`: depthwise
    // ConvTranspose1d k3, stride 2, pad 1, output pad 1) of x [c, t_in], then
    // the conv `conv_prefix` (k3, pad 1, bias) into y [c_out, 2 t_in]: with a
    // tensor-core conv the upsampler writes its half rows itself
    // (ops::conv_transpose1d_depthwise_half_rows), else through an fp32 buffer.
    void pool_conv1d(const std::string& pool_prefix, const std::string& conv_prefix,
                     const float* x, float* y, int c, int c_out, int t_in) const;
    // The pointwise conv `prefix` (no bias) of x [c_in, t] on its FP16 weight
    // (the precision plan's 1x1 block shortcuts): y [c_out, t] FP16 channels-first in the
    // workspace slot `y_slot`, on the tensor-core conv (K = 1).
    const __half* conv1x1_half(const std::string& prefix, const float* x, int c_in, int c_out,
                               int t, Slot y_slot) const;
    // x itself for leaky_slope 1, else LeakyReLU(leaky_slope) of its n values
    // (workspace slot Slot::kActivated).
    const float* leaky_relu_of(const float* x, int64_t n, float leaky_slope) const;
    // A conv's output statistics partials in the workspace slot `slot`, c
    // channels of `parts` (what the conv's *_stats_parts says); none for
    // kNone or parts 0.
    ops::ChannelPartials conv_stats(Slot slot, int c, int parts) const;
    // An op's scratch of n floats (workspace slot Slot::kOpScratch); null for 0.
    float* op_scratch(int64_t n) const { return n > 0 ? floats(Slot::kOpScratch, n) : nullptr; }
    // Workspace half rows for [c, t] in `form`.
    __half* half_rows(int c, int t, ops::HalfOperands form) const {
        return halves(Slot::kHalfRows,
                      int64_t(ops::half_parts(form)) * t * ops::half_rows_pitch(c));
    }
    // ConvTranspose1d with bias, x [c_in, t_in] -> y [c_out, reflect_left +
    // t_out]: y = pad(conv_transpose(act(x)) + b) + residual, act =
    // LeakyReLU(leaky_slope) (1: none), pad the reflection pad (reflect_left,
    // 0); residual (may be null) has y's shape and may equal y. A
    // tensor-core plan (the generator's upsamplers) runs polyphase on
    // the tensor-core kernel, all of it in one pass after the half rows
    // (y_stats_slot as adain_conv1d's; x may be a ScaledSum, y FP16 with an
    // fp32 residual); the others (the decoder's depthwise pool) as
    // ops::conv_transpose1d, fp32, without pad or residual.
    ops::ChannelPartials conv_transpose1d(const std::string& prefix, ops::ScaledSum x,
                                          ops::FloatOrHalf y, const ConvShape& shape,
                                          float leaky_slope = 1.f, int reflect_left = 0,
                                          const float* residual = nullptr,
                                          Slot y_stats_slot = Slot::kNone) const;
    // AdaIN1d + activation on x [C, T] -> y (may equal x), with the style of
    // the projection `fc_prefix`; `alpha` only for Snake.
    void adain(const float* x, float* y, int C, int T, const std::string& fc_prefix,
               ops::Activation act, float slope, const float* alpha) const;
    // Linear on rows: y [rows, out] = x [rows, in] @ W^T + b (+ beta * y);
    // with_bias false leaves b out (the caller fuses it into the next op).
    // x null: the input is in split_input(rows, in) already (a split linear's).
    void linear(const std::string& prefix, const float* x, float* y, int rows, int in, int out,
                float beta = 0.f, bool with_bias = true) const;
    // The same on split FP16 weight `weight` (DeviceWeights::split_linear)
    // with bias b (may be null); its scratch takes Slot::kOpScratch.
    void split_linear(const std::string& weight, const float* x, const float* b, float* y,
                      int rows, int in, int out, float beta = 0.f) const;
    // The split FP16 operand buffer of the split linears (workspace slot
    // Slot::kSplitRows): where an op writes a split linear's input itself.
    __half* split_input(int rows, int in) const {
        return halves(Slot::kSplitRows, 2 * int64_t(rows) * ops::split_pitch(in));
    }
    // The same without its bias, the split linear's sums (fast) left to the
    // op that reads the returned SplitSums (nothing else may take Slot::kOpScratch
    // before it); other weights' GEMMs write y.
    ops::SplitSums linear_sums(const std::string& prefix, const float* x, float* y, int rows,
                               int in, int out, float beta = 0.f) const;
    // Bidirectional LSTM `prefix`: x [T, In] -> out [T, 2H]; with stacked
    // tokens (T their rows) every utterance's sequence on its own rows.
    void lstm(const std::string& prefix, const float* x, float* out, int T) const;

private:
    // A split linear's plans on `rows` rows: tokens' row_chunks where tokens
    // is a stack (then rows must be all its rows), else null; its scratch
    // (workspace slot Slot::kOpScratch).
    struct SplitPlans {
        const int32_t* row_chunks = nullptr;
        float* scratch = nullptr;
    };
    SplitPlans split_plans(int rows, int in, int out) const;
};

}  // namespace kokoro
