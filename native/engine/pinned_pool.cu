// The audio's page-locked blocks (PinnedPool, pinned_pool.h).
#include <algorithm>
#include <mutex>

#include "kokoro/check.h"
#include "kokoro/pinned_pool.h"

namespace kokoro {

// ----------------------------------------------------------------- PinnedPool

void PinnedPool::Return::operator()(float* block) const noexcept {
    if (pool == nullptr) {
        delete[] block;
        return;
    }
    pool->give_back(block, capacity);
}

PinnedPool::~PinnedPool() {
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        closing_ = true;
    }
    retired_ready_.notify_one();
    if (releaser_.joinable()) releaser_.join();
    for (float* block : retired_) static_cast<void>(cudaFreeHost(block));
    for (const auto& [capacity, block] : free_) static_cast<void>(cudaFreeHost(block));
}

void PinnedPool::release_retired() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
        retired_ready_.wait(lock, [this] { return closing_ || !retired_.empty(); });
        if (retired_.empty()) return;  // closing; the destructor frees what is left
        std::vector<float*> blocks;
        blocks.swap(retired_);
        lock.unlock();
        for (float* block : blocks) static_cast<void>(cudaFreeHost(block));
        lock.lock();
    }
}

PinnedPool::Block PinnedPool::take(int64_t floats) {
    const int64_t capacity = std::max<int64_t>(floats, 1);
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        auto best = free_.end();
        for (auto it = free_.begin(); it != free_.end(); ++it) {
            if (it->first >= floats && (best == free_.end() || it->first < best->first)) best = it;
        }
        if (best != free_.end()) {
            const auto [size, block] = *best;
            free_.erase(best);
            free_bytes_ -= size * int64_t(sizeof(float));
            live_bytes_ += size * int64_t(sizeof(float));
            return Block(block, Return{shared_from_this(), size});
        }
        if (live_bytes_ + capacity * int64_t(sizeof(float)) > kLiveBytes) {
            return Block(new float[size_t(capacity)], Return{nullptr, capacity});
        }
        live_bytes_ += capacity * int64_t(sizeof(float));
    }
    try {
        float* block = static_cast<float*>(pinned_alloc(sizeof(float) * capacity, "the audio"));
        return Block(block, Return{shared_from_this(), capacity});
    } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex_);
        live_bytes_ -= capacity * int64_t(sizeof(float));
        throw;
    }
}

void PinnedPool::give_back(float* block, int64_t capacity) noexcept {
    std::vector<float*> unreleased;  // (no releasing thread could be started)
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        live_bytes_ -= capacity * int64_t(sizeof(float));
        free_.emplace_back(capacity, block);
        free_bytes_ += capacity * int64_t(sizeof(float));
        std::sort(free_.begin(), free_.end());
        if (free_bytes_ <= kKeepBytes) return;
        while (free_bytes_ > kKeepBytes) {
            free_bytes_ -= free_.back().first * int64_t(sizeof(float));
            retired_.push_back(free_.back().second);
            free_.pop_back();
        }
        if (!releaser_.joinable()) {
            try {
                releaser_ = std::thread(&PinnedPool::release_retired, this);
            } catch (...) {
                unreleased.swap(retired_);
            }
        }
    }
    retired_ready_.notify_one();
    for (float* p : unreleased) static_cast<void>(cudaFreeHost(p));
}

}  // namespace kokoro
