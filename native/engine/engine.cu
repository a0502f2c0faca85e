// The engine: the weights and up to kMaxLanes lanes (lane.h; a batch takes
// one per 8 GiB of the GPU's memory, four at least); forward() uses lane 0,
// forward_batch() one host thread per lane, pulling groups of utterances in
// turn (precision fast: a group's token phase runs once on all of its
// tokens, its LSTMs' recurrences side by side; one read-back of their
// durations; the group's frame prefix, each utterance's alignment and the
// shared LSTM on all of their frames stacked; then each utterance's frame
// graph, its outputs moved into the slots that the graph reads).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "kokoro/check.h"
#include "kokoro/engine.h"
#include "kokoro/lane.h"
#include "kokoro/shared_gpu.h"

namespace kokoro {

namespace {

// A batch's token groups (Engine::forward_batch): at most this many
// utterances and tokens each.
constexpr size_t kMaxGroupUtterances = 16;
constexpr size_t kMaxGroupRows = 2048;

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
    lane(0);
}

Engine::~Engine() = default;  // the lanes drain their streams

Lane& Engine::lane(size_t index) {
    while (lanes_.size() <= index) {
        lanes_.push_back(std::make_unique<Lane>(cfg_, *weights_, precision_, audio_pool_));
    }
    return *lanes_[index];
}

void Engine::set_phase_timing(bool on) {
    const std::lock_guard<std::mutex> lock(forward_mutex_);
    KOKORO_CUDA_CHECK(cudaSetDevice(device_));
    lane(0).set_phase_timing(on);
}

std::vector<std::pair<std::string, float>> Engine::phase_times() {
    const std::lock_guard<std::mutex> lock(forward_mutex_);
    KOKORO_CUDA_CHECK(cudaSetDevice(device_));
    return lane(0).marks().since("start");
}

size_t Engine::workspace_bytes() const {
    size_t total = 0;
    for (const auto& l : lanes_) total += l->workspace_bytes();
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
    KOKORO_CUDA_CHECK(cudaSetDevice(device_));
    return lane(0).run(utterance, trace);
}

std::vector<ForwardResult> Engine::forward_batch(const std::vector<Utterance>& utterances) {
    for (const Utterance& u : utterances) check_inputs(u);
    if (utterances.empty()) return {};
    const std::lock_guard<std::mutex> lock(forward_mutex_);
    KOKORO_CUDA_CHECK(cudaSetDevice(device_));
    const size_t n_lanes = std::min<size_t>(size_t(batch_lanes_), utterances.size());
    for (size_t i = 0; i < n_lanes; ++i) lane(i);
    // Groups of consecutive utterances, each taken by one lane: their token
    // phase runs once on all of their tokens (Lane::run_group): ALBERT's and
    // bert_encoder's GEMMs of full waves where one utterance's rows gave
    // latency-bound split ones (batch of 64 medium utterances: +2.5% on an
    // H200), the LSTMs' recurrences side by side, and a graph per group's
    // lengths (+1.7%). Only where the linears are split linears (precision
    // fast), which keep each utterance's bits (UtteranceRows); fp32's cuBLAS GEMMs
    // pick their kernel by shape. One group per lane, each of at most
    // kMaxGroupUtterances utterances and kMaxGroupRows tokens (the group's
    // ALBERT buffers; larger batches take more groups): every group's token
    // phase then runs at the batch's start, its ALBERT GEMMs beside each
    // other rather than beside other lanes' convs, whose blocks they leave
    // one block per SM (docs/PERFORMANCE.md: 64 medium utterances +0.7%
    // against two groups per lane, three H200s).
    std::vector<size_t> group_starts;
    const bool grouped =
        weights_->plan("bert_encoder.weight").kernel == Kernel::kSplitLinear;
    const size_t per_group =
        grouped ? std::clamp<size_t>((utterances.size() + n_lanes - 1) / n_lanes, 1,
                                     kMaxGroupUtterances)
                : 1;
    for (size_t i = 0, rows = 0; i < utterances.size(); ++i) {
        const bool full = group_starts.empty() || i - group_starts.back() == per_group ||
                          rows + utterances[i].T > kMaxGroupRows;
        if (full) {
            group_starts.push_back(i);
            rows = 0;
        }
        rows += size_t(utterances[i].T);
    }
    group_starts.push_back(utterances.size());
    const size_t n_groups = group_starts.size() - 1;
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
            KOKORO_CUDA_CHECK(cudaSetDevice(device_));
            for (size_t g = next++; g < n_groups; g = next++) {
                const size_t begin = group_starts[g];
                lanes_[l]->run_group(&utterances[begin], group_starts[g + 1] - begin,
                                     &results[begin]);
            }
        } catch (...) {
            errors[l] = std::current_exception();
            next = n_groups;  // the other lanes stop after their current group
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
