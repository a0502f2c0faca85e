// The tensor-core kernels of the conv1ds with an FP16 y (conv1d_half_rows),
// from half rows or a raw input: the dispatch's (conv/igemm_dispatch.h)
// launch_mapped instances with kHalfOut and no phases, and with them every
// kernel instance they launch (mma.sync and wgmma: both tiles, in-block
// splits, in-flight stages).
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

template void launch_mapped<false, true, false>(const Gpu&, const Plan&, HalfKernel,
                                                const ConvArgs&, const ChannelApply*,
                                                cudaStream_t);
template void launch_mapped<false, true, true>(const Gpu&, const Plan&, HalfKernel,
                                               const ConvArgs&, const ChannelApply*,
                                               cudaStream_t);

}  // namespace kokoro::ops::igemm
