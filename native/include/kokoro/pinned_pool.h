#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace kokoro {

// Page-locked host blocks for the results' audio, kept for reuse: the GPU
// copies the audio straight into a block that the result then owns (where a
// pageable destination took a second copy on the host, ~60 us per MB with
// its first-touch page faults), and the block comes back when the result's
// last holder (the NumPy array) lets go. Bounded, since user arrays would
// otherwise pin host memory for as long as they live: blocks in use up to
// kLiveBytes (beyond it a result gets ordinary memory, filled through its
// lane's page-locked staging block: a second copy, on the host), free ones
// kept up to kKeepBytes (the largest go first). Freeing page-locked memory
// waits for the whole device, so blocks past the bound go to the pool's own
// thread to be freed: the thread that drops an array (a server's event
// loop, a lane) never waits for the GPU. Thread-safe.
class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
public:
    static constexpr int64_t kLiveBytes = int64_t(256) << 20;
    static constexpr int64_t kKeepBytes = int64_t(256) << 20;
    // Returns its block to the pool that made it (pool null: ordinary
    // memory, deleted).
    struct Return {
        std::shared_ptr<PinnedPool> pool;
        int64_t capacity = 0;  // floats
        void operator()(float* block) const noexcept;
    };
    using Block = std::unique_ptr<float[], Return>;

    ~PinnedPool();
    // A block of at least `floats` floats: the smallest free one that fits,
    // else a new one; ordinary memory where the blocks in use would pass
    // kLiveBytes.
    Block take(int64_t floats);

private:
    void give_back(float* block, int64_t capacity) noexcept;
    // The releasing thread: frees retired_ blocks until the pool closes.
    void release_retired();
    std::mutex mutex_;
    std::vector<std::pair<int64_t, float*>> free_;  // (capacity, block)
    int64_t free_bytes_ = 0, live_bytes_ = 0;
    std::vector<float*> retired_;  // past kKeepBytes, for the releasing thread
    std::condition_variable retired_ready_;
    bool closing_ = false;
    std::thread releaser_;  // started with the first retired block
};

}  // namespace kokoro
