// Whether this host thread's work shares the GPU with other lanes' (a batch
// on several lanes; default no). Such work is planned for throughput rather
// than for its own latency, with the same arithmetic (the same bits): its
// kernels launch without programmatic dependencies (launch.cuh), the
// tensor-core convs run a reduction that their plan splits over blocks
// inside each block instead (conv_tensor_core.cu), and the AdaINs combine their
// statistics partials a warp per channel, not a block (norm.cu). Host code
// only.
#pragma once

namespace kokoro {

inline bool& gpu_shared() {
    thread_local bool shared = false;
    return shared;
}

// Sets this thread's choice for its lifetime, then restores the previous one.
class SharedGpu {
public:
    explicit SharedGpu(bool shared) : previous_(gpu_shared()) { gpu_shared() = shared; }
    ~SharedGpu() { gpu_shared() = previous_; }
    SharedGpu(const SharedGpu&) = delete;
    SharedGpu& operator=(const SharedGpu&) = delete;

private:
    bool previous_;
};

}  // namespace kokoro
