// Host side of the TMA copies (mma.cuh has the device side): the tensor maps
// of FP16 operands that the tensor-core convs' (ops/conv/) and linear.cu's wgmma kernels take as
// __grid_constant__ parameters, encoded by the driver's
// cuTensorMapEncodeTiled.
#pragma once

#include <string>

#include <cuda.h>  // CUtensorMap
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kokoro/check.h"

namespace kokoro::ops {

// cuTensorMapEncodeTiled, found through the runtime (no link to the driver
// library).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline EncodeTiled encode_tiled() {
    static const EncodeTiled fn = [] {
        void* entry = nullptr;
        cudaDriverEntryPointQueryResult found{};
        KOKORO_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000,
                                                           cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || entry == nullptr) {
            throw CudaError("the CUDA driver lacks cuTensorMapEncodeTiled: install an NVIDIA "
                            "driver for CUDA 12 or newer");
        }
        return reinterpret_cast<EncodeTiled>(entry);
    }();
    return fn;
}

// A TMA map over an FP16 tensor of kRank dimensions (innermost first),
// dense, or with its innermost rows first_pitch elements apart; its boxes
// land in wgmma's 128-byte swizzle (or, swizzle false, dense); coordinates
// outside the tensor come in as zeros.
template <int kRank>
CUtensorMap tensor_map(const char* what, const __half* base, const cuuint64_t (&dims)[kRank],
                       const cuuint32_t (&box)[kRank], bool swizzle = true,
                       cuuint64_t first_pitch = 0) {
    cuuint64_t strides[kRank - 1];  // bytes, of dimensions 1 ..
    cuuint64_t stride = sizeof(__half);
    for (int i = 0; i + 1 < kRank; ++i) {
        strides[i] = stride *= i == 0 && first_pitch > 0 ? first_pitch : dims[i];
    }
    cuuint32_t element_strides[kRank];
    for (cuuint32_t& e : element_strides) e = 1;
    CUtensorMap map{};
    const CUresult status = encode_tiled()(
        &map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, kRank, const_cast<__half*>(base), dims, strides,
        box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (status != CUDA_SUCCESS) {
        throw CudaError(std::string(what) + " tensor map: cuTensorMapEncodeTiled failed with " +
                        "CUresult " + std::to_string(int(status)));
    }
    return map;
}

}  // namespace kokoro::ops
