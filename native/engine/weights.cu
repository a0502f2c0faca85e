// The weight upload: every folded tensor the model uses goes into ONE device
// arena (256-byte aligned slices), copied once at construction; conv weights
// (3-D) in the ops' layout, kernel axis in the middle. LSTM parameters are
// stacked per direction with b_ih + b_hh folded (summed in double, as the CPU
// backend does); the style projections fc of each style half are
// concatenated so one GEMV per half computes every AdaIN style vector; each
// attention's query, key and value linears are stacked into one,
// "<attention>.qkv", so ALBERT projects all three in one GEMM. The weights
// that the precision plan (precision_plan.h) gives to the tensor-core convs
// go instead, as FP16 with the last axis padded to 8
// (ops::conv_weight_to_half_rows, in the plan's operand form), into a second
// arena, with the split linears' split FP16 copies.
#include <algorithm>
#include <deque>
#include <regex>
#include <set>
#include <string>
#include <utility>

#include "kokoro/check.h"
#include "kokoro/weights.h"

namespace kokoro {

namespace {

constexpr size_t kArenaAlignFloats = 64;  // 256 bytes
constexpr size_t kNoOffset = ~size_t(0);   // a tensor without an fp32 copy
const char* const kLstmParams[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};

StyleHalf style_half_of(const std::string& name) {
    if (name.rfind("decoder.", 0) == 0) return StyleHalf::kDecoder;
    if (name.rfind("predictor.", 0) == 0) return StyleHalf::kProsody;
    throw WeightsError("style projection " + name + " is outside the decoder and the predictor");
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
    // A cudaMemcpy from pageable memory may return before its DMA lands, and
    // the lanes' streams (non-blocking) do not wait for the legacy stream's.
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
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

}  // namespace kokoro
