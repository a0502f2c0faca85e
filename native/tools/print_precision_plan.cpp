// Host-only tool over the precision plan (no CUDA needed; built by
// tests/test_precision_plan.py with the system C++ compiler):
//   print_precision_plan              the plan as docs/DESIGN.md quotes it
//   print_precision_plan fp32|fast    for each stdin line "name<TAB>d0,d1,..<TAB>strided(0/1)",
//                                     "name<TAB>kernel<TAB>operands" under that precision
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kokoro/precision_plan.h"

namespace {

const char* kernel_name(kokoro::Kernel k) {
    switch (k) {
        case kokoro::Kernel::kFloat:
            return "float";
        case kokoro::Kernel::kTensorCoreConv:
            return "tensor_core_conv";
        case kokoro::Kernel::kTensorCoreTransposed:
            return "tensor_core_transposed";
        case kokoro::Kernel::kTensorCoreStrided:
            return "tensor_core_strided";
        case kokoro::Kernel::kSplitLinear:
            return "split_linear";
        case kokoro::Kernel::kUnused:
            return "unused";
    }
    return "?";
}

const char* operands_name(kokoro::Operands o) {
    switch (o) {
        case kokoro::Operands::kNone:
            return "none";
        case kokoro::Operands::kRounded:
            return "rounded";
        case kokoro::Operands::kSplit:
            return "split";
    }
    return "?";
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 1) {
        std::cout << kokoro::render_precision_plan();
        return 0;
    }
    const std::string mode = argv[1];
    if (argc != 2 || (mode != "fp32" && mode != "fast")) {
        std::cerr << "usage: print_precision_plan [fp32|fast]\n";
        return 2;
    }
    const kokoro::Precision precision =
        mode == "fast" ? kokoro::Precision::kFast : kokoro::Precision::kFp32;
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream fields(line);
        std::string name, dims, strided;
        if (!std::getline(fields, name, '\t') || !std::getline(fields, dims, '\t') ||
            !std::getline(fields, strided, '\t')) {
            std::cerr << "bad line: " << line << "\n";
            return 2;
        }
        std::vector<int64_t> shape;
        std::istringstream dim_list(dims);
        for (std::string d; std::getline(dim_list, d, ',');) shape.push_back(std::stoll(d));
        const kokoro::WeightPlan p =
            kokoro::plan_weight(name, shape, precision, strided == "1");
        std::cout << name << '\t' << kernel_name(p.kernel) << '\t' << operands_name(p.operands)
                  << '\n';
    }
    return 0;
}
