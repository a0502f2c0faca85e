// The engine: weight upload, workspace, and the forward pass in the order of
// the official KModel.forward_with_tokens.
// - Upload: every folded tensor the model uses goes into ONE device arena
//   (256-byte aligned slices), copied once at construction; conv weights
//   (3-D) in the ops' layout, kernel axis in the middle. LSTM parameters
//   are stacked per direction with b_ih + b_hh folded (summed in double, as
//   the CPU backend does); the style projections fc of each style half are
//   concatenated so one GEMV per half computes every AdaIN style vector;
//   each attention's query, key and value linears are stacked into one,
//   "<attention>.qkv", so ALBERT projects all three in one GEMM.
//   The weights that the precision plan (precision_plan.h) gives to the
//   tensor-core convs go instead, as FP16 with the last axis padded to 8
//   (ops::conv_weight_to_half_rows, in the plan's operand form), into a
//   second arena, with the split linears' split FP16 copies.
// - Workspace: named buffers reused across calls; a buffer grows only when a
//   longer input needs more (the old one is freed after the lane drains).
// - Lane: four streams with their events and cuBLAS handles (main, side at
//   the lowest priority, the others at the highest; two for the
//   AdainResBlk1d shortcuts and the generator's concurrent residual
//   blocks), a workspace and the graph caches. A forward pass has two
//   phases around the one mid-pass read-back (the durations size the frame
//   axis):
//     tokens: style projections, ALBERT, then [text encoder on the side
//             stream] || bert_encoder, duration encoder, duration head -> logits;
//     (uncaptured: durations from the logits and the speed, read back)
//     frames: alignment, shared LSTM, F0 stack || N stack, then
//             [harmonic source + STFT, then each generator stage's source
//             branch, on the side stream] || decoder, the generator's
//             stages (each waits for its source branch); the audio is read back
//             (into a page-locked block of the engine's PinnedPool, which the
//             result keeps).
//   Each phase runs as a CUDA graph replay once its key has been seen
//   before (tokens: T, or a group's lengths; a group's frame prefix: its
//   lengths and frame counts; frames: T, F, deterministic, whether the
//   prefix made its alignment; all: whether the lane's thread shares the
//   GPU, as a batch on several lanes does: launch.cuh); the seed reaches the
//   source through device memory, so replays take a new one. A graph is
//   stale once the workspace generation has moved on (a buffer it uses was
//   replaced) and is then captured again. A trace runs everything uncaptured.
// - Engine: the weights and up to kMaxLanes lanes (a batch takes one per 8
//   GiB of the GPU's memory, four at least); forward() uses lane 0,
//   forward_batch() one host thread per lane, pulling groups of utterances
//   in turn (precision fast: a group's token phase runs once on all of its
//   tokens, its LSTMs' recurrences side by side; one read-back of their
//   durations; the group's frame prefix, each utterance's alignment and the
//   shared LSTM on all of their frames stacked; then each utterance's frame
//   graph, its outputs moved into the slots that the graph reads).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <deque>
#include <exception>
#include <list>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "kokoro/check.h"
#include "kokoro/engine.h"
#include "kokoro/launch.cuh"

namespace kokoro {

namespace {

constexpr size_t kArenaAlignFloats = 64;  // 256 bytes
constexpr size_t kNoOffset = ~size_t(0);   // a tensor without an fp32 copy
// A batch's token groups (Engine::forward_batch): at most this many
// utterances and tokens each.
constexpr size_t kMaxGroupUtterances = 16;
constexpr size_t kMaxGroupRows = 2048;
const char* const kLstmParams[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};

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

StyleHalf style_half_of(const std::string& name) {
    if (name.rfind("decoder.", 0) == 0) return StyleHalf::kDecoder;
    if (name.rfind("predictor.", 0) == 0) return StyleHalf::kProsody;
    throw WeightsError("style projection " + name + " is outside the decoder and the predictor");
}

// The duration head's sum of sigmoids / speed, for the trace only: the
// logits are copied out and reduced on the host.
Trace::Array durations_before_rounding(const float* logits, int T, int max_dur, float speed,
                                       cudaStream_t stream) {
    std::vector<float> host(size_t(T) * max_dur);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(host.data(), logits, sizeof(float) * host.size(),
                                      cudaMemcpyDeviceToHost, stream));
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream));
    Trace::Array out{{T}, std::vector<float>(T)};
    for (int t = 0; t < T; ++t) {
        float sum = 0.f;
        for (int j = 0; j < max_dur; ++j)
            sum += 1.f / (1.f + std::exp(-host[size_t(t) * max_dur + j]));
        out.values[t] = sum / speed;
    }
    return out;
}

// The one mid-pass read-back: each utterance of `tokens` (utterances[u],
// rows from tokens.offset(u)) its durations from its logits and speed,
// rounded on the device into dur (uncaptured: the frame graphs read them
// there), then all of them to the host, which they size the frame axes for.
std::vector<int32_t> read_back_durations(const float* logits, const UtteranceRows& tokens,
                                         const Utterance* utterances, int max_dur, int32_t* dur,
                                         cudaStream_t stream) {
    for (int u = 0; u < tokens.count(); ++u) {
        const int64_t row = tokens.offset(u);
        ops::durations_from_logits(logits + row * max_dur, tokens.length(u), max_dur,
                                   utterances[u].speed, dur + row, stream);
    }
    std::vector<int32_t> host(size_t(tokens.rows()));
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(host.data(), dur, sizeof(int32_t) * host.size(),
                                      cudaMemcpyDeviceToHost, stream));
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream));
    return host;
}

// The frames that an utterance's durations give (one call at most this many:
// the source's samples are indexed by int).
int frame_count(const std::vector<int32_t>& durations, const ModelConfig& cfg) {
    int64_t frames = 0;
    for (const int32_t f : durations) frames += f;
    const int64_t max_frames = INT_MAX / (2 * int64_t(cfg.source_upsampling()));
    if (frames > max_frames) {
        throw InvalidInput("the predicted durations add up to " + std::to_string(frames) +
                           " frames, more than the " + std::to_string(max_frames) +
                           " one call supports; raise the speed or split the input");
    }
    return int(frames);
}

// The one tensor of x, for the layers that read a plain pointer (convs
// without a tensor-core weight).
const float* single(const ops::ScaledSum& x, const std::string& layer) {
    if (!x.single() || x.half()) {
        throw std::logic_error(layer +
                               ": a sum of tensors or FP16 input needs its tensor-core weight");
    }
    return x.x0.f32;
}

}  // namespace

// ------------------------------------------------------------ config, tensors

int ModelConfig::source_upsampling() const {
    int upp = hop;
    for (int r : upsample_rates) upp *= r;
    return upp;
}

int64_t HostTensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

// ------------------------------------------------------------- DeviceWeights

