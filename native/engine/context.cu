// The Context's stream ordering, trace copies and layer scratch, and the
// stacked rows' device tables (UtteranceRows).
#include <stdexcept>
#include <string>
#include <utility>

#include "kokoro/check.h"
#include "kokoro/context.h"

namespace kokoro {

// -------------------------------------------------------------------- Context

void Context::wait_for(const Context& other) const {
    KOKORO_CUDA_CHECK(cudaEventRecord(other.event, other.stream));
    KOKORO_CUDA_CHECK(cudaStreamWaitEvent(stream, other.event, 0));
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

}  // namespace kokoro
