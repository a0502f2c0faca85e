// A lane: what one utterance in flight needs (the engine runs a batch on
// several, one host thread each). Four streams with their events and cuBLAS
// handles (main, side at the lowest priority, the others at the highest; two
// for the AdainResBlk1d shortcuts and the generator's concurrent residual
// blocks), a workspace and the graph caches. A forward pass has two phases
// around the one mid-pass read-back (the durations size the frame axis):
//   tokens: style projections, ALBERT, then [text encoder on the side
//           stream] || bert_encoder, duration encoder, duration head -> logits;
//   (uncaptured: durations from the logits and the speed, read back)
//   frames: alignment, shared LSTM, F0 stack || N stack, then
//           [harmonic source + STFT, then each generator stage's source
//           branch, on the side stream] || decoder, the generator's
//           stages (each waits for its source branch); the audio is read back
//           (into a page-locked block of the engine's PinnedPool, which the
//           result keeps).
// Each phase runs as a CUDA graph replay once its key has been seen before
// (tokens: T, or a group's lengths; a group's frame prefix: its lengths and
// frame counts; frames: T, F, deterministic, whether the prefix made its
// alignment; all: whether the lane's thread shares the GPU, as a batch on
// several lanes does: launch.cuh); the seed reaches the source through
// device memory, so replays take a new one. A graph is stale once the
// workspace generation has moved on (a buffer it uses was replaced) and is
// then captured again. A trace runs everything uncaptured.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kokoro/check.h"
#include "kokoro/engine.h"
#include "kokoro/model.h"

namespace kokoro {


struct StreamDeleter {
    void operator()(cudaStream_t s) const noexcept { static_cast<void>(cudaStreamDestroy(s)); }
};
struct BlasDeleter {
    void operator()(cublasHandle_t h) const noexcept { static_cast<void>(cublasDestroy(h)); }
};
struct EventDeleter {
    void operator()(cudaEvent_t e) const noexcept { static_cast<void>(cudaEventDestroy(e)); }
};
struct GraphDeleter {
    void operator()(cudaGraph_t g) const noexcept { static_cast<void>(cudaGraphDestroy(g)); }
};
struct GraphExecDeleter {
    void operator()(cudaGraphExec_t g) const noexcept { static_cast<void>(cudaGraphExecDestroy(g)); }
};
template <typename Handle, typename Deleter>
using Owned = std::unique_ptr<std::remove_pointer_t<Handle>, Deleter>;

constexpr size_t kGraphCacheEntries = 16;          // per phase and lane
// cuBLAS's advice for Hopper; the residual-block streams' GEMMs (the
// shortcuts' 1x1 convs) are small: a quarter of it.
constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;
constexpr size_t kResblockBlasWorkspaceBytes = kBlasWorkspaceBytes / 4;
// main, side, then the generator's residual-block streams, which also run
// the AdainResBlk1d shortcuts (1x1 convs) of the F0 / N stacks and the
// decoder beside their residual paths; each with its cuBLAS handle.
constexpr int kStreams = 2 + kResblockStreams;
constexpr int kSideStream = 1;
const char* const kStreamTags[] = {"", ".side", ".res1", ".res2"};
static_assert(sizeof(kStreamTags) / sizeof(kStreamTags[0]) == kStreams, "one name per stream");

// A captured phase: the executable graph and the workspace generation it
// was captured at.
struct CachedGraph {
    Owned<cudaGraphExec_t, GraphExecDeleter> exec;
    uint64_t generation = 0;
};

// A graph's key: the shapes and choices its launches were captured with.
using GraphKey = std::vector<int64_t>;

// Bounded LRU of CachedGraph by key. An entry without a graph marks a key
// seen once.
class GraphCache {
public:
    // The entry of `key`, made the most recent; null when the key is new
    // (it is then noted, evicting the least recent entry when full).
    CachedGraph* find_or_note(const GraphKey& key) {
        auto it = index_.find(key);
        if (it != index_.end()) {
            order_.splice(order_.begin(), order_, it->second);
            return &it->second->second;
        }
        if (order_.size() == kGraphCacheEntries) {
            index_.erase(order_.back().first);
            order_.pop_back();
        }
        order_.emplace_front(key, CachedGraph{});
        index_[key] = order_.begin();
        return nullptr;
    }
    void clear() {
        index_.clear();
        order_.clear();
    }

private:
    using Entries = std::list<std::pair<GraphKey, CachedGraph>>;
    Entries order_;
    std::map<GraphKey, Entries::iterator> index_;
};

class Lane {
public:
    Lane(const ModelConfig& cfg, const DeviceWeights& weights, const Model& model,
         Precision precision, std::shared_ptr<PinnedPool> audio_pool);
    ~Lane();
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