DeviceWeights::DeviceWeights(const HostWeights& host, int style_dim, Precision precision,
                             const StridedConvs& strided) {
    // Lay out every device tensor as (offset, pieces copied from the host);
    // derived tensors (folded LSTM biases, relaid conv weights) are built in
    // `owned` first.
    struct Piece {
        size_t offset;
        const float* src;
        int64_t count;
    };
    std::vector<Piece> pieces;
    std::deque<std::vector<float>> owned;  // derived tensors; deque: stable addresses
    std::vector<__half> halves;            // the FP16 arena's host image
    std::unordered_map<std::string, size_t> half_offsets;
    size_t total = 0;
    auto place = [&](int64_t count) {
        const size_t offset = total;
        total += ops::round_up(static_cast<size_t>(count), kArenaAlignFloats);
        return offset;
    };
    auto plan_of = [&](const std::string& name, const std::vector<int64_t>& shape) {
        const WeightPlan p = plan_weight(name, shape, precision, strided.count(name) != 0);
        plans_[name] = p;
        return p;
    };
    // `count` FP16 values of tensor `name` in the FP16 arena's host image
    // (the pointer: until the next placement).
    auto place_half = [&](const std::string& name, int64_t count) {
        const size_t at = halves.size();
        half_offsets[name] = at;
        halves.resize(ops::round_up(at + size_t(count), kArenaAlignFloats * 2));
        return halves.data() + at;
    };
    auto place_split = [&](const std::string& name, const float* w, int64_t out, int64_t in) {
        const int64_t n = 2 * out * ops::split_pitch(int(in));
        __half* dst = place_half(name, n);
        split_entries_[name] = {nullptr, n,
                                ops::linear_weight_to_split_half(w, dst, int(out), int(in)),
                                ops::HalfOperands::kSplit};
    };
    auto find = [&](const std::string& name) -> const HostTensor& {
        auto it = host.find(name);
        if (it == host.end()) throw WeightsError("the weights lack tensor '" + name + "'");
        return it->second;
    };

    const std::regex lstm_name(R"((.+)\.(weight_ih|weight_hh|bias_ih|bias_hh)_l0(_reverse)?)");
    const std::regex qkv_name(R"((.+\.attention)\.(query|key|value)\.(weight|bias))");
    const std::regex style_fc_name(R"((.+\.fc)\.(weight|bias))");
    std::set<std::string> lstm_prefixes;
    std::set<std::string> attention_prefixes;
    std::set<std::string> style_prefixes[2];
    std::unordered_map<std::string, size_t> offsets;
    std::smatch m;
    for (const auto& [name, tensor] : host) {
        if (std::regex_match(name, m, lstm_name)) {
            lstm_prefixes.insert(m[1]);
        } else if (std::regex_match(name, m, qkv_name)) {
            attention_prefixes.insert(m[1]);
        } else if (std::regex_match(name, m, style_fc_name)) {
            style_prefixes[static_cast<int>(style_half_of(name))].insert(m[1]);
        } else {
            const WeightPlan plan = plan_of(name, tensor.shape);
            if (plan.kernel == Kernel::kUnused) continue;
            if (plan.kernel == Kernel::kSplitLinear) {
                if (tensor.shape.size() != 2) {
                    throw WeightsError("tensor '" + name + "' is not a linear weight [out, in]");
                }
                place_split(name, tensor.data, tensor.shape[0], tensor.shape[1]);
                continue;
            }
            const float* src = tensor.data;
            // A conv weight (3-D; its kernel axis moves to the middle, which
            // for K = 1 changes nothing).
            if (tensor.shape.size() == 3 && (tensor.shape[2] > 1 || tensor_core(plan.kernel))) {
                const int64_t A = tensor.shape[0];
                const int B = int(tensor.shape[1]), K = int(tensor.shape[2]);
                owned.emplace_back(static_cast<size_t>(tensor.numel()));
                ops::conv_weight_to_device_layout(tensor.data, owned.back().data(), A, B, K);
                src = owned.back().data();
                const ops::HalfOperands wform = half_operands(plan.operands);
                if (plan.kernel == Kernel::kTensorCoreStrided) {
                    const auto [stride, pad] = strided.at(name);
                    const int64_t n = ops::conv_weight_polyphase_halves(int(A), K, B, stride, pad);
                    const float scale = ops::conv_weight_to_polyphase_half_rows(
                        src, place_half(name, n), int(A), K, B, stride, pad);
                    half_entries_[name] = {nullptr, n, scale, wform};
                    continue;  // no fp32 copy
                }
                // Conv1d [c_out, c_in, K]; transposed [c_in, c_out, K].
                if (tensor_core(plan.kernel)) {
                    const bool transposed = plan.kernel == Kernel::kTensorCoreTransposed;
                    const int64_t n = transposed ? int64_t(K) * B * ops::half_rows_pitch(int(A))
                                                 : A * K * ops::half_rows_pitch(B);
                    __half* dst = place_half(name, n * ops::half_parts(wform));
                    const float scale =
                        transposed
                            ? ops::conv_transpose_weight_to_half_rows(src, dst, int(A), K, B, wform)
                            : ops::conv_weight_to_half_rows(src, dst, A, K, B, wform);
                    half_entries_[name] = {nullptr, n, scale, wform};
                    continue;  // no fp32 copy
                }
            }
            const size_t offset = place(tensor.numel());
            pieces.push_back({offset, src, tensor.numel()});
            offsets[name] = offset;
            entries_[name] = {nullptr, tensor.numel()};
        }
    }

    struct LstmOffsets {
        size_t w_ih, w_hh, b;
        int in, hidden;
    };
    std::unordered_map<std::string, LstmOffsets> lstm_offsets;
    for (const std::string& prefix : lstm_prefixes) {
        const HostTensor* t[2][4];
        for (int dir = 0; dir < 2; ++dir) {
            for (int k = 0; k < 4; ++k) {
                t[dir][k] = &find(prefix + "." + kLstmParams[k] + "_l0" + (dir ? "_reverse" : ""));
            }
        }
        const HostTensor& w_hh = *t[0][1];
        if (w_hh.shape.size() != 2 || t[0][0]->shape.size() != 2 ||
            w_hh.shape[0] != 4 * w_hh.shape[1]) {
            throw WeightsError("LSTM " + prefix + " has malformed weights");
        }
        const int hidden = static_cast<int>(w_hh.shape[1]);
        const int in = static_cast<int>(t[0][0]->shape[1]);
        const int64_t gates = 4 * int64_t(hidden);
        const int64_t expect[4] = {gates * in, gates * hidden, gates, gates};
        for (auto& dir : t) {
            for (int k = 0; k < 4; ++k) {
                if (dir[k]->numel() != expect[k])
                    throw WeightsError("LSTM " + prefix + " has mismatched shapes");
            }
        }
        const bool split_ih = plan_of(prefix + ".weight_ih", {2 * gates, in}).kernel ==
                              Kernel::kSplitLinear;
        LstmOffsets lo{split_ih ? kNoOffset : place(2 * expect[0]), place(2 * expect[1]),
                       place(2 * gates), in, hidden};
        if (split_ih) {
            std::vector<float> w_ih(2 * size_t(expect[0]));
            for (int dir = 0; dir < 2; ++dir) {
                std::copy_n(t[dir][0]->data, expect[0], w_ih.begin() + dir * expect[0]);
            }
            place_split(prefix + ".weight_ih", w_ih.data(), 2 * gates, in);
        }
        std::vector<float> bias(2 * gates);
        for (int dir = 0; dir < 2; ++dir) {
            if (!split_ih) {
                pieces.push_back({lo.w_ih + dir * expect[0], t[dir][0]->data, expect[0]});
            }
            pieces.push_back({lo.w_hh + dir * expect[1], t[dir][1]->data, expect[1]});
            for (int64_t g = 0; g < gates; ++g) {
                bias[dir * gates + g] =
                    static_cast<float>(double(t[dir][2]->data[g]) + double(t[dir][3]->data[g]));
            }
        }
        owned.push_back(std::move(bias));
        pieces.push_back({lo.b, owned.back().data(), 2 * gates});
        lstm_offsets[prefix] = lo;
    }

    // Linears stacked along the output axis as the new linear `name`: the
    // weight rows, then the bias entries, of each part in turn.
    auto stack_linears = [&](const std::string& name, const std::vector<std::string>& parts) {
        std::vector<const HostTensor*> w, b;
        int64_t rows = 0;
        for (const std::string& part : parts) {
            w.push_back(&find(part + ".weight"));
            b.push_back(&find(part + ".bias"));
            const std::vector<int64_t>& shape = w.back()->shape;
            if (shape.size() != 2 || shape[1] != w[0]->shape[1] || b.back()->numel() != shape[0])
                throw WeightsError("linear " + part + " does not stack into " + name);
            rows += shape[0];
        }
        const int64_t in = w[0]->shape[1];
        const bool split = plan_of(name + ".weight", {rows, in}).kernel == Kernel::kSplitLinear;
        const size_t w_offset = split ? 0 : place(rows * in), b_offset = place(rows);
        std::vector<float> stacked(split ? size_t(rows * in) : 0);
        int64_t row = 0;
        for (size_t i = 0; i < parts.size(); ++i) {
            if (split) {
                std::copy_n(w[i]->data, w[i]->numel(), stacked.begin() + row * in);
            } else {
                pieces.push_back({w_offset + size_t(row * in), w[i]->data, w[i]->numel()});
            }
            pieces.push_back({b_offset + size_t(row), b[i]->data, b[i]->numel()});
            row += b[i]->numel();
        }
        if (split) {
            place_split(name + ".weight", stacked.data(), rows, in);
        } else {
            offsets[name + ".weight"] = w_offset;
            entries_[name + ".weight"] = {nullptr, rows * in};
        }
        offsets[name + ".bias"] = b_offset;
        entries_[name + ".bias"] = {nullptr, rows};
    };
    for (const std::string& prefix : attention_prefixes) {
        stack_linears(prefix + ".qkv", {prefix + ".query", prefix + ".key", prefix + ".value"});
    }

    size_t bank_offsets[2][2] = {};  // [half][weight, bias]
    for (int half = 0; half < 2; ++half) {
        int rows = 0;
        for (const std::string& prefix : style_prefixes[half]) {
            const HostTensor& w = find(prefix + ".weight");
            const HostTensor& b = find(prefix + ".bias");
            if (w.numel() != b.numel() * style_dim) {
                throw WeightsError("style projection " + prefix + " is not [out, " +
                                   std::to_string(style_dim) + "]");
            }
            style_slots_[prefix] = {static_cast<StyleHalf>(half), rows,
                                    static_cast<int>(b.numel())};
            rows += static_cast<int>(b.numel());
        }
        banks_[half].rows = rows;
        bank_offsets[half][0] = place(int64_t(rows) * style_dim);
        bank_offsets[half][1] = place(rows);
        for (const std::string& prefix : style_prefixes[half]) {
            const StyleSlot& slot = style_slots_[prefix];
            pieces.push_back({bank_offsets[half][0] + size_t(slot.offset) * style_dim,
                              find(prefix + ".weight").data, int64_t(slot.size) * style_dim});
            pieces.push_back({bank_offsets[half][1] + size_t(slot.offset),
                              find(prefix + ".bias").data, slot.size});
        }
    }

    bytes_ = std::max<size_t>(total, 1) * sizeof(float);
    arena_.reset(static_cast<float*>(device_alloc(bytes_, "the model weights")));
    float* arena = arena_.get();
    for (const Piece& p : pieces) {
        KOKORO_CUDA_CHECK(
            cudaMemcpy(arena + p.offset, p.src, sizeof(float) * p.count, cudaMemcpyHostToDevice));
    }
    for (auto& [name, entry] : entries_) entry.ptr = arena + offsets[name];
    if (!halves.empty()) {
        const size_t half_bytes = halves.size() * sizeof(__half);
        half_arena_.reset(static_cast<__half*>(device_alloc(half_bytes, "the FP16 weights")));
        KOKORO_CUDA_CHECK(
            cudaMemcpy(half_arena_.get(), halves.data(), half_bytes, cudaMemcpyHostToDevice));
        bytes_ += half_bytes;
        for (auto* entries : {&half_entries_, &split_entries_}) {
            for (auto& [name, entry] : *entries) entry.ptr = half_arena_.get() + half_offsets[name];
        }
    }
    for (const auto& [prefix, lo] : lstm_offsets) {
        const float* w_ih = lo.w_ih == kNoOffset ? nullptr : arena + lo.w_ih;
        lstms_[prefix] = {w_ih, arena + lo.w_hh, arena + lo.b, lo.in, lo.hidden};
    }
    for (int half = 0; half < 2; ++half) {
        banks_[half].weight = arena + bank_offsets[half][0];
        banks_[half].bias = arena + bank_offsets[half][1];
    }
}

