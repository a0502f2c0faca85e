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
    for (const auto& [capacity, block] : free_) static_cast<void>(cudaFreeHost(block));
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
    std::vector<float*> freed;
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        live_bytes_ -= capacity * int64_t(sizeof(float));
        free_.emplace_back(capacity, block);
        free_bytes_ += capacity * int64_t(sizeof(float));
        std::sort(free_.begin(), free_.end());
        while (free_bytes_ > kKeepBytes) {
            free_bytes_ -= free_.back().first * int64_t(sizeof(float));
            freed.push_back(free_.back().second);
            free_.pop_back();
        }
    }
    for (float* p : freed) static_cast<void>(cudaFreeHost(p));
}

}  // namespace kokoro
