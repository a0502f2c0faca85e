// The row-wise layers (layers.h): Linear and BiLstm, on cuBLAS or the split
// FP16 GEMM as the precision plan gives their weights.
#include <stdexcept>
#include <string>
#include <vector>

#include "kokoro/layers.h"

namespace kokoro {

namespace {

// The split FP16 GEMM y [rows, out] = x [rows, in] @ w^T + b (+ beta * y),
// with the rows' split plans (Context::split_plans); x null: its operand is
// in the context's split_input already.
void split_linear(const Context& ctx, const DeviceWeights::SplitLinear& w, const float* x,
                  const float* b, float* y, int rows, int in, int out, float beta) {
    const Context::SplitPlans p = ctx.split_plans(rows, in, out);
    ops::linear_split_half(x, ctx.split_input(rows, in), w.w, w.scale, b, y, rows, in, out,
                           p.scratch, ctx.stream, beta, ops::HalfKernel::kBest, p.row_chunks);
}

}  // namespace

// --------------------------------------------------------------------- Linear

Linear::Linear(const DeviceWeights& weights, const std::string& prefix, int in, int out)
    : name_(prefix), in_(in), out_(out) {
    const std::string weight = prefix + ".weight";
    b_ = weights.get(prefix + ".bias", out);
    if (weights.plan(weight).kernel == Kernel::kSplitLinear) {
        split_ = weights.get_split_linear(weight, out, in);
    } else {
        w_ = weights.get(weight, int64_t(out) * in);
    }
}

void Linear::run(const Context& ctx, const float* x, const float* b, float* y, int rows,
                 float beta) const {
    if (split()) {
        split_linear(ctx, split_, x, b, y, rows, in_, out_, beta);
        return;
    }
    if (x == nullptr) throw std::logic_error(name_ + ": a split input needs its split weight");
    ops::linear(ctx.blas, x, w_, b, y, rows, in_, out_, ctx.stream, beta, ctx.gemm_math());
}

void Linear::operator()(const Context& ctx, const float* x, float* y, int rows,
                        float beta) const {
    run(ctx, x, b_, y, rows, beta);
}

void Linear::without_bias(const Context& ctx, const float* x, float* y, int rows,
                          float beta) const {
    run(ctx, x, nullptr, y, rows, beta);
}

ops::SplitSums Linear::sums(const Context& ctx, const float* x, float* y, int rows,
                            float beta) const {
    if (!split()) {
        run(ctx, x, nullptr, y, rows, beta);
        return y;
    }
    const Context::SplitPlans p = ctx.split_plans(rows, in_, out_);
    return ops::linear_split_half_sums(x, ctx.split_input(rows, in_), split_.w, split_.scale, y,
                                       rows, in_, out_, p.scratch, ctx.stream, beta,
                                       ops::HalfKernel::kBest, p.row_chunks);
}

// --------------------------------------------------------------------- BiLstm

BiLstm::BiLstm(const DeviceWeights& weights, const std::string& prefix)
    : name_(prefix), lstm_(weights.lstm(prefix)) {
    const std::string weight_ih = prefix + ".weight_ih";
    if (weights.plan(weight_ih).kernel == Kernel::kSplitLinear) {
        split_ih_ = weights.get_split_linear(weight_ih, 8 * lstm_.hidden, lstm_.in);
    }
}

void BiLstm::operator()(const Context& ctx, const float* x, float* out, int T) const {
    const DeviceWeights::Lstm& l = lstm_;
    const bool stacked = ctx.utterance_rows != nullptr && ctx.utterance_rows->stacked();
    if (split_ih_.w == nullptr) {
        if (stacked) throw std::logic_error(name_ + ": stacked utterances need a split LSTM");
        float* scratch = ctx.floats(Slot::kOpScratch, ops::lstm_scratch_floats(T, l.hidden));
        ops::lstm_bidirectional(ctx.blas, x, l.w_ih, l.w_hh, l.b, out, T, l.in, l.hidden, scratch,
                                ctx.stream);
        return;
    }
    // Both directions' input projections as one split linear (its scratch
    // takes Slot::kOpScratch), then the recurrence, of every stacked
    // utterance at once.
    float* gx = ctx.floats(Slot::kLstmGates, ops::lstm_scratch_floats(T, l.hidden));
    split_linear(ctx, split_ih_, x, l.b, gx, T, l.in, 8 * l.hidden, 0.f);
    const std::vector<int> lengths =
        stacked ? ctx.utterance_rows->lengths() : std::vector<int>{T};
    ops::lstm_recurrence(gx, l.w_hh, out, lengths, l.hidden, ctx.stream);
}

}  // namespace kokoro
