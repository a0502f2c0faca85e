// Status checking for every CUDA and cuBLAS call. A failure becomes a
// kokoro::CudaError naming the operation (and, for allocations, the size);
// the Python binding turns it into kokoro_gpu.BackendError.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace kokoro {

class CudaError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

inline void check_cuda(cudaError_t status, const char* what) {
    if (status != cudaSuccess) {
        throw CudaError(std::string(what) + " failed: " + cudaGetErrorString(status));
    }
}

inline void check_cublas(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        throw CudaError(std::string(what) + " failed: cuBLAS status " +
                        std::to_string(static_cast<int>(status)));
    }
}

// cudaMalloc with an error that says how much was asked for.
inline void* device_alloc(size_t bytes, const char* what) {
    void* p = nullptr;
    cudaError_t status = cudaMalloc(&p, bytes);
    if (status != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free allocation error
        throw CudaError(std::string("allocating ") + std::to_string(bytes) + " bytes of GPU memory for " +
                        what + " failed: " + cudaGetErrorString(status));
    }
    return p;
}

// cudaHostAlloc (page-locked host memory) with the same kind of error.
inline void* pinned_alloc(size_t bytes, const char* what) {
    void* p = nullptr;
    cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (status != cudaSuccess) {
        cudaGetLastError();
        throw CudaError(std::string("allocating ") + std::to_string(bytes) +
                        " bytes of page-locked host memory for " + what +
                        " failed: " + cudaGetErrorString(status));
    }
    return p;
}
// Frees pinned_alloc's memory (a std::unique_ptr deleter).
struct PinnedFree {
    void operator()(void* p) const noexcept { static_cast<void>(cudaFreeHost(p)); }
};

}  // namespace kokoro

#define KOKORO_CUDA_CHECK(call) ::kokoro::check_cuda((call), #call)
#define KOKORO_CUBLAS_CHECK(call) ::kokoro::check_cublas((call), #call)
// After every kernel launch: configuration errors surface here, named.
#define KOKORO_CHECK_LAUNCH(name) ::kokoro::check_cuda(cudaGetLastError(), "launch of " name)