const float* DeviceWeights::get(const std::string& name, int64_t numel) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) {
        const Kernel kernel = plan(name).kernel;
        throw WeightsError(tensor_core(kernel) ? "tensor '" + name +
                                                     "' is kept as FP16 only (a tensor-core conv's)"
                           : kernel == Kernel::kSplitLinear
                               ? "tensor '" + name + "' is kept as split FP16 only"
                               : "the weights lack tensor '" + name + "'");
    }
    if (it->second.numel != numel) {
        throw WeightsError("tensor '" + name + "' holds " + std::to_string(it->second.numel) +
                           " values; the model needs " + std::to_string(numel));
    }
    return it->second.ptr;
}

DeviceWeights::HalfConv DeviceWeights::get_half(const std::string& name, int64_t numel) const {
    auto it = half_entries_.find(name);
    if (it == half_entries_.end()) {
        throw WeightsError("no FP16 copy of tensor '" + name + "' (not a tensor-core conv's)");
    }
    if (it->second.numel != numel) {
        throw WeightsError("the FP16 copy of '" + name + "' holds " +
                           std::to_string(it->second.numel) + " values; the model needs " +
                           std::to_string(numel));
    }
    return {it->second.ptr, it->second.scale, it->second.form};
}

DeviceWeights::SplitLinear DeviceWeights::get_split_linear(const std::string& name, int out,
                                                           int in) const {
    auto it = split_entries_.find(name);
    if (it == split_entries_.end()) {
        throw WeightsError("no split FP16 copy of tensor '" + name + "'");
    }
    if (it->second.numel != 2 * int64_t(out) * ops::split_pitch(in)) {
        throw WeightsError("the split FP16 copy of '" + name + "' does not match [" +
                           std::to_string(out) + ", " + std::to_string(in) + "]");
    }
    return {it->second.ptr, it->second.scale};
}

DeviceWeights::Lstm DeviceWeights::lstm(const std::string& prefix) const {
    auto it = lstms_.find(prefix);
    if (it == lstms_.end()) throw WeightsError("the weights lack LSTM '" + prefix + "'");
    return it->second;
}

const DeviceWeights::StyleSlot& DeviceWeights::style_slot(const std::string& fc_prefix) const {
    auto it = style_slots_.find(fc_prefix);
    if (it == style_slots_.end())
        throw WeightsError("the weights lack style projection '" + fc_prefix + "'");
    return it->second;
}

void DeviceFree::operator()(void* ptr) const noexcept {
    static_cast<void>(cudaFree(ptr));  // teardown: nothing to report to
}

// ------------------------------------------------------------------ Workspace

Workspace::~Workspace() {
    release_retired();
    for (auto& [slot, buffer] : buffers_) static_cast<void>(cudaFree(buffer.ptr));
}

void* Workspace::get(const std::string& slot, size_t bytes) {
    Buffer& buffer = buffers_[slot];
    if (buffer.bytes < bytes) {
        if (buffer.ptr != nullptr) {
            // Work already enqueued (or captured) may still read the old buffer.
            retired_.push_back(buffer.ptr);
            buffer = Buffer{};
            ++generation_;
        }
        // 1/8 headroom so that slowly growing inputs do not reallocate each time.
        const size_t want = ops::round_up(bytes + bytes / 8, 256);
        buffer.ptr = device_alloc(want, ("the workspace buffer " + slot).c_str());
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

// -------------------------------------------------------------------- Context

void Context::wait_for(const Context& other) const {
    KOKORO_CUDA_CHECK(cudaEventRecord(other.event, other.stream));
    KOKORO_CUDA_CHECK(cudaStreamWaitEvent(stream, other.event, 0));
}

const float* Context::style(const std::string& fc_prefix, int channels) const {
    const DeviceWeights::StyleSlot& slot = weights.style_slot(fc_prefix);
    if (slot.size != 2 * channels) {
        throw WeightsError("style projection '" + fc_prefix + "' has " + std::to_string(slot.size) +
                           " outputs; the model needs " + std::to_string(2 * channels));
    }
    return style_out[static_cast<int>(slot.half)] + slot.offset;
}

void Context::adain(const float* x, float* y, int C, int T, const std::string& fc_prefix,
                    ops::Activation act, float slope, const float* alpha) const {
    ops::adain(x, y, C, T, style(fc_prefix, C), act, slope, alpha, adain_partials(C, T), stream);
}

void Context::record(const char* key, const float* device, std::vector<int64_t> shape) const {
    if (trace == nullptr) return;
    Trace::Array& array = trace->floats[key];
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    array.shape = std::move(shape);
    array.values.resize(static_cast<size_t>(n));
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(array.values.data(), device, sizeof(float) * n,
                                      cudaMemcpyDeviceToHost, stream));
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream));
}

ops::ChannelPartials Context::conv1d(const std::string& prefix, ops::ScaledSum x, float* y,
                                     int c_in, int c_out, int t_in, int kernel, int stride,
                                     int pad, int dilation, int groups, bool bias,
                                     const float* residual, float leaky_slope,
                                     const char* y_stats_slot) const {
    const int64_t numel = int64_t(c_out) * (c_in / groups) * kernel;
    const float* b = bias ? weights.get(prefix + ".bias", c_out) : nullptr;
    const Kernel path = weights.plan(prefix + ".weight").kernel;
    if (path == Kernel::kTensorCoreStrided) {
        if (groups != 1 || dilation != 1) {
            throw std::logic_error(prefix + ": a strided tensor-core conv is dense, undilated");
        }
        const DeviceWeights::HalfConv w = weights.get_half(
            prefix + ".weight",
            ops::conv_weight_polyphase_halves(c_out, kernel, c_in, stride, pad));
        __half* rows = half_rows(c_in, ops::conv1d_strided_input_rows(t_in, stride), w.form);
        ops::to_half_rows(x, rows, c_in, t_in, w.form, stream, leaky_slope);
        float* scratch = op_scratch(ops::conv1d_strided_half_rows_scratch_floats(
            c_in, c_out, t_in, kernel, stride, pad, conv_streams));
        const ops::ChannelPartials y_stats =
            conv_stats(y_stats_slot, c_out,
                       ops::conv1d_strided_half_rows_stats_parts(c_in, c_out, t_in, kernel,
                                                                 stride, pad, conv_streams));
        ops::conv1d_strided_half_rows(rows, w.w, w.scale, b, y, c_in, c_out, t_in, kernel, stride,
                                      pad, residual, scratch, stream, y_stats.data, conv_streams);
        return y_stats;
    }
    if (groups == 1 && stride == 1 && tensor_core(path)) {
        const DeviceWeights::HalfConv w = weights.get_half(
            prefix + ".weight", int64_t(c_out) * kernel * ops::half_rows_pitch(c_in));
        __half* rows = half_rows(c_in, t_in, w.form);
        ops::to_half_rows(x, rows, c_in, t_in, w.form, stream, leaky_slope);
        return conv1d_half_rows(w, rows, y, c_in, c_out, t_in, kernel, pad, dilation, b, residual,
                                y_stats_slot);
    }
    const float* w = weights.get(prefix + ".weight", numel);
    const float* activated = leaky_relu_of(single(x, prefix), int64_t(c_in) * t_in, leaky_slope);
    float* scratch = op_scratch(
        ops::conv1d_scratch_floats(c_in, c_out, t_in, kernel, stride, pad, dilation, groups));
    const ops::ChannelPartials y_stats =
        conv_stats(y_stats_slot, c_out,
                   ops::conv1d_stats_parts(c_in, c_out, t_in, kernel, stride, pad, groups));
    ops::conv1d(blas, activated, w, b, y, c_in, c_out, t_in, kernel, stride, pad, dilation,
                groups, residual, scratch, stream, gemm_math(), y_stats.data);
    return y_stats;
}

