// Device scratch and phase timing of one lane:
// - Workspace: named device scratch buffers, allocated on first use and
//   reused across calls, grown only when a longer input needs more (the old
//   buffer is retired, freed once the owner's streams have drained, and the
//   workspace generation moves on: graphs captured before point at it);
// - PhaseMarks: timing events at the model's phase boundaries.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace kokoro {

class Workspace {
public:
    Workspace() = default;
    ~Workspace();  // the owner drains its streams first
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    // The buffer named `slot`, holding at least `count` elements. It stays
    // valid until the next request of the same slot with a larger count.
    float* floats(const std::string& slot, int64_t count) { return typed<float>(slot, count); }
    int32_t* ints(const std::string& slot, int64_t count) { return typed<int32_t>(slot, count); }
    double* doubles(const std::string& slot, int64_t count) { return typed<double>(slot, count); }
    uint64_t* words(const std::string& slot, int64_t count) { return typed<uint64_t>(slot, count); }
    __half* halves(const std::string& slot, int64_t count) { return typed<__half>(slot, count); }
    size_t bytes() const;
    // Moves on whenever a buffer is replaced by a larger one: work captured
    // at an older generation may point at retired memory.
    uint64_t generation() const { return generation_; }
    // Frees the retired buffers; only when no enqueued work can still use them.
    void release_retired();

private:
    void* get(const std::string& slot, size_t bytes);
    // At least one element, so that an empty request still gets a valid pointer.
    template <typename T>
    T* typed(const std::string& slot, int64_t count) {
        return static_cast<T*>(get(slot, sizeof(T) * static_cast<size_t>(count > 1 ? count : 1)));
    }
    struct Buffer {
        void* ptr = nullptr;
        size_t bytes = 0;
    };
    std::unordered_map<std::string, Buffer> buffers_;
    std::vector<void*> retired_;
    uint64_t generation_ = 0;
};

// Timing events at the boundaries of the model's phases, by name: the
// benchmark's wall-clock breakdown of a forward pass. Under stream capture
// record() adds an external event record node (cudaEventRecordExternal), so
// a replayed graph records its marks too; events are created on a name's
// first record.
class PhaseMarks {
public:
    PhaseMarks() = default;
    ~PhaseMarks();
    PhaseMarks(const PhaseMarks&) = delete;
    PhaseMarks& operator=(const PhaseMarks&) = delete;
    void record(const std::string& name, cudaStream_t stream);
    // (name, ms since the mark `start`) of every mark, in time order; the
    // streams that recorded them must have drained.
    std::vector<std::pair<std::string, float>> since(const std::string& start) const;

private:
    std::map<std::string, cudaEvent_t> events_;
};

}  // namespace kokoro
