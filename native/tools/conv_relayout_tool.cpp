// Host-only driver of the conv weight relayouts (native/ops/conv_relayout.cu),
// for tests/test_conv_relayout.py: no GPU needed, only the CUDA headers.
// Reads float32 weights on stdin, writes the relayout on stdout:
//   conv_relayout_tool layout A B K                    [A, B, K] -> [A, K, B] floats
//   conv_relayout_tool half A K B rounded|split        [A, K, B] -> scale (float), FP16 half rows
//   conv_relayout_tool polyphase Cout K Cin stride pad [Cout, K, Cin] -> scale, FP16 rows
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kokoro/ops.h"

namespace {

std::vector<float> read_floats(size_t n) {
    std::vector<float> v(n);
    if (std::fread(v.data(), sizeof(float), n, stdin) != n) v.clear();
    return v;
}

template <typename T>
void write(const T* data, size_t n) {
    std::fwrite(data, sizeof(T), n, stdout);
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    auto arg = [&](size_t i) { return std::stoi(args.at(i)); };
    if (args.size() == 4 && args[0] == "layout") {
        const int64_t A = arg(1);
        const int B = arg(2), K = arg(3);
        const std::vector<float> src = read_floats(size_t(A * B * K));
        if (src.empty()) return 2;
        std::vector<float> dst(src.size());
        kokoro::ops::conv_weight_to_device_layout(src.data(), dst.data(), A, B, K);
        write(dst.data(), dst.size());
        return 0;
    }
    if (args.size() == 5 && args[0] == "half") {
        const int64_t A = arg(1);
        const int K = arg(2), B = arg(3);
        const kokoro::ops::HalfOperands form = args[4] == "split" ? kokoro::ops::HalfOperands::kSplit
                                                                  : kokoro::ops::HalfOperands::kRounded;
        const std::vector<float> src = read_floats(size_t(A * K * B));
        if (src.empty()) return 2;
        std::vector<__half> dst(size_t(A * K * kokoro::ops::half_rows_pitch(B) *
                                       kokoro::ops::half_parts(form)));
        const float scale = kokoro::ops::conv_weight_to_half_rows(src.data(), dst.data(), A, K, B,
                                                                  form);
        write(&scale, 1);
        write(dst.data(), dst.size());
        return 0;
    }
    if (args.size() == 6 && args[0] == "polyphase") {
        const int Cout = arg(1), K = arg(2), Cin = arg(3), stride = arg(4), pad = arg(5);
        const std::vector<float> src = read_floats(size_t(Cout) * K * Cin);
        if (src.empty()) return 2;
        std::vector<__half> dst(
            size_t(kokoro::ops::conv_weight_polyphase_halves(Cout, K, Cin, stride, pad)));
        const float scale = kokoro::ops::conv_weight_to_polyphase_half_rows(
            src.data(), dst.data(), Cout, K, Cin, stride, pad);
        write(&scale, 1);
        write(dst.data(), dst.size());
        return 0;
    }
    std::fprintf(stderr, "usage: see the header comment\n");
    return 2;
}
