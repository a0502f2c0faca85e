// 1-D convolutions on channels-first [C, T] tensors.
//
// Conv1d, dense (groups 1) with a reduction Cin * K of at least
// kMinGemmReduction: im2col into `scratch` (cols[ci * K + k, t] =
// xpad[ci, t * stride + k * dil], the PyTorch weight [Cout, Cin, K] is then
// already the [Cout, Cin * K] GEMM operand), one cuBLAS GEMM per time chunk
// (chunks bound the scratch on long generator sequences), then one epilogue
// pass for bias and residual. A residual that is y itself folds into the GEMM
// as beta = 1. 1x1 stride-1 convs skip im2col and multiply x directly.
//
// ConvTranspose1d, dense: one GEMM puts every tap of every input step in
// cols[co * K + k, j] = sum_ci w[ci, co, k] x[ci, j]; a gather kernel then
// overlap-adds, each output t reading the (at most ceil(K / stride)) taps
// that land on it, so no atomics and a fixed summation order.
//
// Grouped (the depthwise upsampler) and tiny convs (F0_conv: 1 channel, k3)
// run as a direct kernel, one thread per output element, in fp32 whatever
// the GemmMath (it applies to the GEMMs only).
#include <algorithm>

#include "kokoro/check.h"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kMinGemmReduction = 32;
constexpr int64_t kIm2colChunkFloats = int64_t(1) << 23;

bool conv1d_uses_gemm(int Cin, int K, int groups) {
    return groups == 1 && Cin * K >= kMinGemmReduction;
}
bool conv1d_is_pointwise(int K, int stride, int pad) { return K == 1 && stride == 1 && pad == 0; }
int im2col_chunk_cols(int reduction) {
    return int(std::max<int64_t>(256, kIm2colChunkFloats / reduction));
}
bool conv_transpose1d_uses_gemm(int Cin, int groups) {
    return groups == 1 && Cin >= kMinGemmReduction;
}

// Calls fn(k, j) for every tap k of a transposed conv whose input step j
// lands on output t (t = j * stride - pad + k), k ascending.
template <typename Fn>
__device__ void for_each_transposed_tap(int t, int K, int stride, int pad, int Tin, Fn fn) {
    const int p = t + pad;
    for (int k = p % stride; k < K && k <= p; k += stride) {
        const int j = (p - k) / stride;
        if (j < Tin) fn(k, j);
    }
}

// cols[r, tt] for r = ci * K + k and tt in [0, n): x at column
// (t0 + tt) * stride - pad + k * dil, zero outside [0, Tin). grid.y = r.
__global__ void im2col_kernel(const float* x, float* cols, int Tin, int K, int stride, int pad,
                              int dilation, int t0, int n) {
    const int tt = blockIdx.x * blockDim.x + threadIdx.x;
    if (tt >= n) return;
    const int r = blockIdx.y, ci = r / K, k = r % K;
    const int src = (t0 + tt) * stride - pad + k * dilation;
    cols[int64_t(r) * n + tt] = src >= 0 && src < Tin ? x[int64_t(ci) * Tin + src] : 0.f;
}

// y[c, t] += b[c] + residual[c, t] (either may be null). grid.y = c.
__global__ void bias_residual_kernel(float* y, const float* b, const float* residual, int T) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const int64_t i = int64_t(blockIdx.y) * T + t;
    float v = y[i];
    if (b != nullptr) v += b[blockIdx.y];
    if (residual != nullptr) v += residual[i];
    y[i] = v;
}

// Direct grouped conv1d, one thread per y[co, t]. grid.y = co.
__global__ void conv1d_direct_kernel(const float* x, const float* w, const float* b, float* y,
                                     int Cin, int Cout, int Tin, int Tout, int K, int stride,
                                     int pad, int dilation, int groups, const float* residual) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= Tout) return;
    const int co = blockIdx.y;
    const int cin_g = Cin / groups, ci0 = co / (Cout / groups) * cin_g;
    const float* wr = w + int64_t(co) * cin_g * K;
    float acc = 0.f;
    for (int ci = 0; ci < cin_g; ++ci) {
        const float* xr = x + int64_t(ci0 + ci) * Tin;
        for (int k = 0; k < K; ++k) {
            const int src = t * stride - pad + k * dilation;
            if (src >= 0 && src < Tin) acc += wr[ci * K + k] * xr[src];
        }
    }
    if (b != nullptr) acc += b[co];
    const int64_t i = int64_t(co) * Tout + t;
    if (residual != nullptr) acc += residual[i];
    y[i] = acc;
}

// Overlap-add of the per-tap GEMM output cols [Cout * K, Tin] (+ bias). grid.y = co.
__global__ void col2im_kernel(const float* cols, const float* b, float* y, int Tin, int Tout,
                              int K, int stride, int pad) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= Tout) return;
    const int co = blockIdx.y;
    const float* cr = cols + int64_t(co) * K * Tin;
    float acc = 0.f;
    for_each_transposed_tap(t, K, stride, pad, Tin,
                            [&](int k, int j) { acc += cr[int64_t(k) * Tin + j]; });
    if (b != nullptr) acc += b[co];
    y[int64_t(co) * Tout + t] = acc;
}

