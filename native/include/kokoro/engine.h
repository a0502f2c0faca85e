// The native engine: one object per loaded model on one GPU. Construction
// uploads the folded weights once; forward() runs the whole model for one
// utterance on the engine's stream, reading back only the durations (to
// size the frame axis) and the audio. Errors: kokoro::CudaError (CUDA,
// cuBLAS, cuFFT failures), WeightsError (missing or misshapen tensors),
// InvalidInput (bad ids, style or speed).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kokoro/model.h"

namespace kokoro {

class InvalidInput : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

struct ForwardResult {
    std::vector<float> audio;        // [samples]
    std::vector<int64_t> durations;  // [T] frames per token
};

class Engine {
public:
    Engine(const ModelConfig& config, const HostWeights& weights, int device);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // ids [T] (boundary zeros included), ref_s [2 * style_dim], speed > 0.
    // Calls from several threads are serialised.
    // With `trace` non-null, the intermediates of docs/DESIGN.md are copied
    // into it as they are produced.
    ForwardResult forward(const int64_t* ids, int T, const float* ref_s, int ref_len, float speed,
                          bool deterministic, uint64_t seed, Trace* trace);

    int device() const { return device_; }
    size_t weight_bytes() const { return weights_->bytes(); }
    size_t workspace_bytes() const { return workspace_->bytes(); }

private:
    struct StreamDeleter {
        void operator()(cudaStream_t stream) const noexcept;
    };
    struct BlasDeleter {
        void operator()(cublasHandle_t handle) const noexcept;
    };

    void check_inputs(const int64_t* ids, int T, int ref_len, float speed) const;

    ModelConfig cfg_;
    int device_;
    std::mutex forward_mutex_;  // one forward pass at a time (the GIL is released)
    // Declared in teardown order: later members go first.
    std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter> stream_;
    std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, BlasDeleter> blas_;
    std::unique_ptr<DeviceWeights> weights_;
    std::unique_ptr<Workspace> workspace_;
    std::unique_ptr<ops::Stft> stft_;
};

}  // namespace kokoro