    // One utterance: its token phase, the durations read back, frames().
    ForwardResult run(const Utterance& u, Trace* trace);
    // Utterances first .. first + n - 1 into results: one token phase for
    // all of their tokens (stacked: ALBERT, bert_encoder and every LSTM once
    // for the group; a graph per group's lengths), one read-back of their
    // durations, their alignments and shared LSTM (stacked, a graph per
    // group's lengths and frames), then each one's frames(); each result to
    // `sink` (index from `first`) as soon as its audio has landed.
    void run_group(const Utterance* first, size_t n, const ResultSink& sink);
    size_t workspace_bytes() const { return ws_.bytes(); }
    // Safe to read while the lane's thread runs (a server's metrics).
    PhaseRuns phase_runs() const {
        return {eager_runs_.load(std::memory_order_relaxed),
                captured_runs_.load(std::memory_order_relaxed),
                replayed_runs_.load(std::memory_order_relaxed)};
    }
    // Phase timing on or off; the cached graphs (with or without marks) go.
    void set_phase_timing(bool on);
    const PhaseMarks& marks() const { return marks_; }

private:
    Context context(int stream, bool fast, Trace* trace);
    // The generator's streams and concurrency for F frames (GeneratorSchedule).
    GeneratorSchedule generator_schedule(const Context& generator, const Context& side,
                                         const Context (&resblocks)[kResblockStreams],
                                         int F) const;
    // The frame phase of `u`, whose token phase left its outputs in the
    // lane's slots (engine.d, engine.t_en, engine.durations and style_out_),
    // from its durations (read back) to the audio in host memory. aligned: a
    // group's frame prefix (run_group) left its alignment and shared LSTM
    // output in the slots too (engine.frame_token, prosody.shared_rows).
    // Unless `wait`, the audio's copy to the host is only enqueued (into a
    // block of the pool): the caller synchronises the main stream before the
    // result is read, and may enqueue the next utterance meanwhile.
    ForwardResult frames(const Utterance& u, std::vector<int32_t> durations, Trace* trace,
                         bool aligned = false, bool wait = true);
    // style_out_, sized for the style banks.
    void take_style_slots();
    // Where token_pass writes, per token row: bert [rows, bert_hidden],
    // d_en_rows [rows, hidden], d [rows, hidden + style], dur_lstm [rows,
    // hidden], logits [rows, max_dur]; t_en, utterance u's [hidden, T_u] at
    // hidden x its first row.
    struct TokenOutputs {
        float *bert, *d_en_rows, *d, *dur_lstm, *logits, *t_en;
    };
    // The token phase of `tokens`' utterances (one, or a batch's group
    // stacked) on ctx's stream and `side`'s: each one's style projections
    // (of ref_s [count, 2 * style_dim] into its styles[u].projections),
    // ALBERT, then the text encoder (side) || bert_encoder, the duration
    // encoder and head.
    void token_pass(const Context& ctx, const Context& side, const int32_t* ids,
                    const float* ref_s, const UtteranceRows& tokens,
                    const std::vector<UtteranceStyle>& styles, const TokenOutputs& out) const;
    // Enqueues `body()` on the main stream: a replay of the graph cached
    // under `key`, else uncaptured on a key's first sight (or with a trace),
    // else captured and launched.
    template <typename Body>
    void run_phase(GraphCache& cache, GraphKey key, bool capture, Body&& body);

    const ModelConfig& cfg_;
    const DeviceWeights& weights_;
    Precision precision_;
    // The model's parts (the engine's, shared by its lanes).
    const Model& model_;
    // Whether `part`'s contexts run fast (the precision plan's part table).
    bool fast(ModelPart part) const { return part_runs_fast(part, precision_); }
    // Declared in teardown order: later members go first.
    Owned<cudaStream_t, StreamDeleter> streams_[kStreams];
    std::unique_ptr<void, DeviceFree> blas_workspace_[kStreams];
    Owned<cublasHandle_t, BlasDeleter> blas_[kStreams];
    Owned<cudaEvent_t, EventDeleter> events_[kStreams];
    // A group's utterance i's audio in host memory (run_group): recorded after
    // its frame phase, so its result is handed on while later ones run.
    std::vector<Owned<cudaEvent_t, EventDeleter>> landed_;
    Workspace ws_;
    GraphCache token_graphs_, frame_graphs_;  // token phases: {T}, or a group's lengths
    GraphCache prefix_graphs_;                 // a group's frame prefix: lengths, frames
    SplitShapes split_shapes_, frame_split_shapes_;  // of a group's token and frame rows
    float* style_out_[2] = {nullptr, nullptr};  // fc(s) of each style bank
    bool timing_ = false;
    PhaseMarks marks_;
    std::atomic<uint64_t> eager_runs_{0}, captured_runs_{0}, replayed_runs_{0};  // run_phase's
    // The audio's way to the host: page-locked blocks that the results keep
    // (PinnedPool, shared by the engine's lanes), or beyond its bound this
    // lane's staging block (audio_staging).
    std::shared_ptr<PinnedPool> audio_pool_;
    std::unique_ptr<float, PinnedFree> audio_staging_;
    int64_t audio_staging_floats_ = 0;
    // The staging block, grown to hold at least `floats`.
    float* audio_staging(int64_t floats);
};

}  // namespace kokoro