// Direct grouped transposed conv, one thread per y[co, t]. grid.y = co.
__global__ void conv_transpose1d_direct_kernel(const float* x, const float* w, const float* b,
                                               float* y, int Cin, int Cout, int Tin, int Tout,
                                               int K, int stride, int pad, int groups) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= Tout) return;
    const int co = blockIdx.y;
    const int cout_g = Cout / groups, cin_g = Cin / groups;
    const int g = co / cout_g, co_l = co % cout_g;
    float acc = 0.f;
    for_each_transposed_tap(t, K, stride, pad, Tin, [&](int k, int j) {
        for (int ci = g * cin_g; ci < (g + 1) * cin_g; ++ci) {
            acc += w[(int64_t(ci) * cout_g + co_l) * K + k] * x[int64_t(ci) * Tin + j];
        }
    });
    if (b != nullptr) acc += b[co];
    y[int64_t(co) * Tout + t] = acc;
}

dim3 per_channel_grid(int C, int T) { return dim3(unsigned((T + kThreads - 1) / kThreads), unsigned(C)); }

}  // namespace

int conv1d_out_len(int Tin, int K, int stride, int pad, int dilation) {
    return (Tin + 2 * pad - dilation * (K - 1) - 1) / stride + 1;
}

int conv_transpose1d_out_len(int Tin, int K, int stride, int pad, int output_padding) {
    return (Tin - 1) * stride - 2 * pad + (K - 1) + output_padding + 1;
}

int64_t conv1d_scratch_floats(int Cin, int Tin, int K, int stride, int pad, int dilation,
                              int groups) {
    if (!conv1d_uses_gemm(Cin, K, groups) || conv1d_is_pointwise(K, stride, pad)) return 0;
    const int reduction = Cin * K;
    const int Tout = conv1d_out_len(Tin, K, stride, pad, dilation);
    return int64_t(reduction) * std::min(Tout, im2col_chunk_cols(reduction));
}

int64_t conv_transpose1d_scratch_floats(int Cin, int Cout, int Tin, int K, int groups) {
    return conv_transpose1d_uses_gemm(Cin, groups) ? int64_t(Cout) * K * Tin : 0;
}

void conv1d(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
            int Cin, int Cout, int Tin, int K, int stride, int pad, int dilation, int groups,
            const float* residual, float* scratch, cudaStream_t stream, GemmMath math) {
    const int Tout = conv1d_out_len(Tin, K, stride, pad, dilation);
    if (Cout == 0 || Tout <= 0) return;
    if (!conv1d_uses_gemm(Cin, K, groups)) {
        conv1d_direct_kernel<<<per_channel_grid(Cout, Tout), kThreads, 0, stream>>>(
            x, w, b, y, Cin, Cout, Tin, Tout, K, stride, pad, dilation, groups, residual);
        KOKORO_CHECK_LAUNCH("conv1d_direct_kernel");
        return;
    }
    const bool residual_in_place = residual == y;
    const float beta = residual_in_place ? 1.f : 0.f;
    const int reduction = Cin * K;
    if (conv1d_is_pointwise(K, stride, pad)) {
        matmul(handle, false, false, Cout, Tout, Cin, w, Cin, x, Tin, beta, y, Tout, stream, math);
    } else {
        const int chunk = im2col_chunk_cols(reduction);
        for (int t0 = 0; t0 < Tout; t0 += chunk) {
            const int n = std::min(chunk, Tout - t0);
            im2col_kernel<<<per_channel_grid(reduction, n), kThreads, 0, stream>>>(
                x, scratch, Tin, K, stride, pad, dilation, t0, n);
            KOKORO_CHECK_LAUNCH("im2col_kernel");
            matmul(handle, false, false, Cout, n, reduction, w, reduction, scratch, n, beta, y + t0,
                   Tout, stream, math);
        }
    }
    const float* residual_pass = residual_in_place ? nullptr : residual;
    if (b != nullptr || residual_pass != nullptr) {
        bias_residual_kernel<<<per_channel_grid(Cout, Tout), kThreads, 0, stream>>>(
            y, b, residual_pass, Tout);
        KOKORO_CHECK_LAUNCH("bias_residual_kernel");
    }
}

void conv_transpose1d(cublasHandle_t handle, const float* x, const float* w, const float* b,
                      float* y, int Cin, int Cout, int Tin, int K, int stride, int pad,
                      int output_padding, int groups, float* scratch, cudaStream_t stream,
                      GemmMath math) {
    const int Tout = conv_transpose1d_out_len(Tin, K, stride, pad, output_padding);
    if (Cout == 0 || Tout <= 0) return;
    if (!conv_transpose1d_uses_gemm(Cin, groups)) {
        conv_transpose1d_direct_kernel<<<per_channel_grid(Cout, Tout), kThreads, 0, stream>>>(
            x, w, b, y, Cin, Cout, Tin, Tout, K, stride, pad, groups);
        KOKORO_CHECK_LAUNCH("conv_transpose1d_direct_kernel");
        return;
    }
    matmul(handle, true, false, Cout * K, Tin, Cin, w, Cout * K, x, Tin, 0.f, scratch, Tin, stream,
           math);
    col2im_kernel<<<per_channel_grid(Cout, Tout), kThreads, 0, stream>>>(scratch, b, y, Tin, Tout,
                                                                         K, stride, pad);
    KOKORO_CHECK_LAUNCH("col2im_kernel");
}

}  // namespace kokoro::ops