ops::ChannelPartials Context::adain_conv1d(ops::ConstFloatOrHalf x, ops::FloatOrHalf y, int c_in,
                                           int c_out, int T,
                                           const std::string& fc_prefix, ops::Activation act,
                                           float slope, const float* alpha,
                                           const std::string& conv_prefix, int kernel,
                                           int dilation, ops::ConstFloatOrHalf residual,
                                           ops::ChannelPartials x_stats,
                                           const char* y_stats_slot, float out_scale) const {
    const int pad = dilation * (kernel - 1) / 2;
    const std::string weight = conv_prefix + ".weight";
    const bool hidden = y.f16 != nullptr && residual.f32 == nullptr && residual.f16 == nullptr;
    if (hidden && y_stats_slot == nullptr) {
        throw std::logic_error("adain_conv1d " + conv_prefix +
                               ": an FP16 hidden (no bias, no residual) needs a statistics slot");
    }
    if (!tensor_core(weights.plan(weight).kernel)) {
        if (out_scale != 1.f || x.f16 != nullptr || y.f16 != nullptr ||
            residual.f16 != nullptr) {
            throw std::logic_error("adain_conv1d " + conv_prefix +
                                   ": an output scale or FP16 tensors need its tensor-core weight");
        }
        float* activated = floats("ops.activated", int64_t(c_in) * T);
        adain(x.f32, activated, c_in, T, fc_prefix, act, slope, alpha);
        conv1d(conv_prefix, activated, y.f32, c_in, c_out, T, kernel, 1, pad, dilation, 1, true,
               residual.f32);
        return {};
    }
    const DeviceWeights::HalfConv w =
        weights.get_half(weight, int64_t(c_out) * kernel * ops::half_rows_pitch(c_in));
    const float* b = hidden ? nullptr : weights.get(conv_prefix + ".bias", c_out);
    const float* s = style(fc_prefix, c_in);
    double* scratch = adain_partials(c_in, T);
    if (x.f16 != nullptr && act == ops::Activation::kSnake &&
        ops::conv1d_takes_raw_input(c_in, c_out, T, kernel, pad, dilation, w.form,
                                    conv_streams)) {
        const ops::ChannelApply* apply =
            ops::adain_apply(x_stats, c_in, T, s, act, slope, alpha, w.form, scratch, stream);
        return conv1d_half_rows(w, ops::HalfInput(x.f16, apply), y, c_in, c_out, T, kernel, pad,
                                dilation, b, residual, y_stats_slot, out_scale);
    }
    __half* rows = half_rows(c_in, T, w.form);
    ops::adain_half_rows(x, rows, c_in, T, s, act, slope, alpha, w.form, scratch, stream, x_stats);
    return conv1d_half_rows(w, rows, y, c_in, c_out, T, kernel, pad, dilation, b, residual,
                            y_stats_slot, out_scale);
}

ops::ChannelPartials Context::conv1d_half_rows(const DeviceWeights::HalfConv& w,
                                               ops::HalfInput x, ops::FloatOrHalf y, int c_in,
                                               int c_out, int t_in, int kernel, int pad,
                                               int dilation, const float* b,
                                               ops::ConstFloatOrHalf residual,
                                               const char* y_stats_slot, float out_scale) const {
    float* scratch = op_scratch(ops::conv1d_half_rows_scratch_floats(
        c_in, c_out, t_in, kernel, pad, dilation, w.form, conv_streams));
    const ops::ChannelPartials y_stats =
        conv_stats(y_stats_slot, c_out,
                   ops::conv1d_half_rows_stats_parts(c_in, c_out, t_in, kernel, pad, dilation,
                                                     w.form, conv_streams));
    ops::conv1d_half_rows(x, w.w, w.scale, b, y, c_in, c_out, t_in, kernel, pad, dilation,
                          residual, w.form, scratch, stream, ops::HalfKernel::kBest,
                          y_stats.data, conv_streams, out_scale);
    return y_stats;
}

void Context::pool_conv1d(const std::string& pool_prefix, const std::string& conv_prefix,
                          const float* x, float* y, int c, int c_out, int t_in) const {
    constexpr int kPoolKernel = 3, kPoolStride = 2, kPoolPad = 1, kPoolOutputPad = 1;
    constexpr int kConvKernel = 3, kConvPad = 1;
    const int t_out =
        ops::conv_transpose1d_out_len(t_in, kPoolKernel, kPoolStride, kPoolPad, kPoolOutputPad);
    const std::string conv_weight = conv_prefix + ".weight";
    if (!tensor_core(weights.plan(conv_weight).kernel)) {
        float* pooled = floats("block.pooled", int64_t(c) * t_out);
        conv_transpose1d(pool_prefix, x, pooled, c, c, t_in, kPoolKernel, kPoolStride, kPoolPad,
                         kPoolOutputPad, c);
        conv1d(conv_prefix, pooled, y, c, c_out, t_out, kConvKernel, 1, kConvPad, 1, 1, true);
        return;
    }
    const DeviceWeights::HalfConv w =
        weights.get_half(conv_weight, int64_t(c_out) * kConvKernel * ops::half_rows_pitch(c));
    __half* rows = half_rows(c, t_out, w.form);
    ops::conv_transpose1d_depthwise_half_rows(
        x, weights.get(pool_prefix + ".weight", int64_t(c) * kPoolKernel),
        weights.get(pool_prefix + ".bias", c), rows, c, t_in, kPoolKernel, kPoolStride, kPoolPad,
        kPoolOutputPad, w.form, stream);
    conv1d_half_rows(w, rows, y, c, c_out, t_out, kConvKernel, kConvPad, 1,
                     weights.get(conv_prefix + ".bias", c_out), nullptr);
}

const __half* Context::conv1x1_half(const std::string& prefix, const float* x, int c_in,
                                    int c_out, int t, const char* y_slot) const {
    const DeviceWeights::HalfConv w =
        weights.get_half(prefix + ".weight", int64_t(c_out) * ops::half_rows_pitch(c_in));
    __half* rows = half_rows(c_in, t, w.form);
    ops::to_half_rows(x, rows, c_in, t, w.form, stream);
    __half* y = halves(y_slot, ops::half_channels_values(c_out, t));
    conv1d_half_rows(w, rows, y, c_in, c_out, t, 1, 0, 1, nullptr, nullptr);
    return y;
}

ops::ChannelPartials Context::conv_transpose1d(const std::string& prefix, ops::ScaledSum x,
                                               ops::FloatOrHalf y, int c_in, int c_out, int t_in,
                                               int kernel, int stride, int pad,
                                               int output_padding, int groups, float leaky_slope,
                                               int reflect_left, const float* residual,
                                               const char* y_stats_slot) const {
    const std::string weight = prefix + ".weight";
    const float* b = weights.get(prefix + ".bias", c_out);
    if (groups == 1 && output_padding == 0 && tensor_core(weights.plan(weight).kernel)) {
        const DeviceWeights::HalfConv w =
            weights.get_half(weight, int64_t(kernel) * c_out * ops::half_rows_pitch(c_in));
        __half* rows = half_rows(c_in, t_in, w.form);
        ops::to_half_rows(x, rows, c_in, t_in, w.form, stream, leaky_slope);
        float* scratch = op_scratch(ops::conv_transpose1d_half_rows_scratch_floats(
            c_in, c_out, t_in, kernel, stride, pad, w.form));
        const ops::ChannelPartials y_stats =
            conv_stats(y_stats_slot, c_out,
                       ops::conv_transpose1d_half_rows_stats_parts(
                           c_in, c_out, t_in, kernel, stride, pad, reflect_left, w.form));
        ops::conv_transpose1d_half_rows(rows, w.w, w.scale, b, y, c_in, c_out, t_in, kernel, stride,
                                        pad, reflect_left, residual, w.form, scratch, stream,
                                        ops::HalfKernel::kBest, y_stats.data);
        return y_stats;
    }
    const float* w = weights.get(weight, int64_t(c_in) * (c_out / groups) * kernel);
    if (reflect_left != 0 || residual != nullptr || y.f16 != nullptr) {
        throw std::logic_error("conv_transpose1d " + prefix +
                               ": a pad, residual or FP16 output needs its tensor-core weight");
    }
    float* scratch =
        op_scratch(ops::conv_transpose1d_scratch_floats(c_in, c_out, t_in, kernel, groups));
    const float* activated = leaky_relu_of(single(x, prefix), int64_t(c_in) * t_in, leaky_slope);
    ops::conv_transpose1d(blas, activated, w, b, y.f32, c_in, c_out, t_in, kernel, stride, pad,
                          output_padding, groups, scratch, stream, gemm_math());
    return {};
}

