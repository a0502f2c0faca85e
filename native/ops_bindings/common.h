// What every family of the ops' test bindings shares (ops_bindings/*.cpp):
// the array types, the one test stream and cuBLAS handle, device arrays,
// argument checks and the FP16 uploads and downloads.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kokoro/bindings.h"
#include "kokoro/check.h"
#include "kokoro/ops.h"
#include "kokoro/shared_gpu.h"

namespace py = pybind11;

namespace kokoro::test_ops {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using OptionalFloat = std::optional<FloatArray>;
using DoubleArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

// One stream and one cuBLAS handle for every test call, created on first use
// and deliberately never destroyed (the CUDA context may already be gone at
// interpreter exit).
struct TestContext {
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
};

inline TestContext& context() {
    static TestContext* ctx = [] {
        auto* c = new TestContext;
        KOKORO_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
        KOKORO_CUBLAS_CHECK(cublasCreate(&c->blas));
        KOKORO_CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
        return c;
    }();
    return *ctx;
}

inline cudaStream_t stream() { return context().stream; }

// A device array of T, freed on scope exit. cudaFree need not wait for work still on the
// (non-blocking) test stream: keep an array alive until a download has synchronised it.
template <typename T>
class DeviceArray {
public:
    explicit DeviceArray(int64_t n) : n_(n) {
        if (n_ > 0) ptr_ = static_cast<T*>(device_alloc(size_t(n_) * sizeof(T), "op test buffer"));
    }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    ~DeviceArray() { (void)cudaFree(ptr_); }  // destructors cannot throw

    // Uploaded copy of a host array.
    static DeviceArray from(const py::array_t<T, py::array::c_style | py::array::forcecast>& a) {
        DeviceArray d(int64_t(a.size()));
        if (d.n_ > 0) {
            KOKORO_CUDA_CHECK(cudaMemcpyAsync(d.ptr_, a.data(), size_t(d.n_) * sizeof(T),
                                              cudaMemcpyHostToDevice, stream()));
        }
        return d;
    }
    // Output buffer, poisoned.
    static DeviceArray poisoned(int64_t n) {
        DeviceArray d(n);
        if (n > 0) KOKORO_CUDA_CHECK(cudaMemsetAsync(d.ptr_, 0xFF, size_t(n) * sizeof(T), stream()));
        return d;
    }
    DeviceArray(DeviceArray&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; o.n_ = 0; }

    T* get() const { return ptr_; }
    // Synchronises the test stream, then copies back with the given shape.
    py::array_t<T> download(std::vector<py::ssize_t> shape) const {
        KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream()));
        py::array_t<T> out(shape);
        if (n_ > 0) {
            KOKORO_CUDA_CHECK(cudaMemcpy(out.mutable_data(), ptr_, size_t(n_) * sizeof(T),
                                         cudaMemcpyDeviceToHost));
        }
        return out;
    }

private:
    T* ptr_ = nullptr;
    int64_t n_ = 0;
};

using DFloat = DeviceArray<float>;
using DInt = DeviceArray<int32_t>;

// Uploads an optional array; the pointer stays null when absent.
struct OptionalDevice {
    std::optional<DFloat> buffer;
    explicit OptionalDevice(const OptionalFloat& a) {
        if (a) buffer.emplace(DFloat::from(*a));
    }
    const float* get() const { return buffer ? buffer->get() : nullptr; }
};

inline void require(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
}

inline int dim(const py::array& a, int axis) { return int(a.shape(axis)); }

inline void require_ndim(const py::array& a, int ndim, const char* name) {
    require(a.ndim() == ndim, std::string(name) + " must have " + std::to_string(ndim) + " dims");
}

// A conv weight [A, B, K] in PyTorch's layout, relaid as the ops' [A, K, B].
inline FloatArray relaid_conv_weight(const FloatArray& w) {
    FloatArray relaid({w.shape(0), w.shape(2), w.shape(1)});
    ops::conv_weight_to_device_layout(w.data(), relaid.mutable_data(), dim(w, 0), dim(w, 1),
                                      dim(w, 2));
    return relaid;
}

inline DFloat conv_weight(const FloatArray& w) { return DFloat::from(relaid_conv_weight(w)); }

