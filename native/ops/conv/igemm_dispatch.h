// The tensor-core convs' dispatch: from a call's run-time properties (the
// output map's phases, y's storage, a raw input) to one of the six compiled
// instances of launch_mapped (igemm_launch.cuh), each explicitly
// instantiated in one conv_igemm_*.cu: conv_igemm_transposed.cu (phases),
// conv_igemm_conv1d.cu (fp32 y), conv_igemm_conv1d_half_out.cu (FP16 y):
// each kernel instance is compiled once, and the three can compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "kokoro/ops.h"

#include "igemm_plan.h"
#include "igemm_traits.h"

namespace kokoro::ops::igemm {

// The kernel for the GPU, the tile, the output map (phases or not), y's
// storage (kHalfOut) and the input (kRawX): igemm_launch.cuh.
template <bool kPhases, bool kHalfOut, bool kRawX>
void launch_mapped(const Gpu& gpu, const Plan& p, HalfKernel which, const ConvArgs& a,
                   const ChannelApply* x_apply, cudaStream_t stream);
// The instances, each compiled in one translation unit:
// conv_igemm_transposed.cu (a transposed conv's phases),
extern template void launch_mapped<true, false, false>(const Gpu&, const Plan&, HalfKernel,
                                                       const ConvArgs&, const ChannelApply*,
                                                       cudaStream_t);
extern template void launch_mapped<true, true, false>(const Gpu&, const Plan&, HalfKernel,
                                                      const ConvArgs&, const ChannelApply*,
                                                      cudaStream_t);
// conv_igemm_conv1d.cu (a conv1d's fp32 y: half rows or a raw input),
extern template void launch_mapped<false, false, false>(const Gpu&, const Plan&, HalfKernel,
                                                        const ConvArgs&, const ChannelApply*,
                                                        cudaStream_t);
extern template void launch_mapped<false, false, true>(const Gpu&, const Plan&, HalfKernel,
                                                       const ConvArgs&, const ChannelApply*,
                                                       cudaStream_t);
// conv_igemm_conv1d_half_out.cu (a conv1d's FP16 y).
extern template void launch_mapped<false, true, false>(const Gpu&, const Plan&, HalfKernel,
                                                       const ConvArgs&, const ChannelApply*,
                                                       cudaStream_t);
extern template void launch_mapped<false, true, true>(const Gpu&, const Plan&, HalfKernel,
                                                      const ConvArgs&, const ChannelApply*,
                                                      cudaStream_t);

// The instance for a call (the conv's run function).
inline void launch(const Gpu& gpu, const Plan& p, HalfKernel which, const ConvArgs& a,
                   bool half_out, const ChannelApply* x_apply, cudaStream_t stream) {
    if (has_phases(a)) {
        if (half_out) {
            launch_mapped<true, true, false>(gpu, p, which, a, nullptr, stream);
        } else {
            launch_mapped<true, false, false>(gpu, p, which, a, nullptr, stream);
        }
    } else if (x_apply != nullptr) {
        if (half_out) {
            launch_mapped<false, true, true>(gpu, p, which, a, x_apply, stream);
        } else {
            launch_mapped<false, false, true>(gpu, p, which, a, x_apply, stream);
        }
    } else if (half_out) {
        launch_mapped<false, true, false>(gpu, p, which, a, nullptr, stream);
    } else {
        launch_mapped<false, false, false>(gpu, p, which, a, nullptr, stream);
    }
}

}  // namespace kokoro::ops::igemm
