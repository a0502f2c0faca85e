// The model's dimensions and its weights on the device:
// - ModelConfig: the dimensions read from config.json;
// - DeviceWeights: every folded weight uploaded once into one device arena,
//   with LSTM parameters stacked per direction (biases folded), all
//   style projections fc(s) of one style half concatenated into one matrix,
//   so a forward pass computes every AdaIN/AdaLayerNorm style in one GEMV,
//   and each attention's query, key, value linears stacked into the one
//   linear "<attention>.qkv" (weight [3 * hidden, in], bias [3 * hidden]);
//   each weight in the form the precision plan gives it (precision_plan.h:
//   the tensor-core convs' as FP16 only, the split linears' as split FP16
//   only).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "kokoro/ops.h"
#include "kokoro/precision_plan.h"

namespace kokoro {

// Dimensions of the model, from config.json (names as there).
struct ModelConfig {
    int n_token = 0;
    int hidden_dim = 0;  // 512
    int style_dim = 0;   // 128
    int n_layer = 0;     // duration encoder and text encoder depth
    int max_dur = 0;     // duration head width
    int text_encoder_kernel_size = 0;
    int bert_embedding = 128;  // ALBERT's default embedding size
    int bert_hidden = 0;
    int bert_heads = 0;
    int bert_intermediate = 0;
    int bert_layers = 0;
    int bert_positions = 0;  // context length
    int upsample_initial_channel = 0;
    std::vector<int> upsample_rates;
    std::vector<int> upsample_kernel_sizes;
    std::vector<int> resblock_kernel_sizes;
    std::vector<std::vector<int>> resblock_dilation_sizes;
    int n_fft = 0;
    int hop = 0;

    // Samples of audio per F0 sample (the generator's total upsampling).
    int source_upsampling() const;
};

// A conv1d of stride > 1 (generator_strided_convs), which precision "fast"
// runs polyphase on the tensor cores (ops::conv1d_strided_half_rows).
struct StridedConv {
    int stride, pad;
};
using StridedConvs = std::unordered_map<std::string, StridedConv>;  // by weight name

// A weight the model needs is missing or has the wrong size.
class WeightsError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A host tensor lent by the caller for the duration of the upload.
struct HostTensor {
    const float* data = nullptr;
    std::vector<int64_t> shape;
    int64_t numel() const;
};
using HostWeights = std::unordered_map<std::string, HostTensor>;

// The two halves of ref_s: [0, style_dim) styles the decoder, the rest the
// prosody predictor. Style projections are grouped by the half they read.
enum class StyleHalf { kDecoder = 0, kProsody = 1 };

// The ops' form of a tensor-core weight's plan operands.
inline ops::HalfOperands half_operands(Operands operands) {
    return operands == Operands::kSplit ? ops::HalfOperands::kSplit : ops::HalfOperands::kRounded;
}

// Frees device memory owned by a std::unique_ptr.
struct DeviceFree {
    void operator()(void* ptr) const noexcept;
};

class DeviceWeights {
public:
    // Every weight is stored as the precision plan says (plan_weight): a
    // tensor-core conv's as FP16 alone, in its operand form (a strided
    // conv's in its polyphase form, ops::conv_weight_to_polyphase_half_rows,
    // from `strided`), a split linear's as split FP16 alone, the others as
    // fp32.
    DeviceWeights(const HostWeights& host, int style_dim, Precision precision,
                  const StridedConvs& strided);
    DeviceWeights(const DeviceWeights&) = delete;
    DeviceWeights& operator=(const DeviceWeights&) = delete;

    // The plan that weight `name` was uploaded by (the layers take their
    // path from it); kFloat for a name the weights lack (get() then says so).
    WeightPlan plan(const std::string& name) const {
        const auto it = plans_.find(name);
        return it == plans_.end() ? WeightPlan{} : it->second;
    }

    // A weight by folded name, checked to hold `numel` values. An
    // attention's "<p>.query/key/value.weight/bias" exist only stacked, as
    // "<p>.qkv.weight" and "<p>.qkv.bias" (rows: query, key, value).
    const float* get(const std::string& name, int64_t numel) const;
    // The tensor-core copy of a conv weight (ops::conv_weight_to_half_rows).
    struct HalfConv {
        const __half* w;
        float scale;  // the conv's w_scale
        ops::HalfOperands form;
    };
    // The tensor-core copy of conv weight `name`, checked to hold `numel`
    // values per FP16 part.
    HalfConv get_half(const std::string& name, int64_t numel) const;
    // A split linear's copy: ALBERT's encoder linears, bert_encoder and every
    // LSTM's input projection (both directions stacked, as
    // "<prefix>.weight_ih") where the plan says so.
    struct SplitLinear {
        const __half* w;  // [2, out, ops::split_pitch(in)]: hi, lo
        float scale;      // the GEMM's w_scale
    };
    // The split copy of linear weight `name` (an attention's stacked
    // "<p>.qkv.weight" too), checked to be [out, in].
    SplitLinear get_split_linear(const std::string& name, int out, int in) const;

    struct Lstm {
        const float* w_ih;  // [2, 4H, In]; null where kept as split FP16 only
        const float* w_hh;  // [2, 4H, H]
        const float* b;     // [2, 4H], b_ih + b_hh
        int in;
        int hidden;
    };
    // The LSTM named `prefix` (e.g. "predictor.shared"), stacked at upload.
    Lstm lstm(const std::string& prefix) const;

    // Concatenated style projections of one half: weight [rows, style_dim],
    // bias [rows]; style_slot() locates fc `prefix` in their output.
    struct StyleBank {
        const float* weight = nullptr;
        const float* bias = nullptr;
        int rows = 0;
    };
    const StyleBank& style_bank(StyleHalf half) const { return banks_[static_cast<int>(half)]; }
    struct StyleSlot {
        StyleHalf half;
        int offset;
        int size;
    };
    const StyleSlot& style_slot(const std::string& fc_prefix) const;

    size_t bytes() const { return bytes_; }

private:
    struct Entry {
        const float* ptr;
        int64_t numel;
    };
    struct HalfEntry {
        const __half* ptr;
        int64_t numel;  // per part
        float scale;
        ops::HalfOperands form;
    };
    std::unique_ptr<float, DeviceFree> arena_;
    std::unique_ptr<__half, DeviceFree> half_arena_;
    size_t bytes_ = 0;
    std::unordered_map<std::string, Entry> entries_;
    std::unordered_map<std::string, HalfEntry> half_entries_;
    std::unordered_map<std::string, WeightPlan> plans_;
    std::unordered_map<std::string, HalfEntry> split_entries_;  // numel: both parts'
    std::unordered_map<std::string, Lstm> lstms_;
    std::unordered_map<std::string, StyleSlot> style_slots_;
    StyleBank banks_[2];
};

}  // namespace kokoro