const float* Context::leaky_relu_of(const float* x, int64_t n, float leaky_slope) const {
    if (leaky_slope == 1.f) return x;
    float* activated = floats("ops.activated", n);
    ops::leaky_relu(x, activated, n, leaky_slope, stream);
    return activated;
}

ops::ChannelPartials Context::conv_stats(const char* slot, int c, int parts) const {
    if (slot == nullptr || parts == 0) return {};
    return {ws.doubles(std::string("ops.conv_stats.") + slot + tag,
                       int64_t(c) * parts * ops::kPartialDoubles),
            parts};
}

void Context::linear(const std::string& prefix, const float* x, float* y, int rows, int in, int out,
                     float beta, bool with_bias) const {
    const std::string weight = prefix + ".weight";
    const float* b = with_bias ? weights.get(prefix + ".bias", out) : nullptr;
    if (weights.plan(weight).kernel == Kernel::kSplitLinear) {
        split_linear(weight, x, b, y, rows, in, out, beta);
        return;
    }
    if (x == nullptr) throw std::logic_error(prefix + ": a split input needs its split weight");
    ops::linear(blas, x, weights.get(weight, int64_t(out) * in), b, y, rows, in, out, stream, beta,
                gemm_math());
}

// -------------------------------------------------------------- UtteranceRows

UtteranceRows::UtteranceRows(std::vector<int> lengths, Workspace& ws, cudaStream_t stream,
                             SplitShapes& shapes, const std::string& slots)
    : lengths_(std::move(lengths)), ws_(&ws), shapes_(&shapes), slots_(slots) {
    std::vector<int32_t> positions;
    for (const int T : lengths_) {
        offsets_.push_back(rows_);
        rows_ += T;
        for (int t = 0; t < T; ++t) positions.push_back(t);
    }
    if (!stacked()) return;
    int32_t* dev = ws.ints(slots_ + ".positions", rows_);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(dev, positions.data(), sizeof(int32_t) * rows_,
                                      cudaMemcpyHostToDevice, stream));
    positions_ = dev;
    for (const auto& [in, out] : SplitShapes(shapes)) row_chunks(in, out, stream);
}

const int32_t* UtteranceRows::row_chunks(int in, int out, cudaStream_t stream) const {
    if (!stacked()) return nullptr;
    const auto key = std::make_pair(in, out);
    const auto found = row_chunks_.find(key);
    if (found != row_chunks_.end()) return found->second;
    const std::vector<int32_t> chunks = ops::linear_split_half_row_chunks(lengths_, in, out);
    const std::string slot =
        slots_ + ".row_chunks." + std::to_string(in) + "x" + std::to_string(out);
    int32_t* dev = ws_->ints(slot, rows_);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(dev, chunks.data(), sizeof(int32_t) * rows_,
                                      cudaMemcpyHostToDevice, stream));
    row_chunks_.emplace(key, dev);
    shapes_->insert(key);
    return dev;
}

Context::SplitPlans Context::split_plans(int rows, int in, int out) const {
    SplitPlans p;
    if (utterance_rows != nullptr && utterance_rows->stacked()) {
        if (rows != utterance_rows->rows()) {
            throw std::logic_error("a split linear on stacked utterances takes all of their rows");
        }
        p.row_chunks = utterance_rows->row_chunks(in, out, stream);
    }
    p.scratch = floats("ops.scratch",
                       ops::linear_split_half_scratch_floats(rows, in, out, ops::HalfKernel::kBest,
                                                             p.row_chunks != nullptr));
    return p;
}

void Context::split_linear(const std::string& weight, const float* x, const float* b, float* y,
                           int rows, int in, int out, float beta) const {
    const DeviceWeights::SplitLinear w = weights.get_split_linear(weight, out, in);
    const SplitPlans p = split_plans(rows, in, out);
    ops::linear_split_half(x, split_input(rows, in), w.w, w.scale, b, y, rows, in, out, p.scratch,
                           stream, beta, ops::HalfKernel::kBest, p.row_chunks);
}

ops::SplitSums Context::linear_sums(const std::string& prefix, const float* x, float* y,
                                    int rows, int in, int out, float beta) const {
    const std::string weight = prefix + ".weight";
    if (weights.plan(weight).kernel != Kernel::kSplitLinear) {
        linear(prefix, x, y, rows, in, out, beta, false);
        return y;
    }
    const DeviceWeights::SplitLinear w = weights.get_split_linear(weight, out, in);
    const SplitPlans p = split_plans(rows, in, out);
    return ops::linear_split_half_sums(x, split_input(rows, in), w.w, w.scale, y, rows, in, out,
                                       p.scratch, stream, beta, ops::HalfKernel::kBest,
                                       p.row_chunks);
}

void Context::lstm(const std::string& prefix, const float* x, float* out, int T) const {
    const DeviceWeights::Lstm l = weights.lstm(prefix);
    const bool stacked = utterance_rows != nullptr && utterance_rows->stacked();
    if (weights.plan(prefix + ".weight_ih").kernel != Kernel::kSplitLinear) {
        // (cuBLAS picks its kernel by the row count: stacked rows would not
        // keep each utterance's bits)
        if (stacked) throw std::logic_error(prefix + ": stacked utterances need a split LSTM");
        float* scratch = floats("ops.scratch", ops::lstm_scratch_floats(T, l.hidden));
        ops::lstm_bidirectional(blas, x, l.w_ih, l.w_hh, l.b, out, T, l.in, l.hidden, scratch,
                                stream);
        return;
    }
    // Both directions' input projections as one split linear (its scratch
    // takes "ops.scratch"), then the recurrence, of every stacked utterance
    // at once.
    float* gx = floats("lstm.gates", ops::lstm_scratch_floats(T, l.hidden));
    split_linear(prefix + ".weight_ih", x, l.b, gx, T, l.in, 8 * l.hidden);
    const std::vector<int> lengths = stacked ? utterance_rows->lengths() : std::vector<int>{T};
    ops::lstm_recurrence(gx, l.w_hh, out, lengths, l.hidden, stream);
}

// ----------------------------------------------------------------------- Lane

namespace {

struct StreamDeleter {
    void operator()(cudaStream_t s) const noexcept { static_cast<void>(cudaStreamDestroy(s)); }
};
struct BlasDeleter {
    void operator()(cublasHandle_t h) const noexcept { static_cast<void>(cublasDestroy(h)); }
};
struct EventDeleter {
    void operator()(cudaEvent_t e) const noexcept { static_cast<void>(cudaEventDestroy(e)); }
};
struct GraphDeleter {
    void operator()(cudaGraph_t g) const noexcept { static_cast<void>(cudaGraphDestroy(g)); }
};
struct GraphExecDeleter {
    void operator()(cudaGraphExec_t g) const noexcept { static_cast<void>(cudaGraphExecDestroy(g)); }
};
template <typename Handle, typename Deleter>
using Owned = std::unique_ptr<std::remove_pointer_t<Handle>, Deleter>;

constexpr size_t kGraphCacheEntries = 16;          // per phase and lane
// cuBLAS's advice for Hopper; the residual-block streams' GEMMs (the
// shortcuts' 1x1 convs) are small: a quarter of it.
constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;
constexpr size_t kResblockBlasWorkspaceBytes = kBlasWorkspaceBytes / 4;
// main, side, then the generator's residual-block streams, which also run
// the AdainResBlk1d shortcuts (1x1 convs) of the F0 / N stacks and the
// decoder beside their residual paths; each with its cuBLAS handle.
constexpr int kStreams = 2 + kResblockStreams;
constexpr int kSideStream = 1;
const char* const kStreamTags[] = {"", ".side", ".res1", ".res2"};
static_assert(sizeof(kStreamTags) / sizeof(kStreamTags[0]) == kStreams, "one slot tag per stream");

// A captured phase: the executable graph, the workspace generation it was
// captured at, and (frame phase) the STFT plans its cuFFT nodes use.
struct CachedGraph {
    Owned<cudaGraphExec_t, GraphExecDeleter> exec;
    uint64_t generation = 0;
    std::unique_ptr<ops::Stft> stft;
};

// A graph's key: the shapes and choices its launches were captured with.
using GraphKey = std::vector<int64_t>;

// Bounded LRU of CachedGraph by key. An entry without a graph marks a key
// seen once.
class GraphCache {
public:
    // The entry of `key`, made the most recent; null when the key is new
    // (it is then noted, evicting the least recent entry when full).
    CachedGraph* find_or_note(const GraphKey& key) {
        auto it = index_.find(key);
        if (it != index_.end()) {
            order_.splice(order_.begin(), order_, it->second);
            return &it->second->second;
        }
        if (order_.size() == kGraphCacheEntries) {
            index_.erase(order_.back().first);
            order_.pop_back();
        }
        order_.emplace_front(key, CachedGraph{});
        index_[key] = order_.begin();
        return nullptr;
    }
    void clear() {
        index_.clear();
        order_.clear();
    }

private:
    using Entries = std::list<std::pair<GraphKey, CachedGraph>>;
    Entries order_;
    std::map<GraphKey, Entries::iterator> index_;
};

}  // namespace

