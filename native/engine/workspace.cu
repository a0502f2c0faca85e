// The workspace's buffers and the phase marks' events.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kokoro/check.h"
#include "kokoro/ops.h"
#include "kokoro/workspace.h"

namespace kokoro {

// ------------------------------------------------------------------ Workspace

Workspace::~Workspace() {
    release_retired();
    for (auto& [slot, buffer] : buffers_) static_cast<void>(cudaFree(buffer.ptr));
}

const char* slot_name(Slot slot) {
    switch (slot) {
#define KOKORO_SLOT_CASE(id, name) \
    case Slot::id:                 \
        return name;
        KOKORO_WORKSPACE_SLOTS(KOKORO_SLOT_CASE)
#undef KOKORO_SLOT_CASE
        case Slot::kNone:
            break;
    }
    return "(none)";
}

void* Workspace::get(const SlotKey& key, size_t bytes) {
    if (key.slot == Slot::kNone) throw std::logic_error("workspace: a buffer of no slot");
    Buffer& buffer = buffers_[key];
    if (buffer.bytes < bytes) {
        if (buffer.ptr != nullptr) {
            // Work already enqueued (or captured) may still read the old buffer.
            retired_.push_back(buffer.ptr);
            buffer = Buffer{};
            ++generation_;
        }
        // 1/8 headroom so that slowly growing inputs do not reallocate each time.
        const size_t want = ops::round_up(bytes + bytes / 8, 256);
        const std::string what = std::string("the workspace buffer ") + slot_name(key.slot) + "." +
                                 std::to_string(key.index) + "." + std::to_string(key.stream);
        buffer.ptr = device_alloc(want, what.c_str());
        buffer.bytes = want;
    }
    return buffer.ptr;
}

void Workspace::release_retired() {
    for (void* ptr : retired_) static_cast<void>(cudaFree(ptr));  // nothing uses them any more
    retired_.clear();
}

size_t Workspace::bytes() const {
    size_t total = 0;
    for (const auto& [slot, buffer] : buffers_) total += buffer.bytes;
    return total;
}

// ----------------------------------------------------------------- PhaseMarks

PhaseMarks::~PhaseMarks() {
    for (auto& [name, event] : events_) static_cast<void>(cudaEventDestroy(event));
}

void PhaseMarks::record(const std::string& name, cudaStream_t stream) {
    cudaEvent_t& event = events_[name];
    if (event == nullptr) KOKORO_CUDA_CHECK(cudaEventCreate(&event));
    // Under capture an external record node (a plain record would become an
    // internal dependency edge); outside capture the flag is refused.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    KOKORO_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    KOKORO_CUDA_CHECK(cudaEventRecordWithFlags(
        event, stream,
        capture == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : cudaEventRecordDefault));
}

std::vector<std::pair<std::string, float>> PhaseMarks::since(const std::string& start) const {
    std::vector<std::pair<std::string, float>> out;
    auto origin = events_.find(start);
    if (origin == events_.end()) return out;
    for (const auto& [name, event] : events_) {
        float ms = 0.f;
        KOKORO_CUDA_CHECK(cudaEventElapsedTime(&ms, origin->second, event));
        out.emplace_back(name, ms);
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    return out;
}

}  // namespace kokoro
