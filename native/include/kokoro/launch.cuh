// Programmatic dependent launch (sm_90 and newer): a kernel launched with
// launch_dependent is set up while the kernel before it on the stream
// finishes, and waits in await_producers() until its producers have
// completed and their writes are visible; in a CUDA graph this is a
// programmatic edge. It saves most of the gap between dependent kernels
// (launch and ramp-up), which adds up over the engine's ~600 kernels per
// forward pass. Every kernel launched this way MUST call await_producers()
// before it reads anything an earlier kernel wrote (in a normal launch the
// call is a no-op). A kernel may also release_dependents() at its start:
// the next kernel's blocks are then scheduled as soon as all of this one's
// have started, and wait on their SMs, which pays off only in serial chains
// of small kernels with nothing running beside them (ALBERT's), and costs
// throughput where other streams need those SMs (the generator, batches).
// On older GPUs launch_dependent is a plain launch.
#pragma once

#include <utility>

#include <cuda_runtime.h>

#include "kokoro/check.h"

namespace kokoro {

// Waits until the producing kernels have completed (header comment).
__device__ __forceinline__ void await_producers() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next dependent kernel be scheduled before this one ends.
__device__ __forceinline__ void release_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether the current device supports programmatic dependent launch.
inline bool dependent_launch_supported() {
    int device = 0, major = 0;
    KOKORO_CUDA_CHECK(cudaGetDevice(&device));
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9;
}

// kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent
// launch where the GPU supports it; launch errors are checked, named.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, const char* name, Args&&... args) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = &attr;
    config.numAttrs = dependent_launch_supported() ? 1 : 0;
    const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
    if (status != cudaSuccess) check_cuda(status, (std::string("launch of ") + name).c_str());
}

}  // namespace kokoro
