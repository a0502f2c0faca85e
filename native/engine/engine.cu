// The engine: the weights and up to kMaxLanes lanes (lane.h; a batch takes
// one per 8 GiB of the GPU's memory, four at least); forward() uses lane 0,
// forward_batch() one host thread per lane, pulling groups of utterances in
// turn, forward_on_lane() one lane for its caller's thread (a scheduler's
// thread per lane), handing each result on as it lands. Precision fast: a
// group's token phase runs once on all of its tokens, its LSTMs'
// recurrences side by side; one read-back of their durations; the group's
// frame prefix, each utterance's alignment and the shared LSTM on all of
// their frames stacked; then each utterance's frame graph, its outputs
// moved into the slots that the graph reads.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "kokoro/check.h"
#include "kokoro/engine.h"
#include "kokoro/lane.h"
#include "kokoro/shared_gpu.h"

namespace kokoro {

namespace {

// A batch's token groups (Engine::forward_batch, run_on_lane): at most this
// many utterances and tokens each.
constexpr size_t kMaxGroupUtterances = 16;
constexpr size_t kMaxGroupRows = 2048;

// Whether a group of `size` utterances and `rows` tokens takes one more of
// `tokens` tokens (an empty group takes any).
bool group_takes(size_t size, size_t rows, size_t tokens) {
    return size == 0 || (size < kMaxGroupUtterances && rows + tokens <= kMaxGroupRows);
}

// Never launched: asking for its attributes tells whether this build holds
// code the current GPU can run (SASS for it, or PTX it can JIT).
__global__ void architecture_probe_kernel() {}

void check_architecture(int device) {
    cudaFuncAttributes attributes{};
    const cudaError_t status = cudaFuncGetAttributes(&attributes, architecture_probe_kernel);
    if (status == cudaErrorInvalidDeviceFunction || status == cudaErrorNoKernelImageForDevice) {
        static_cast<void>(cudaGetLastError());  // reported below
        cudaDeviceProp prop{};
        KOKORO_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
        throw CudaError(
            "the native engine was built for CUDA architectures " KOKORO_CUDA_ARCHITECTURES
            " and holds no code for " +
            std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
            std::to_string(prop.minor) +
            "); rebuild with -Ccmake.define.CMAKE_CUDA_ARCHITECTURES including it");
    }
    KOKORO_CUDA_CHECK(status);
}

}  // namespace

// --------------------------------------------------------------------- Engine

Engine::Engine(const ModelConfig& config, const HostWeights& weights, int device,
               Precision precision)
    : cfg_(config), device_(device), precision_(precision) {
    KOKORO_CUDA_CHECK(cudaSetDevice(device_));
    check_architecture(device_);
    cudaDeviceProp prop{};
    KOKORO_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    batch_lanes_ =
        int(std::clamp<size_t>(prop.totalGlobalMem / kBytesPerLane, kMinLanes, kMaxLanes));
    weights_ = std::make_unique<DeviceWeights>(weights, cfg_.style_dim, precision_,
                                               generator_strided_convs(cfg_));
    model_ = std::make_unique<const Model>(cfg_, *weights_);
    lane(0);
}

Engine::~Engine() = default;  // the lanes drain their streams

Lane& Engine::lane(size_t index) {
    const std::lock_guard<std::mutex> lock(lanes_mutex_);
    if (!lanes_[index]) {
        lanes_[index] = std::make_unique<Lane>(cfg_, *weights_, *model_, precision_, audio_pool_);
    }
    return *lanes_[index];
}

bool Engine::groups_stack() const {
    return weights_->plan("bert_encoder.weight").kernel == Kernel::kSplitLinear;
}

void Engine::run_on_lane(size_t index, const Utterance* first, size_t count,
                         const ResultSink& sink) {
    Lane& l = lane(index);
    if (!groups_stack()) {
        for (size_t i = 0; i < count; ++i) sink(i, l.run(first[i], nullptr));
        return;
    }
    for (size_t begin = 0; begin < count;) {
        size_t end = begin, rows = 0;
        while (end < count && group_takes(end - begin, rows, size_t(first[end].T))) {
            rows += size_t(first[end].T);
            ++end;
        }
        l.run_group(first + begin, end - begin,
                    [&](size_t i, ForwardResult r) { sink(begin + i, std::move(r)); });
        begin = end;
    }
}

void Engine::set_phase_timing(bool on) {
    const std::lock_guard<std::mutex> lock(forward_mutex_);
    const std::lock_guard<std::mutex> lane_lock(lane_mutexes_[0]);
    KOKORO_CUDA_CHECK(cudaSetDevice(device_));
    lane(0).set_phase_timing(on);
}

std::vector<std::pair<std::string, float>> Engine::phase_times() {
    const std::lock_guard<std::mutex> lock(forward_mutex_);
    const std::lock_guard<std::mutex> lane_lock(lane_mutexes_[0]);
    KOKORO_CUDA_CHECK(cudaSetDevice(device_));
    return lane(0).marks().since("start");
}

size_t Engine::workspace_bytes() const {
    size_t total = 0;
    for (const auto& l : lanes_) {
        if (l) total += l->workspace_bytes();
    }
    return total;
}

PhaseRuns Engine::phase_runs() const {
    const std::lock_guard<std::mutex> lock(lanes_mutex_);
    PhaseRuns total;
    for (const auto& l : lanes_) {
        if (!l) continue;
        const PhaseRuns r = l->phase_runs();
        total.eager += r.eager;
        total.captured += r.captured;
        total.replayed += r.replayed;
    }
    return total;
}

void Engine::check_inputs(const Utterance& u) const {
    if (u.T < 1 || u.T > cfg_.bert_positions) {
        throw InvalidInput("need 1.." + std::to_string(cfg_.bert_positions) + " token ids, got " +
                           std::to_string(u.T));
    }
    for (int t = 0; t < u.T; ++t) {
        if (u.ids[t] < 0 || u.ids[t] >= cfg_.n_token) {
            throw InvalidInput("token ids must lie in [0, " + std::to_string(cfg_.n_token) + ")");
        }
    }
    if (u.ref_len != 2 * cfg_.style_dim) {
        throw InvalidInput("ref_s must hold " + std::to_string(2 * cfg_.style_dim) +
                           " values, got " + std::to_string(u.ref_len));
    }
    if (!(std::isfinite(u.speed) && u.speed > 0.f)) {
        throw InvalidInput("speed must be a positive number, got " + std::to_string(u.speed));
    }
}

ForwardResult Engine::forward(const Utterance& utterance, Trace* trace) {
    check_inputs(utterance);
    const std::lock_guard<std::mutex> lock(forward_mutex_);
    const std::lock_guard<std::mutex> lane_lock(lane_mutexes_[0]);
    KOKORO_CUDA_CHECK(cudaSetDevice(device_));
    return lane(0).run(utterance, trace);
}

void Engine::forward_on_lane(int lane_index, const std::vector<Utterance>& utterances,
                             const ResultSink& sink) {
    if (lane_index < 0 || lane_index >= batch_lanes_) {
        throw InvalidInput("lane " + std::to_string(lane_index) + " is not one of the engine's " +
                           std::to_string(batch_lanes_) + " lanes");
    }
    for (const Utterance& u : utterances) check_inputs(u);
    if (utterances.empty()) return;
    const std::lock_guard<std::mutex> lock(lane_mutexes_[size_t(lane_index)]);
    KOKORO_CUDA_CHECK(cudaSetDevice(device_));
    // Planned for throughput (SharedGpu) while another lane runs: the same
    // bits either way, and a lone chunk keeps its latency.
    struct Busy {
        std::atomic<int>& count;
        int others;
        explicit Busy(std::atomic<int>& c) : count(c), others(c++) {}
        ~Busy() { --count; }
    } busy(busy_lanes_);
    const SharedGpu shared(busy.others > 0);
    run_on_lane(size_t(lane_index), utterances.data(), utterances.size(), sink);
}

std::vector<ForwardResult> Engine::forward_batch(const std::vector<Utterance>& utterances) {
    for (const Utterance& u : utterances) check_inputs(u);
    if (utterances.empty()) return {};
    const std::lock_guard<std::mutex> lock(forward_mutex_);
    KOKORO_CUDA_CHECK(cudaSetDevice(device_));
    const size_t n_lanes = std::min<size_t>(size_t(batch_lanes_), utterances.size());
    for (size_t i = 0; i < n_lanes; ++i) lane(i);
    // Groups, each taken by one lane: where the token phase stacks
    // (groups_stack), one group per lane when they fit, their token phase run
    // once on all of their tokens: ALBERT's and bert_encoder's GEMMs of full
    // waves where one utterance's rows gave latency-bound split ones (batch
    // of 64 medium utterances: +2.5% on an H200), the LSTMs' recurrences side
    // by side, and a graph per group's lengths (+1.7%); every group's token
    // phase then runs at the batch's start, its ALBERT GEMMs beside each
    // other rather than beside other lanes' convs, whose blocks they leave one
    // block per SM (+0.7% against two groups per lane). Mixed lengths are
    // dealt longest first to the group with the fewest tokens so far, so that
    // the lanes finish together (the tokens stand for the work: the frames
    // follow them). Without stacking, groups of one, longest first.
    std::vector<size_t> order(utterances.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return utterances[a].T > utterances[b].T;
    });
    std::vector<std::vector<size_t>> groups;
    if (groups_stack()) {
        size_t total_rows = 0;
        for (const Utterance& u : utterances) total_rows += size_t(u.T);
        const size_t n_groups = std::max({n_lanes,
                                          (utterances.size() + kMaxGroupUtterances - 1) /
                                              kMaxGroupUtterances,
                                          (total_rows + kMaxGroupRows - 1) / kMaxGroupRows});
        groups.resize(n_groups);
        std::vector<size_t> rows(n_groups, 0);
        for (const size_t i : order) {
            const size_t T = size_t(utterances[i].T);
            size_t best = groups.size();
            for (size_t g = 0; g < groups.size(); ++g) {
                if (group_takes(groups[g].size(), rows[g], T) &&
                    (best == groups.size() || rows[g] < rows[best])) {
                    best = g;
                }
            }
            if (best == groups.size()) {
                groups.emplace_back();
                rows.push_back(0);
            }
            groups[best].push_back(i);
            rows[best] += T;
        }
        groups.erase(std::remove_if(groups.begin(), groups.end(),
                                    [](const std::vector<size_t>& g) { return g.empty(); }),
                     groups.end());
    } else {
        for (const size_t i : order) groups.push_back({i});
    }
    std::vector<ForwardResult> results(utterances.size());
    std::vector<std::exception_ptr> errors(n_lanes);
    std::atomic<size_t> next{0};
    auto work = [&](size_t l) {
        // Lanes side by side keep the GPU's SMs busy: kernels set up early
        // (programmatic dependent launches) would only hold SMs from the other
        // lanes (batch +1.2% without them), and so would the convs' split
        // reductions (launch.cuh; the same arithmetic, the same bits).
        const SharedGpu shared(n_lanes > 1);
        try {
            const std::lock_guard<std::mutex> lane_lock(lane_mutexes_[l]);
            KOKORO_CUDA_CHECK(cudaSetDevice(device_));
            for (size_t g = next++; g < groups.size(); g = next++) {
                std::vector<Utterance> members;
                for (const size_t i : groups[g]) members.push_back(utterances[i]);
                lanes_[l]->run_group(members.data(), members.size(), [&](size_t k, ForwardResult r) {
                    results[groups[g][k]] = std::move(r);
                });
            }
        } catch (...) {
            errors[l] = std::current_exception();
            next = groups.size();  // the other lanes stop after their current group
        }
    };
    std::vector<std::thread> threads;
    for (size_t l = 1; l < n_lanes; ++l) threads.emplace_back(work, l);
    work(0);
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors) {
        if (e) std::rethrow_exception(e);
    }
    return results;
}

}  // namespace kokoro