// FP16 weights laid out on the host, on the device: copied on the test
// stream, as a synchronous cudaMemcpy from pageable memory may return before
// its DMA lands, which the (non-blocking) test stream would not wait for.
inline DeviceArray<__half> upload_halves(const std::vector<__half>& host) {
    DeviceArray<__half> d(int64_t(host.size()));
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(d.get(), host.data(), host.size() * sizeof(__half),
                                      cudaMemcpyHostToDevice, stream()));
    return d;
}

// The same weight as the tensor-core conv's FP16 [A, K, half_rows_pitch(B)]
// (per part of `form`), with its w_scale.
struct HalfWeight {
    DeviceArray<__half> w;
    float scale;
};
inline HalfWeight conv_weight_half(const FloatArray& w, ops::HalfOperands form) {
    const int A = dim(w, 0), B = dim(w, 1), K = dim(w, 2);
    std::vector<__half> host(size_t(ops::half_parts(form)) * A * K * ops::half_rows_pitch(B));
    const float scale =
        ops::conv_weight_to_half_rows(relaid_conv_weight(w).data(), host.data(), A, K, B, form);
    return {upload_halves(host), scale};
}

// A linear weight [out, in] as the split linear's FP16 [2, out, split_pitch(in)],
// with its w_scale.
inline HalfWeight linear_weight_split(const FloatArray& w) {
    const int out = dim(w, 0), in = dim(w, 1);
    std::vector<__half> host(size_t(2) * out * ops::split_pitch(in));
    const float scale = ops::linear_weight_to_split_half(w.data(), host.data(), out, in);
    return {upload_halves(host), scale};
}

// FP16 device values downloaded as float32 (every FP16 value is exact in
// it), shaped `shape`.
inline py::array_t<float> download_halves(const DeviceArray<__half>& d,
                                          std::vector<py::ssize_t> shape) {
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream()));
    py::array_t<float> out(shape);
    std::vector<__half> host(size_t(out.size()));
    KOKORO_CUDA_CHECK(cudaMemcpy(host.data(), d.get(), host.size() * sizeof(__half),
                                 cudaMemcpyDeviceToHost));
    float* o = out.mutable_data();
    for (size_t i = 0; i < host.size(); ++i) o[i] = __half2float(host[i]);
    return out;
}

// x [C, T] rounded to FP16 on the device as the engine's FP16 channels-first
// tensors are stored (rows at ops::half_channels_pitch(T), the padding NaN:
// never read as values).
inline DeviceArray<__half> upload_half_channels(const FloatArray& x) {
    const int C = dim(x, 0), T = dim(x, 1), pitch = ops::half_channels_pitch(T);
    std::vector<__half> host(size_t(C) * pitch, __float2half_rn(NAN));
    for (int c = 0; c < C; ++c) {
        for (int t = 0; t < T; ++t) {
            host[size_t(c) * pitch + t] = __float2half_rn(x.data()[int64_t(c) * T + t]);
        }
    }
    return upload_halves(host);
}

// Such a tensor downloaded as float32 [C, T].
inline py::array_t<float> download_half_channels(const DeviceArray<__half>& d, int C, int T) {
    const int pitch = ops::half_channels_pitch(T);
    const py::array_t<float> padded = download_halves(d, {C, pitch});
    py::array_t<float> out({C, T});
    for (int c = 0; c < C; ++c) {
        std::copy_n(padded.data() + int64_t(c) * pitch, T, out.mutable_data() + int64_t(c) * T);
    }
    return out;
}

// Half rows [T, ld] ([2, T, ld]: hi, lo when split) downloaded as float32.
inline py::array_t<float> download_half_rows(const DeviceArray<__half>& rows, int T, int ld,
                                      ops::HalfOperands form) {
    const int parts = ops::half_parts(form);
    if (parts == 1) return download_halves(rows, {T, ld});
    return download_halves(rows, {parts, T, ld});
}

inline ops::HalfOperands half_form(bool split) {
    return split ? ops::HalfOperands::kSplit : ops::HalfOperands::kRounded;
}

// The tests' choice of tensor-core kernel: the best for the GPU, or mma.sync.
inline ops::HalfKernel half_kernel(bool mma_sync) {
    return mma_sync ? ops::HalfKernel::kMmaSync : ops::HalfKernel::kBest;
}

}  // namespace kokoro::test_ops
