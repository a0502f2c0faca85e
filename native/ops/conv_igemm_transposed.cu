// The tensor-core kernels of the transposed convs (the output map's phases:
// conv_transpose1d_half_rows), fp32 or FP16 y: the dispatch's
// (conv/igemm_dispatch.h) launch_mapped instances with kPhases, and with
// them every kernel instance they launch (mma.sync and wgmma, both tiles).
// (One translation unit per group, so that each kernel instance is compiled
// once and the groups compile in parallel.)
#include <algorithm>
#include <cstdint>

#include "kokoro/channel_apply.cuh"
#include "kokoro/channel_stats.cuh"
#include "kokoro/check.h"
#include "kokoro/half_rows.cuh"
#include "kokoro/launch.cuh"
#include "kokoro/mma.cuh"
#include "kokoro/ops.h"
#include "kokoro/tensor_map.h"

#include "conv/igemm_traits.h"
#include "conv/igemm_plan.h"
#include "conv/igemm_dispatch.h"
#include "conv/igemm_tiles.cuh"
#include "conv/igemm_mma_sync.cuh"
#include "conv/igemm_wgmma.cuh"
#include "conv/igemm_tensor_maps.cuh"
#include "conv/igemm_launch.cuh"

namespace kokoro::ops::igemm {

template void launch_mapped<true, false, false>(const Gpu&, const Plan&, HalfKernel,
                                                const ConvArgs&, const ChannelApply*,
                                                cudaStream_t);
template void launch_mapped<true, true, false>(const Gpu&, const Plan&, HalfKernel,
                                               const ConvArgs&, const ChannelApply*,
                                               cudaStream_t);

}  // namespace kokoro::ops::igemm