class Lane {
public:
    Lane(const ModelConfig& cfg, const DeviceWeights& weights, Precision precision,
         std::shared_ptr<PinnedPool> audio_pool);
    ~Lane();
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

    // One utterance: its token phase, the durations read back, frames().
    ForwardResult run(const Utterance& u, Trace* trace);
    // Utterances first .. first + n - 1 into results: one token phase for
    // all of their tokens (stacked: ALBERT, bert_encoder and every LSTM once
    // for the group; a graph per group's lengths), one read-back of their
    // durations, their alignments and shared LSTM (stacked, a graph per
    // group's lengths and frames), then each one's frames().
    void run_group(const Utterance* first, size_t n, ForwardResult* results);
    size_t workspace_bytes() const { return ws_.bytes(); }
    // Phase timing on or off; the cached graphs (with or without marks) go.
    void set_phase_timing(bool on);
    const PhaseMarks& marks() const { return marks_; }

private:
    Context context(int stream, bool fast, Trace* trace);
    // The frame phase of `u`, whose token phase left its outputs in the
    // lane's slots (engine.d, engine.t_en, engine.durations and style_out_),
    // from its durations (read back) to the audio in host memory. aligned: a
    // group's frame prefix (run_group) left its alignment and shared LSTM
    // output in the slots too (engine.frame_token, prosody.shared_rows).
    ForwardResult frames(const Utterance& u, std::vector<int32_t> durations, Trace* trace,
                         bool aligned = false);
    // style_out_, sized for the style banks.
    void take_style_slots();
    // Where token_pass writes, per token row: bert [rows, bert_hidden],
    // d_en_rows [rows, hidden], d [rows, hidden + style], dur_lstm [rows,
    // hidden], logits [rows, max_dur]; t_en, utterance u's [hidden, T_u] at
    // hidden x its first row.
    struct TokenOutputs {
        float *bert, *d_en_rows, *d, *dur_lstm, *logits, *t_en;
    };
    // The token phase of `tokens`' utterances (one, or a batch's group
    // stacked) on ctx's stream and `side`'s: each one's style projections
    // (of ref_s [count, 2 * style_dim] into its styles[u].projections),
    // ALBERT, then the text encoder (side) || bert_encoder, the duration
    // encoder and head.
    void token_pass(const Context& ctx, const Context& side, const int32_t* ids,
                    const float* ref_s, const UtteranceRows& tokens,
                    const std::vector<UtteranceStyle>& styles, const TokenOutputs& out) const;
    // Enqueues `body(stft)` on the main stream: a replay of the graph cached
    // under `key`, else uncaptured on a key's first sight (or with a trace),
    // else captured (after `prepare(entry)`) and launched.
    template <typename Prepare, typename Body>
    void run_phase(GraphCache& cache, GraphKey key, bool capture, Prepare&& prepare, Body&& body);

    const ModelConfig& cfg_;
    const DeviceWeights& weights_;
    Precision precision_;
    // Whether `part`'s contexts run fast (the precision plan's part table).
    bool fast(ModelPart part) const { return part_runs_fast(part, precision_); }
    // Declared in teardown order: later members go first.
    Owned<cudaStream_t, StreamDeleter> streams_[kStreams];
    std::unique_ptr<void, DeviceFree> blas_workspace_[kStreams];
    Owned<cublasHandle_t, BlasDeleter> blas_[kStreams];
    Owned<cudaEvent_t, EventDeleter> events_[kStreams];
    Workspace ws_;
    ops::Stft stft_;  // of uncaptured runs
    GraphCache token_graphs_, frame_graphs_;  // token phases: {T}, or a group's lengths
    GraphCache prefix_graphs_;                 // a group's frame prefix: lengths, frames
    SplitShapes split_shapes_, frame_split_shapes_;  // of a group's token and frame rows
    float* style_out_[2] = {nullptr, nullptr};  // fc(s) of each style bank
    bool timing_ = false;
    PhaseMarks marks_;
    // The audio's way to the host: page-locked blocks that the results keep
    // (PinnedPool, shared by the engine's lanes), or beyond its bound this
    // lane's staging block (audio_staging).
    std::shared_ptr<PinnedPool> audio_pool_;
    std::unique_ptr<float, PinnedFree> audio_staging_;
    int64_t audio_staging_floats_ = 0;
    // The staging block, grown to hold at least `floats`.
    float* audio_staging(int64_t floats);
};

Lane::Lane(const ModelConfig& cfg, const DeviceWeights& weights, Precision precision,
           std::shared_ptr<PinnedPool> audio_pool)
    : cfg_(cfg),
      weights_(weights),
      precision_(precision),
      stft_(cfg.n_fft, cfg.hop),
      audio_pool_(std::move(audio_pool)) {
    // The critical path first: every stream but the side stream gets the
    // device's highest priority, so that the block scheduler gives free SMs
    // to the decoder's and the stages' latency-bound kernels before the
    // source branches' wide convs, which are needed a stage later (replays
    // keep it: captured kernel nodes carry their stream's priority).
    int lowest = 0, highest = 0;
    KOKORO_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    for (int i = 0; i < kStreams; ++i) {
        cudaStream_t stream = nullptr;
        KOKORO_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking,
                                                       i == kSideStream ? lowest : highest));
        streams_[i].reset(stream);
        cudaEvent_t event = nullptr;
        KOKORO_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
        events_[i].reset(event);
        cublasHandle_t handle = nullptr;
        KOKORO_CUBLAS_CHECK(cublasCreate(&handle));
        blas_[i].reset(handle);
        // Default math (fp32 unless a call asks for TF32), no atomics, a
        // workspace of its own (no allocation inside a graph capture): the
        // same algorithms, hence the same bits, on every call.
        KOKORO_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
        KOKORO_CUBLAS_CHECK(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED));
        KOKORO_CUBLAS_CHECK(cublasSetStream(handle, stream));
        const size_t workspace =
            i <= kSideStream ? kBlasWorkspaceBytes : kResblockBlasWorkspaceBytes;
        blas_workspace_[i].reset(device_alloc(workspace, "the cuBLAS workspace"));
        KOKORO_CUBLAS_CHECK(cublasSetWorkspace(handle, blas_workspace_[i].get(), workspace));
    }
}

Lane::~Lane() {
    for (auto& stream : streams_) static_cast<void>(cudaStreamSynchronize(stream.get()));
}

Context Lane::context(int stream, bool fast, Trace* trace) {
    return Context{cfg_,
                   weights_,
                   ws_,
                   blas_[stream].get(),
                   streams_[stream].get(),
                   events_[stream].get(),
                   {style_out_[0], style_out_[1]},
                   trace,
                   fast,
                   kStreamTags[stream],
                   timing_ ? &marks_ : nullptr};
}

void Lane::set_phase_timing(bool on) {
    for (auto& stream : streams_) KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    timing_ = on;
    token_graphs_.clear();
    frame_graphs_.clear();
    prefix_graphs_.clear();
}

