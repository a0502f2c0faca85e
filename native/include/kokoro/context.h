// What every model part runs with:
// - Trace: host copies of the intermediates of docs/DESIGN.md, taken only
//   when the caller asks for them;
// - UtteranceRows: the rows of one utterance or of several stacked;
// - Context: workspace, cuBLAS handle, stream, style vectors, optional
//   trace, and whether its part runs fast (the precision plan's part
//   table): what a layer (layers.h) runs with, the weights being the
//   layer's own. Two contexts on two streams may run model parts
//   concurrently: each keys its workspace slots with its own stream, and
//   wait_for() orders them by events.
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

// One utterance's style on the device: ref_s's prosody half s
// [style_dim] and the style projections of each bank (Context::style_out).
struct UtteranceStyle {
    const float* s;
    float* projections[2];
};

struct Context {
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
    // The same with `style`'s projections (StyleProjection reads them).
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
    // A phase-timing mark `name` on this context's stream; no-op unless timing is on.
    void mark(const std::string& name) const {
        if (marks != nullptr) marks->record(name, stream);
    }
    // Copies a device tensor to the trace (waits for the stream); no-op without a trace.
    void record(const char* key, const float* device, std::vector<int64_t> shape) const;

    // The layers' scratch (layers.h).
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
    // The split FP16 operand buffer of the split linears (workspace slot
    // Slot::kSplitRows): where an op writes a split linear's input itself.
    __half* split_input(int rows, int in) const {
        return halves(Slot::kSplitRows, 2 * int64_t(rows) * ops::split_pitch(in));
    }
    // A split linear's plans on `rows` rows: utterance_rows' row_chunks
    // where it is a stack (then rows must be all its rows), else null; its
    // scratch (workspace slot Slot::kOpScratch).
    struct SplitPlans {
        const int32_t* row_chunks = nullptr;
        float* scratch = nullptr;
    };
    SplitPlans split_plans(int rows, int in, int out) const;
};

}  // namespace kokoro
