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
// Elsewhere (older GPUs, or code built for them) launch_dependent is a
// plain launch, and so it is on a host thread whose work shares the GPU
// (SharedGpu): a batch's lanes, where kernels scheduled early only hold SMs
// that the other lanes' kernels could use.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "kokoro/check.h"
#include "kokoro/shared_gpu.h"

namespace kokoro {

// The dynamic shared memory a launch may use without opting in to more
// (cudaFuncAttributeMaxDynamicSharedMemorySize).
constexpr size_t kDefaultSharedBytes = 48 * 1024;

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

// Whether `kernel` may be launched as a dependent on the current device: the
// GPU supports it (compute capability 9.0 or newer) and the kernel's code
// for it was compiled for sm_90 or newer (from PTX or SASS), so that its
// await_producers() is not compiled out. Cached per kernel and device.
inline bool dependent_launch_allowed(const void* kernel) {
    int device = 0;
    KOKORO_CUDA_CHECK(cudaGetDevice(&device));
    static std::mutex mutex;
    static std::map<std::pair<const void*, int>, bool> known;
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = known.find({kernel, device});
    if (it != known.end()) return it->second;
    int major = 0;
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    cudaFuncAttributes attributes{};
    KOKORO_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    const bool allowed = major >= 9 && attributes.ptxVersion >= 90;
    known[{kernel, device}] = allowed;
    return allowed;
}

// kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent
// launch where the GPU supports it and this thread has them on; launch
// errors are checked, named.
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
    config.numAttrs =
        !gpu_shared() && dependent_launch_allowed(reinterpret_cast<const void*>(kernel))
            ? 1
            : 0;
    const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
    if (status != cudaSuccess) check_cuda(status, (std::string("launch of ") + name).c_str());
}

}  // namespace kokoro