template <typename Prepare, typename Body>
void Lane::run_phase(GraphCache& cache, GraphKey key, bool capture, Prepare&& prepare,
                     Body&& body) {
    // A graph holds its launches' kinds and plans: whether the thread shares
    // the GPU is part of the key.
    key.push_back(gpu_shared());
    CachedGraph* entry = capture ? cache.find_or_note(key) : nullptr;
    if (entry == nullptr) {
        body(stft_);
        return;
    }
    cudaStream_t main = streams_[0].get();
    if (!entry->exec || entry->generation != ws_.generation()) {
        entry->exec.reset();
        prepare(*entry);
        const uint64_t generation = ws_.generation();
        KOKORO_CUDA_CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeRelaxed));
        cudaGraph_t graph = nullptr;
        try {
            body(entry->stft ? *entry->stft : stft_);
        } catch (...) {
            // Already failing: end the capture and report the first error.
            if (cudaStreamEndCapture(main, &graph) == cudaSuccess && graph != nullptr)
                static_cast<void>(cudaGraphDestroy(graph));
            throw;
        }
        KOKORO_CUDA_CHECK(cudaStreamEndCapture(main, &graph));
        const Owned<cudaGraph_t, GraphDeleter> owned(graph);
        cudaGraphExec_t exec = nullptr;
        KOKORO_CUDA_CHECK(
            cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority));
        entry->exec.reset(exec);
        entry->generation = generation;
    }
    KOKORO_CUDA_CHECK(cudaGraphLaunch(entry->exec.get(), main));
}

void Lane::take_style_slots() {
    for (int half = 0; half < 2; ++half) {
        const DeviceWeights::StyleBank& bank = weights_.style_bank(static_cast<StyleHalf>(half));
        style_out_[half] = ws_.floats(half ? "styles.prosody" : "styles.decoder", bank.rows);
    }
}

void Lane::token_pass(const Context& ctx, const Context& side, const int32_t* ids,
                      const float* ref_s, const UtteranceRows& tokens,
                      const std::vector<UtteranceStyle>& styles, const TokenOutputs& out) const {
    const int sd = cfg_.style_dim, hid = cfg_.hidden_dim, rows = tokens.rows();
    for (int u = 0; u < tokens.count(); ++u) {
        for (int half = 0; half < 2; ++half) {
            const DeviceWeights::StyleBank& bank =
                weights_.style_bank(static_cast<StyleHalf>(half));
            if (bank.rows > 0) {
                ops::linear(ctx.blas, ref_s + int64_t(u) * 2 * sd + half * sd, bank.weight,
                            bank.bias, styles[u].projections[half], 1, sd, bank.rows, ctx.stream);
            }
        }
    }
    albert_forward(ctx, ids, tokens, out.bert);
    ctx.mark("style projections, ALBERT");
    ctx.record("bert", out.bert, {rows, cfg_.bert_hidden});
    // The text encoder (needed by the frame phase) beside the duration
    // path, whose serial LSTMs leave most SMs free, rather than beside
    // ALBERT's GEMMs, which its LSTM's 32 SMs slowed.
    side.wait_for(ctx);
    text_encoder_forward(side, ids, tokens, out.t_en);
    side.mark("text encoder (side stream)");
    ctx.with_utterance_rows(tokens).linear("bert_encoder", out.bert, out.d_en_rows, rows,
                                           cfg_.bert_hidden, hid);
    if (ctx.trace != nullptr) {
        float* d_en = ctx.floats("trace.d_en", int64_t(hid) * rows);
        ops::transpose(out.d_en_rows, d_en, rows, hid, ctx.stream);
        ctx.record("d_en", d_en, {hid, rows});
    }
    duration_encoder_forward(ctx, tokens, styles, out.d_en_rows, out.d);
    ctx.mark("bert_encoder, duration encoder");
    ctx.record("d", out.d, {rows, hid + sd});
    duration_head_forward(ctx, tokens, out.d, out.dur_lstm, out.logits);
    ctx.mark("duration head");
    ctx.record("dur_lstm", out.dur_lstm, {rows, hid});
    ctx.wait_for(side);
}

void Lane::run_group(const Utterance* first, size_t n, ForwardResult* results) {
    if (n == 1) {
        results[0] = run(first[0], nullptr);
        return;
    }
    cudaStream_t main = streams_[0].get();
    const int sd = cfg_.style_dim, hid = cfg_.hidden_dim, width = hid + sd;
    std::vector<int> lengths;
    std::vector<int32_t> ids;
    std::vector<float> ref_s;
    for (size_t i = 0; i < n; ++i) {
        lengths.push_back(first[i].T);
        ids.insert(ids.end(), first[i].ids, first[i].ids + first[i].T);
        ref_s.insert(ref_s.end(), first[i].ref_s, first[i].ref_s + 2 * sd);
    }
    const GraphKey key(lengths.begin(), lengths.end());
    const UtteranceRows tokens(std::move(lengths), ws_, main, split_shapes_);
    const int rows = tokens.rows();
    int32_t* ids_dev = ws_.ints("group.ids", rows);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(ids_dev, ids.data(), sizeof(int32_t) * rows,
                                      cudaMemcpyHostToDevice, main));
    float* style = ws_.floats("group.ref_s", int64_t(n) * 2 * sd);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(style, ref_s.data(), sizeof(float) * ref_s.size(),
                                      cudaMemcpyHostToDevice, main));
    float* projections[2];
    int bank_rows[2];
    for (int half = 0; half < 2; ++half) {
        bank_rows[half] = weights_.style_bank(static_cast<StyleHalf>(half)).rows;
        projections[half] = ws_.floats(half ? "group.styles.prosody" : "group.styles.decoder",
                                       int64_t(n) * bank_rows[half]);
    }
    float* bert = ws_.floats("group.bert", int64_t(rows) * cfg_.bert_hidden);
    float* d_en_rows = ws_.floats("group.d_en_rows", int64_t(rows) * hid);
    float* d = ws_.floats("group.d", int64_t(rows) * width);
    float* dur_lstm = ws_.floats("group.dur_lstm", int64_t(rows) * hid);
    float* logits = ws_.floats("group.dur_logits", int64_t(rows) * cfg_.max_dur);
    float* t_en = ws_.floats("group.t_en", int64_t(hid) * rows);
    int32_t* dur = ws_.ints("group.durations", rows);
    const Context ctx = context(0, fast(ModelPart::kTokenPath), nullptr);
    const Context side = context(kSideStream, fast(ModelPart::kTextEncoder), nullptr);

    // The token phase of the whole group: Lane::run's, stacked (a graph per
    // group of these lengths).
    std::vector<UtteranceStyle> styles(n);
    for (size_t i = 0; i < n; ++i) {
        styles[i].s = style + int64_t(i) * 2 * sd + sd;
        for (int half = 0; half < 2; ++half) {
            styles[i].projections[half] = projections[half] + int64_t(i) * bank_rows[half];
        }
    }
    run_phase(token_graphs_, key, true, [](CachedGraph&) {}, [&](ops::Stft&) {
        token_pass(ctx, side, ids_dev, style, tokens, styles,
                   {bert, d_en_rows, d, dur_lstm, logits, t_en});
    });
    const std::vector<int32_t> dur_host =
        read_back_durations(logits, tokens, first, cfg_.max_dur, dur, main);

    // The group's frame prefix: each utterance's alignment, then the shared
    // LSTM on all of their frames at once (stacked, as the token phase's
    // LSTMs; a graph per group's lengths and frames).
    std::vector<std::vector<int32_t>> durations(n);
    std::vector<int> frame_lengths(n);
    GraphKey prefix_key = key;
    for (size_t i = 0; i < n; ++i) {
        const int64_t row = tokens.offset(int(i));
        durations[i].assign(dur_host.begin() + row, dur_host.begin() + row + tokens.length(int(i)));
        frame_lengths[i] = frame_count(durations[i], cfg_);
        prefix_key.push_back(frame_lengths[i]);
    }
    const UtteranceRows frame_rows(std::move(frame_lengths), ws_, main, frame_split_shapes_,
                                   "frames");
    int32_t* frame_token = ws_.ints("group.frame_token", frame_rows.rows());
    float* en_rows = ws_.floats("group.en_rows", int64_t(frame_rows.rows()) * width);
    float* shared_rows = ws_.floats("group.shared_rows", int64_t(frame_rows.rows()) * hid);
    run_phase(prefix_graphs_, prefix_key, true, [](CachedGraph&) {}, [&](ops::Stft&) {
        for (size_t i = 0; i < n; ++i) {
            const int64_t row = tokens.offset(int(i)), frame = frame_rows.offset(int(i));
            ops::frame_token_index(dur + row, tokens.length(int(i)), frame_token + frame, main);
            ops::expand_frame_rows(d + row * width, frame_token + frame, en_rows + frame * width,
                                   width, frame_rows.length(int(i)), main);
        }
        shared_lstm_forward(ctx, frame_rows, en_rows, shared_rows);
    });

    // Each utterance's frame phase, from its token and prefix outputs moved
    // into the slots that the frame graphs read.
    take_style_slots();
    auto move = [&](void* to, const void* from, size_t bytes) {
        KOKORO_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, main));
    };
    for (size_t i = 0; i < n; ++i) {
        const int T = tokens.length(int(i)), F = frame_rows.length(int(i));
        const int64_t row = tokens.offset(int(i)), frame = frame_rows.offset(int(i));
        for (int half = 0; half < 2; ++half) {
            move(style_out_[half], styles[i].projections[half], sizeof(float) * bank_rows[half]);
        }
        move(ws_.floats("engine.t_en", int64_t(hid) * T), t_en + row * hid,
             sizeof(float) * T * hid);
        move(ws_.ints("engine.frame_token", F), frame_token + frame, sizeof(int32_t) * F);
        move(ws_.floats("prosody.shared_rows", int64_t(F) * hid), shared_rows + frame * hid,
             sizeof(float) * F * hid);
        results[i] = frames(first[i], std::move(durations[i]), nullptr, true);
    }
}

