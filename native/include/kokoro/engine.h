// The native engine: one object per loaded model on one GPU. Construction
// uploads the folded weights once; forward() runs the whole model for one
// utterance, reading back only the durations (to size the frame axis) and
// the audio; forward_batch() runs many utterances on several lanes at once;
// forward_on_lane() runs utterances on one lane, so that a scheduler with a
// thread per lane hands each lane new work as soon as it frees.
// A lane is what one utterance in flight needs: four streams (the model's
// independent branches run concurrently), their cuBLAS handles, a
// workspace, and two bounded LRU caches of CUDA graphs, one for the part
// before the durations read (keyed by the token count) and one for the part
// after it (keyed by token count, frame count and determinism). A key seen
// for the first time runs uncaptured; from the second time on its graph is
// captured once and replayed. Errors: kokoro::CudaError (CUDA and cuBLAS
// failures), WeightsError (missing or misshapen tensors), InvalidInput (bad
// ids, style or speed).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kokoro/context.h"
#include "kokoro/pinned_pool.h"
#include "kokoro/weights.h"

namespace kokoro {

class InvalidInput : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

struct ForwardResult {
    PinnedPool::Block audio;         // [samples]
    int64_t samples = 0;
    std::vector<int64_t> durations;  // [T] frames per token
};

// One utterance: ids [T] (boundary zeros included), ref_s [ref_len =
// 2 * style_dim], speed > 0; the host arrays stay valid during the call.
struct Utterance {
    const int64_t* ids = nullptr;
    int T = 0;
    const float* ref_s = nullptr;
    int ref_len = 0;
    float speed = 1.f;
    bool deterministic = true;
    uint64_t seed = 0;
};

// How the phases of the engine's forward passes ran so far (all lanes): from
// a graph captured for their key (replayed), captured and then launched
// (captured: the key's second sight, or its graph was stale), or launched
// one kernel at a time (eager: a key's first sight, or a trace). What a
// server's traffic costs in launches: distinct lengths run eager.
struct PhaseRuns {
    uint64_t eager = 0, captured = 0, replayed = 0;
};

// Takes each utterance's result (its index in the call) as soon as its audio
// is in host memory, in the call's order, on the calling thread; a caller
// hands it on while the lane runs the rest of the group.
using ResultSink = std::function<void(size_t, ForwardResult)>;

class Lane;
struct Model;

// `precision`: what runs in which form is the precision plan's
// (precision_plan.h).
class Engine {
public:
    Engine(const ModelConfig& config, const HostWeights& weights, int device,
           Precision precision = Precision::kFp32);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // One utterance on lane 0. Calls from several threads are serialised.
    // With `trace` non-null, the intermediates of docs/DESIGN.md are copied
    // into it as they are produced (uncaptured, one stream at a time).
    ForwardResult forward(const Utterance& utterance, Trace* trace);
    // Many utterances on up to batch_lanes() lanes, one host thread per lane;
    // each result equals forward() of the same utterance.
    std::vector<ForwardResult> forward_batch(const std::vector<Utterance>& utterances);
    // Utterances on lane `lane_index` (0 .. batch_lanes() - 1) alone, in
    // groups as forward_batch() runs them; calls on different lanes run
    // concurrently (a scheduler's thread per lane), calls on one lane and
    // forward() / forward_batch() on the same lane one at a time. Each
    // result equals forward() of the same utterance and goes to `sink` as
    // soon as it lands (a group's first results before its last is done).
    void forward_on_lane(int lane_index, const std::vector<Utterance>& utterances,
                         const ResultSink& sink);

    // A batch's lanes: one per kBytesPerLane of the GPU's memory, from
    // kMinLanes to kMaxLanes. Each lane keeps a workspace sized by the
    // longest utterance it has run (~0.9 GB at 30 s of audio in precision
    // fast), so GPUs of less than 40 GiB keep four; on an H200 eight run a
    // batch of medium utterances 1.6% faster than four (docs/PERFORMANCE.md).
    static constexpr int kMinLanes = 4, kMaxLanes = 8;
    static constexpr size_t kBytesPerLane = size_t(8) << 30;
    int batch_lanes() const { return batch_lanes_; }

    // Phase timing, for the benchmark: while on, forward() records timing
    // events at the model's phase boundaries (into its graphs too, which are
    // captured again on a switch); phase_times() gives each mark's ms since
    // the start of the last forward(), in time order. forward_batch() never times.
    void set_phase_timing(bool on);
    std::vector<std::pair<std::string, float>> phase_times();

    int device() const { return device_; }
    Precision precision() const { return precision_; }
    size_t weight_bytes() const { return weights_->bytes(); }
    size_t workspace_bytes() const;
    PhaseRuns phase_runs() const;

private:
    void check_inputs(const Utterance& u) const;
    Lane& lane(size_t index);  // created on first use
    // Whether a batch's token phases run stacked (precision fast's split
    // linears keep each utterance's bits; fp32's cuBLAS GEMMs pick their
    // kernel by shape, so its groups are of one).
    bool groups_stack() const;
    // `count` utterances from `first` on lane `index` (whose mutex the caller
    // holds), in groups of at most kMaxGroupUtterances and kMaxGroupRows,
    // each result to `sink` by its index from `first`.
    void run_on_lane(size_t index, const Utterance* first, size_t count, const ResultSink& sink);

    ModelConfig cfg_;
    int device_;
    Precision precision_;
    int batch_lanes_ = kMinLanes;
    std::mutex forward_mutex_;  // forward() and forward_batch(): one call at a time
    mutable std::mutex lanes_mutex_;  // the creation of lanes (and reads of lanes_ beside it)
    std::array<std::mutex, kMaxLanes> lane_mutexes_;  // a lane runs one call at a time
    std::atomic<int> busy_lanes_{0};  // lanes running work now (whether the GPU is shared)
    std::unique_ptr<DeviceWeights> weights_;
    std::unique_ptr<const Model> model_;  // the layers, built once from weights_
    std::shared_ptr<PinnedPool> audio_pool_ = std::make_shared<PinnedPool>();
    std::array<std::unique_ptr<Lane>, kMaxLanes> lanes_;  // destroyed first: they drain their streams
};

}  // namespace kokoro
