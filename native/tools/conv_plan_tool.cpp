// Host-only driver of the tensor-core convs' launch plan
// (native/ops/conv/igemm_plan.h), for tests/test_conv_plan.py: no GPU
// needed, only the CUDA headers. Prints one line per command:
//   conv_plan_tool plan SMS CIN COUT PHASES TOUT SPLIT STREAMS
//       -> "tile splits chunks_per_split row_tiles" (SPLIT 1: split operands)
//   conv_plan_tool fits SMEM_PER_SM SMEM
//       -> "1" where two blocks of SMEM bytes fit an SM, else "0"
#include <cstdio>
#include <string>
#include <vector>

#include "../ops/conv/igemm_plan.h"

int main(int argc, char** argv) {
    namespace igemm = kokoro::ops::igemm;
    const std::vector<std::string> args(argv + 1, argv + argc);
    auto arg = [&](size_t i) { return std::stoi(args.at(i)); };
    if (args.size() == 8 && args[0] == "plan") {
        const igemm::Gpu gpu{arg(1), 0, 0, true};
        igemm::ConvArgs a{};
        a.Cout = arg(3);
        a.phases = arg(4);
        const int row_tiles = igemm::row_tiles(a);
        const igemm::Plan p = igemm::plan(gpu, arg(2), row_tiles, arg(5), arg(6) != 0, arg(7));
        std::printf("%d %d %d %d\n", p.tile, p.splits, p.chunks_per_split, row_tiles);
        return 0;
    }
    if (args.size() == 3 && args[0] == "fits") {
        const igemm::Gpu gpu{0, 0, arg(1), true};
        std::printf("%d\n", igemm::two_blocks_fit(gpu, size_t(arg(2))) ? 1 : 0);
        return 0;
    }
    std::fprintf(stderr, "usage: see the header comment\n");
    return 2;
}