ForwardResult Lane::run(const Utterance& u, Trace* trace) {
    const int T = u.T;
    const int sd = cfg_.style_dim;
    const int hid = cfg_.hidden_dim;
    const int width = hid + sd;
    cudaStream_t main = streams_[0].get();
    const bool capture = trace == nullptr;

    // Inputs (ids as int32, the style vector) and every buffer the two
    // phases share, taken before any graph is looked up.
    std::vector<int32_t> ids32(u.ids, u.ids + T);
    int32_t* ids_dev = ws_.ints("input.ids", T);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(ids_dev, ids32.data(), sizeof(int32_t) * T,
                                      cudaMemcpyHostToDevice, main));
    float* style = ws_.floats("input.ref_s", 2 * sd);
    KOKORO_CUDA_CHECK(
        cudaMemcpyAsync(style, u.ref_s, sizeof(float) * 2 * sd, cudaMemcpyHostToDevice, main));
    take_style_slots();
    float* bert = ws_.floats("engine.bert", int64_t(T) * cfg_.bert_hidden);
    float* d_en_rows = ws_.floats("engine.d_en_rows", int64_t(T) * hid);
    float* d = ws_.floats("engine.d", int64_t(T) * width);
    float* dur_lstm = ws_.floats("engine.dur_lstm", int64_t(T) * hid);
    float* logits = ws_.floats("engine.dur_logits", int64_t(T) * cfg_.max_dur);
    float* t_en = ws_.floats("engine.t_en", int64_t(hid) * T);
    int32_t* dur = ws_.ints("engine.durations", T);
    const Context ctx = context(0, fast(ModelPart::kTokenPath), trace);
    const Context side = context(kSideStream, fast(ModelPart::kTextEncoder), trace);
    ctx.mark("start");

    // Token side: styles, ALBERT, then text encoder || bert_encoder, duration
    // encoder and head.
    const UtteranceRows tokens(T);
    const std::vector<UtteranceStyle> styles{{style + sd, {style_out_[0], style_out_[1]}}};
    run_phase(token_graphs_, {T}, capture, [](CachedGraph&) {}, [&](ops::Stft&) {
        token_pass(ctx, side, ids_dev, style, tokens, styles,
                   {bert, d_en_rows, d, dur_lstm, logits, t_en});
    });

    std::vector<int32_t> dur_host = read_back_durations(logits, tokens, &u, cfg_.max_dur, dur, main);
    if (trace != nullptr) {
        trace->floats["dur_float"] = durations_before_rounding(logits, T, cfg_.max_dur, u.speed, main);
    }
    return frames(u, std::move(dur_host), trace);
}

ForwardResult Lane::frames(const Utterance& u, std::vector<int32_t> durations, Trace* trace,
                           bool aligned) {
    const int T = u.T;
    const int hid = cfg_.hidden_dim;
    const int width = hid + cfg_.style_dim;
    cudaStream_t main = streams_[0].get();
    const bool capture = trace == nullptr;
    // (aligned: the alignment is made, from the group's d and durations)
    const float* d = aligned ? nullptr : ws_.floats("engine.d", int64_t(T) * width);
    const float* t_en = ws_.floats("engine.t_en", int64_t(hid) * T);
    const int32_t* dur = aligned ? nullptr : ws_.ints("engine.durations", T);
    uint64_t* seed = ws_.words("input.seed", 1);
    KOKORO_CUDA_CHECK(
        cudaMemcpyAsync(seed, &u.seed, sizeof(uint64_t), cudaMemcpyHostToDevice, main));
    const Context ctx = context(0, fast(ModelPart::kProsodyStacks), trace);
    const Context side = context(kSideStream, fast(ModelPart::kGenerator), trace);
    ForwardResult result;
    const int F = frame_count(durations, cfg_);
    result.durations.assign(durations.begin(), durations.end());
    if (trace != nullptr) trace->ints["pred_dur"] = result.durations;
    ctx.mark("durations read back");

    // Frame side: alignment, shared LSTM (unless aligned), F0 || N, source +
    // STFT + source branches || decoder, generator.
    int32_t* frame_token = ws_.ints("engine.frame_token", F);
    float* en_rows = aligned ? nullptr : ws_.floats("engine.en_rows", int64_t(F) * width);
    float* shared_rows = ws_.floats("prosody.shared_rows", int64_t(F) * hid);
    float* f0 = ws_.floats("engine.f0", 2 * int64_t(F));
    float* n = ws_.floats("engine.n", 2 * int64_t(F));
    float* dec_out = ws_.floats("engine.dec_out", int64_t(cfg_.upsample_initial_channel) * 2 * F);
    const int64_t samples = 2 * int64_t(F) * cfg_.source_upsampling();
    float* audio = ws_.floats("engine.audio", samples);
    const GraphKey frame_key{T, F, u.deterministic, aligned};
    const int spec_frames = generator_spec_frames(cfg_, F);
    auto prepare = [&](CachedGraph& entry) {
        if (!entry.stft) entry.stft = std::make_unique<ops::Stft>(cfg_.n_fft, cfg_.hop);
        entry.stft->reserve(spec_frames, main);
    };
    run_phase(frame_graphs_, frame_key, capture, prepare, [&](ops::Stft& stft) {
        if (!aligned) {
            ops::frame_token_index(dur, T, frame_token, main);
            ops::expand_frame_rows(d, frame_token, en_rows, width, F, main);
            if (trace != nullptr) {
                float* en = ctx.floats("trace.en", int64_t(width) * F);
                ops::transpose(en_rows, en, F, width, main);
                ctx.record("en", en, {width, F});
            }
            shared_lstm_forward(ctx, UtteranceRows(F), en_rows, shared_rows);
        }
        ctx.mark("alignment, shared LSTM");
        ctx.record("shared_lstm", shared_rows, {F, hid});
        const bool prosody_fast = fast(ModelPart::kProsodyStacks);
        const Context resblocks[kResblockStreams] = {
            context(2, fast(ModelPart::kGenerator), trace),
            context(3, fast(ModelPart::kGenerator), trace)};
        f0n_forward(ctx, side.with_fast(prosody_fast), resblocks[0].with_fast(prosody_fast),
                    resblocks[1].with_fast(prosody_fast), shared_rows, F, f0, n);
        ctx.record("F0", f0, {2 * F});
        ctx.record("N", n, {2 * F});
        ctx.record("t_en", t_en, {hid, T});
        side.wait_for(ctx);  // f0
        const float* har = generator_source(side, stft, f0, F, u.deterministic, seed);
        side.mark("harmonic source, STFT (side stream)");
        const Context decoder = ctx.with_fast(fast(ModelPart::kDecoder));
        decoder_forward(decoder, resblocks[0].with_fast(fast(ModelPart::kDecoder)), t_en,
                        frame_token, T, F, f0, n, dec_out);
        decoder.mark("decoder");
        const Context generator = ctx.with_fast(fast(ModelPart::kGenerator));
        generator_forward(generator, side, resblocks, stft, dec_out, har, F, audio);
        generator.mark("conv_post, iSTFT");
    });

    result.audio = audio_pool_->take(samples);
    result.samples = samples;
    // A result in ordinary memory (the pool's bound reached) is copied
    // through the lane's page-locked staging block: into pageable memory the
    // driver stages the copy itself, and a batch whose results passed the
    // bound ran host-bound (256 medium utterances: ~20% slower).
    const bool pinned = result.audio.get_deleter().pool != nullptr;
    float* const landing = pinned ? result.audio.get() : audio_staging(samples);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(landing, audio, sizeof(float) * samples,
                                      cudaMemcpyDeviceToHost, main));
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(main));  // the side stream has joined main
    if (!pinned) std::copy_n(landing, samples, result.audio.get());
    ws_.release_retired();
    if (trace != nullptr) {
        trace->floats["audio"] = {{samples}, {result.audio.get(), result.audio.get() + samples}};
    }
    return result;
}

float* Lane::audio_staging(int64_t floats) {
    if (floats > audio_staging_floats_) {
        audio_staging_.reset();
        audio_staging_floats_ = 0;  // (none, should the allocation below throw)
        audio_staging_.reset(
            static_cast<float*>(pinned_alloc(sizeof(float) * floats, "the audio's staging")));
        audio_staging_floats_ = floats;
    }
    return audio_staging_.get();
}

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
