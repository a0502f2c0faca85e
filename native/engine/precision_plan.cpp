// The precision plan's table (precision_plan.h). A weight takes the first
// row that matches its name and shape; the last row takes every weight.
#include "kokoro/precision_plan.h"

#include <sstream>

namespace kokoro {

namespace {

// What a row asks of a weight's shape (conv1d [c_out, c_in, K], transposed
// conv [c_in, c_out, K], linear [out, in]).
enum class ShapeRule {
    kAny,
    kMatrix,          // 2-D
    kDenseConv,       // conv1d, K >= 2, at least kMinHalfChannels inputs
    kPointwiseConv,   // conv1d, K == 1, at least kMinHalfChannels inputs
    kTransposedConv,  // transposed conv, at least kMinHalfChannels inputs
    kStridedConv,     // a conv of stride > 1
};

// The tensor-core kernels' smallest input channel count: below it a conv's
// reduction is too short to fill their 64-channel chunks.
constexpr int64_t kMinHalfChannels = 32;

struct Rule {
    const char* layers;   // what the docs call them
    const char* pattern;  // the weight names: '*' stands for any characters
    ShapeRule shape;
    WeightPlan fp32, fast;
};

constexpr WeightPlan kFloat{Kernel::kFloat, Operands::kNone};
constexpr WeightPlan kUnused{Kernel::kUnused, Operands::kNone};
constexpr WeightPlan kSplitLinear{Kernel::kSplitLinear, Operands::kSplit};
constexpr WeightPlan kConvSplit{Kernel::kTensorCoreConv, Operands::kSplit};
constexpr WeightPlan kConvRounded{Kernel::kTensorCoreConv, Operands::kRounded};
constexpr WeightPlan kTransposedSplit{Kernel::kTensorCoreTransposed, Operands::kSplit};
constexpr WeightPlan kTransposedRounded{Kernel::kTensorCoreTransposed, Operands::kRounded};
constexpr WeightPlan kStridedRounded{Kernel::kTensorCoreStrided, Operands::kRounded};

// Why each row says what it says: docs/DESIGN.md, "Precision".
constexpr Rule kRules[] = {
    {"ALBERT's pooler (unused)", "bert.pooler.*", ShapeRule::kAny, kUnused, kUnused},
    // fast's token phase must still give fp32's durations, which TF32 or
    // rounded FP16 would not: split operands there.
    {"ALBERT's encoder linears (qkv stacked)", "bert.encoder.*.weight", ShapeRule::kMatrix,
     kFloat, kSplitLinear},
    {"bert_encoder", "bert_encoder.weight", ShapeRule::kMatrix, kFloat, kSplitLinear},
    {"LSTM input projections (directions stacked)", "*.weight_ih", ShapeRule::kMatrix, kFloat,
     kSplitLinear},
    // F0 reaches the audio through the source's phase integration: split in
    // both precisions.
    {"F0 stack convs", "predictor.F0*", ShapeRule::kDenseConv, kConvSplit, kConvSplit},
    {"F0 stack's other weights", "predictor.F0*", ShapeRule::kAny, kFloat, kFloat},
    {"generator's strided noise convs", "*", ShapeRule::kStridedConv, kFloat, kStridedRounded},
    {"generator's upsamplers", "*.ups.*", ShapeRule::kTransposedConv, kTransposedSplit,
     kTransposedRounded},
    {"narrow upsamplers", "*.ups.*", ShapeRule::kAny, kFloat, kFloat},
    {"AdainResBlk1d depthwise upsamplers", "*.pool.*", ShapeRule::kAny, kFloat, kFloat},
    {"decoder's 1x1 block shortcuts", "decoder.*.conv1x1.*", ShapeRule::kPointwiseConv, kFloat,
     kConvRounded},
    {"N stack's 1x1 block shortcut", "predictor.*.conv1x1.*", ShapeRule::kPointwiseConv, kFloat,
     kConvRounded},
    {"dense convs", "*", ShapeRule::kDenseConv, kConvSplit, kConvRounded},
    {"everything else", "*", ShapeRule::kAny, kFloat, kFloat},
};

// Whether `name` from `at` on matches `pattern` ('*': any characters).
bool glob_matches(const char* pattern, const std::string& name, size_t at = 0) {
    for (; *pattern != '\0'; ++pattern, ++at) {
        if (*pattern == '*') {
            for (size_t rest = at; rest <= name.size(); ++rest) {
                if (glob_matches(pattern + 1, name, rest)) return true;
            }
            return false;
        }
        if (at >= name.size() || name[at] != *pattern) return false;
    }
    return at == name.size();
}

bool shape_matches(ShapeRule rule, const std::vector<int64_t>& shape, bool strided) {
    const bool conv = shape.size() == 3;
    switch (rule) {
        case ShapeRule::kAny:
            return true;
        case ShapeRule::kMatrix:
            return shape.size() == 2;
        case ShapeRule::kDenseConv:
            return conv && shape[2] >= 2 && shape[1] >= kMinHalfChannels;
        case ShapeRule::kPointwiseConv:
            return conv && shape[2] == 1 && shape[1] >= kMinHalfChannels;
        case ShapeRule::kTransposedConv:
            return conv && shape[0] >= kMinHalfChannels;
        case ShapeRule::kStridedConv:
            return conv && strided;
    }
    return false;
}

bool matches(const Rule& rule, const std::string& name, const std::vector<int64_t>& shape,
             bool strided) {
    return glob_matches(rule.pattern, name) && shape_matches(rule.shape, shape, strided);
}

const char* shape_text(ShapeRule rule) {
    switch (rule) {
        case ShapeRule::kAny:
            return "";
        case ShapeRule::kMatrix:
            return "2-D";
        case ShapeRule::kDenseConv:
            return "conv, K >= 2, >= 32 in";
        case ShapeRule::kPointwiseConv:
            return "conv, K = 1, >= 32 in";
        case ShapeRule::kTransposedConv:
            return "transposed conv, >= 32 in";
        case ShapeRule::kStridedConv:
            return "conv, stride > 1";
    }
    return "";
}

std::string plan_text(const WeightPlan& p) {
    const char* form = p.operands == Operands::kSplit ? ", split FP16" : ", rounded FP16";
    switch (p.kernel) {
        case Kernel::kFloat:
            return "fp32 copy";
        case Kernel::kTensorCoreConv:
            return std::string("tensor-core conv") + form;
        case Kernel::kTensorCoreTransposed:
            return std::string("tensor-core polyphase transposed conv") + form;
        case Kernel::kTensorCoreStrided:
            return std::string("tensor-core polyphase strided conv") + form;
        case Kernel::kSplitLinear:
            return "split GEMM, split FP16";
        case Kernel::kUnused:
            return "not uploaded";
    }
    return "";
}

std::string weights_text(const Rule& r) {
    std::string text = std::string("`") + r.pattern + "`";
    if (shape_text(r.shape)[0] != '\0') text += std::string(", ") + shape_text(r.shape);
    return text;
}

constexpr struct {
    ModelPart part;
    const char* name;
    bool fast_in_fast;
} kParts[] = {
    {ModelPart::kTokenPath, "token path (styles, ALBERT, bert_encoder, duration encoder, head)",
     false},
    {ModelPart::kTextEncoder, "text encoder", true},
    {ModelPart::kProsodyStacks, "shared LSTM, F0 / N stacks", false},
    {ModelPart::kDecoder, "decoder", true},
    {ModelPart::kGenerator, "generator (source, branches, stages)", true},
};

}  // namespace

WeightPlan plan_weight(const std::string& name, const std::vector<int64_t>& shape,
                       Precision precision, bool strided) {
    for (const Rule& rule : kRules) {
        if (matches(rule, name, shape, strided)) {
            return precision == Precision::kFast ? rule.fast : rule.fp32;
        }
    }
    return kFloat;  // (the last rule takes everything)
}

bool part_runs_fast(ModelPart part, Precision precision) {
    if (precision != Precision::kFast) return false;
    for (const auto& p : kParts) {
        if (p.part == part) return p.fast_in_fast;
    }
    return false;
}

std::string render_precision_plan() {
    std::ostringstream out;
    out << "| layers | weights | fp32 | fast |\n|---|---|---|---|\n";
    for (const Rule& r : kRules) {
        out << "| " << r.layers << " | " << weights_text(r) << " | " << plan_text(r.fp32)
            << " | " << plan_text(r.fast) << " |\n";
    }
    out << "\n| model part | fp32 | fast |\n|---|---|---|\n";
    for (const auto& p : kParts) {
        out << "| " << p.name << " | fp32 context | "
            << (p.fast_in_fast ? "fast context" : "fp32 context") << " |\n";
    }
    return out.str();
}

}  // namespace kokoro
