// One value as split FP16 operands, on the device and on the host (the
// weights are split at upload); host compilers see it too.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace kokoro {

// v as split FP16 operands (ops::HalfOperands::kSplit): hi = fp16(v), lo =
// fp16(v - hi).
__host__ __device__ inline void split_half(float v, __half& hi, __half& lo) {
    hi = __float2half_rn(v);
    lo = __float2half_rn(v - __half2float(hi));
}

}  // namespace kokoro
