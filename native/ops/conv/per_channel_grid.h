// The launch shape of the convs' per-channel kernels: kThreads threads
// along time per block, one grid row per channel. Shared by the fp32 convs
// (fp32_kernels.cuh, conv.cu) and the tensor-core convs' split sums
// (igemm_split_sum.cuh, conv_tensor_core.cu).
#pragma once

#include <cuda_runtime.h>

namespace kokoro::ops {
namespace {

constexpr int kThreads = 256;

inline dim3 per_channel_grid(int C, int T) { return dim3(unsigned((T + kThreads - 1) / kThreads), unsigned(C)); }

}  // namespace
}  // namespace kokoro::ops
