// The precision plan: which kernel runs each layer, in which operand form,
// per precision. ONE table (precision_plan.cpp) decides it: the weight upload
// (DeviceWeights) stores each weight as its row says, and the layers take
// their path from the same answer (DeviceWeights::plan), never from weight
// names or from what the stores happen to hold. docs/DESIGN.md quotes the
// table as render_precision_plan() prints it (tests/test_precision_plan.py
// keeps the two equal). Host-only C++: no CUDA header, so the plan compiles
// and is tested on a machine without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kokoro {

enum class Precision { kFp32 = 0, kFast = 1 };

// The kernel family that runs a weight's layer.
enum class Kernel {
    kFloat,                 // fp32 copy: cuBLAS GEMMs (math: part_runs_fast) and fp32 kernels
    kTensorCoreConv,        // FP16 copy: the implicit-GEMM tensor-core conv (ops::conv1d_half_rows)
    kTensorCoreTransposed,  // FP16 polyphase copy: ops::conv_transpose1d_half_rows
    kTensorCoreStrided,     // FP16 polyphase copy: ops::conv1d_strided_half_rows
    kSplitLinear,           // split FP16 copy: the split GEMM (ops::linear_split_half)
    kUnused,                // not uploaded
};

// A tensor-core kernel's FP16 operand form (ops::HalfOperands): rounded, or
// split into hi + lo (three products: float32-level accuracy). kFloat and
// kUnused weights have none.
enum class Operands { kNone, kRounded, kSplit };

struct WeightPlan {
    Kernel kernel = Kernel::kFloat;
    Operands operands = Operands::kNone;
    bool operator==(const WeightPlan& o) const {
        return kernel == o.kernel && operands == o.operands;
    }
};

// Whether `kernel` reads an FP16 conv copy (DeviceWeights::get_half).
inline bool tensor_core(Kernel kernel) {
    return kernel == Kernel::kTensorCoreConv || kernel == Kernel::kTensorCoreTransposed ||
           kernel == Kernel::kTensorCoreStrided;
}

// The plan of weight `name` (folded name; an attention's stacked
// "<p>.qkv.weight" and an LSTM's stacked "<p>.weight_ih" too) of `shape`:
// conv1d [c_out, c_in, K], transposed conv [c_in, c_out, K], linear [out,
// in]. `strided`: a conv of stride > 1 (generator_strided_convs).
WeightPlan plan_weight(const std::string& name, const std::vector<int64_t>& shape,
                       Precision precision, bool strided = false);

// The model parts whose contexts run "fast": cuBLAS GEMMs in TF32 and the
// generator's FP16 intermediates (Context::fast). The others keep fp32
// arithmetic outside their tensor-core and split layers in both precisions.
enum class ModelPart {
    kTokenPath,      // style projections, ALBERT, bert_encoder, duration encoder and head
    kTextEncoder,
    kProsodyStacks,  // the shared LSTM and the F0 / N stacks
    kDecoder,
    kGenerator,      // with its harmonic source and source branches
};
bool part_runs_fast(ModelPart part, Precision precision);

// The plan as a Markdown table, as docs/DESIGN.md quotes it.
std::string render_precision_plan();

}  // namespace kokoro
