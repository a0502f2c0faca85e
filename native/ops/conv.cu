// 1-D convolutions on channels-first [C, T] tensors. Weights come with the
// kernel axis in the middle (ops.h): Conv1d [Cout, K, Cin/groups],
// ConvTranspose1d [Cin, K, Cout/groups], so that one tap of every output
// channel is a [Cout, Cin] matrix with row pitch K * Cin.
//
// This file: the fp32 convs (cuBLAS GEMMs, direct and pointwise kernels)
// and the output lengths every conv shares. The tensor-core convs' host
// side (argument checks, launch plan, split sums) is conv_tensor_core.cu,
// their kernels conv/igemm_*.cuh, compiled in conv_igemm_*.cu; the host-side
// weight relayouts are conv_relayout.cu.
//
// Conv1d, dense, stride 1, on cuBLAS GEMMs (the convs without a tensor-core
// weight: fewer than 32 input channels), where im2col would take more than
// one chunk (long inputs): per-tap GEMMs, no im2col (shorter ones run as the
// strided convs below). Per time chunk of n outputs, taps grouped by
// alignment class r = (k * dil) mod 4: the input window with its zero
// padding is copied once per class, shifted by r (win[ci, j] = xpad[ci, t0 +
// r + j], row pitch a multiple of 4 floats), then each tap of the class, k *
// dil = 4q + r, is one GEMM
//   acc[Cout, n] (+)= w_k[Cout, Cin] @ win[:, 4q : 4q + n]
// (beta 0 for the first tap, 1 after). Every base and pitch is then 16-byte
// aligned where Cin % 4 == 0, so cuBLAS can pick its Hopper kernels. Chunks
// bound acc and win, which then stay in L2 across the taps. One epilogue
// pass writes y = acc + bias + residual.
//
// Conv1d, pointwise (K = 1, stride 1) with few input channels (the last
// noise conv, 22 -> 128 at the audio frame rate): one memory-bound pass in
// fp32 (conv1d_pointwise_kernel), the block's time tile of x and all of w
// in shared memory, y = b + w x (+ residual) written once, with y's
// statistics partials for the AdaIN after it (a GEMM, a bias pass and
// AdaIN's statistics pass read or wrote y three times).
//
// Conv1d, dense, strided (the noise convs), and stride-1 convs whose im2col
// fits one chunk (short inputs): im2col into `scratch` with
// tap-major rows (cols[k * Cin + ci, t] = xpad[ci, t * stride + k * dil], so
// w is the [Cout, K * Cin] GEMM operand as stored), one GEMM per time chunk,
// then the epilogue for bias and residual; a residual that is y itself folds
// into the GEMM as beta = 1. 1x1 stride-1 convs multiply x directly.
//
// ConvTranspose1d, dense, off the tensor cores: one GEMM puts every tap of
// every input step in cols[k * Cout + co, j] = sum_ci w[ci, k, co] x[ci, j];
// a gather kernel then overlap-adds, each output t reading the (at most
// ceil(K / stride)) taps that land on it, so no atomics and a fixed
// summation order.
//
// Grouped (the depthwise upsampler) and tiny convs (F0_conv: 1 channel, k3)
// run as a direct kernel, one thread per output element, in fp32 whatever
// the GemmMath (it applies to the GEMMs only). Where a tensor-core conv reads
// the depthwise upsampler's output, the upsampler writes that conv's half
// rows itself (conv_transpose1d_depthwise_half_rows: the same fp32 values,
// computed inside the half-rows pass's tiles).
#include <algorithm>
#include <cstdint>

#include "kokoro/channel_stats.cuh"
#include "kokoro/check.h"
#include "kokoro/half_rows.cuh"
#include "kokoro/launch.cuh"
#include "kokoro/ops.h"

#include "conv/per_channel_grid.h"
#include "conv/fp32_kernels.cuh"

namespace kokoro::ops {

int conv1d_stats_parts(int Cin, int Cout, int Tin, int K, int stride, int pad, int groups) {
    const int Tout = conv1d_out_len(Tin, K, stride, pad, 1);
    if (Cout == 0 || Tout <= 0 || !conv1d_uses_pointwise(Cin, Cout, K, stride, pad, groups)) {
        return 0;
    }
    return (Tout + kPointwiseTile - 1) / kPointwiseTile;
}

int conv1d_out_len(int Tin, int K, int stride, int pad, int dilation) {
    return (Tin + 2 * pad - dilation * (K - 1) - 1) / stride + 1;
}

int conv_transpose1d_out_len(int Tin, int K, int stride, int pad, int output_padding) {
    return (Tin - 1) * stride - 2 * pad + (K - 1) + output_padding + 1;
}

int64_t conv1d_scratch_floats(int Cin, int Cout, int Tin, int K, int stride, int pad,
                              int dilation, int groups) {
    if (!conv1d_uses_gemm(Cin, K, groups) || conv1d_is_pointwise(K, stride, pad)) return 0;
    const int Tout = conv1d_out_len(Tin, K, stride, pad, dilation);
    if (Tout <= 0) return 0;
    if (conv1d_uses_taps(Cin, K, stride, pad, Tout)) {
        const TapChunks chunks = tap_chunks(Cin, Cout, Tout, K, dilation);
        return int64_t(Cout) * chunks.n + int64_t(Cin) * chunks.ldx;
    }
    const int reduction = Cin * K;
    return int64_t(reduction) * std::min(Tout, im2col_chunk_cols(reduction));
}

int64_t conv_transpose1d_scratch_floats(int Cin, int Cout, int Tin, int K, int groups) {
    return conv_transpose1d_uses_gemm(Cin, groups) ? int64_t(Cout) * K * Tin : 0;
}

void conv1d(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
            int Cin, int Cout, int Tin, int K, int stride, int pad, int dilation, int groups,
            const float* residual, float* scratch, cudaStream_t stream, GemmMath math,
            double* stats) {
    const int Tout = conv1d_out_len(Tin, K, stride, pad, dilation);
    if (Cout == 0 || Tout <= 0) return;
    // The pointwise pass's time tiles, one statistics partial each (0: not
    // that pass).
    const int pointwise_tiles = conv1d_stats_parts(Cin, Cout, Tin, K, stride, pad, groups);
    if (stats != nullptr && pointwise_tiles == 0) {
        throw CudaError("conv1d: statistics asked of a conv that gives none (check "
                        "conv1d_stats_parts first)");
    }
    if (pointwise_tiles > 0) {
        launch_dependent(conv1d_pointwise_kernel, dim3(unsigned(pointwise_tiles)),
                         dim3(kThreads), pointwise_smem_bytes(Cin, Cout), stream,
                         "conv1d_pointwise_kernel", x, w, b, y, Cin, Cout, Tout, residual, stats);
        return;
    }
    if (!conv1d_uses_gemm(Cin, K, groups)) {
        launch_dependent(conv1d_direct_kernel, per_channel_grid(Cout, Tout), dim3(kThreads),
                         0, stream, "conv1d_direct_kernel", x, w, b, y, Cin, Cout, Tin, Tout, K,
                         stride, pad, dilation, groups, residual);
        return;
    }
    if (conv1d_uses_taps(Cin, K, stride, pad, Tout)) {
        conv1d_taps(handle, x, w, b, y, Cin, Cout, Tin, Tout, K, pad, dilation, residual, scratch,
                    stream, math);
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
            launch_dependent(im2col_kernel, per_channel_grid(reduction, n), dim3(kThreads), 0,
                             stream, "im2col_kernel", x, scratch, Cin, Tin, stride, pad, dilation,
                             t0, n);
            matmul(handle, false, false, Cout, n, reduction, w, reduction, scratch, n, beta, y + t0,
                   Tout, stream, math);
        }
    }
    const float* residual_pass = residual_in_place ? nullptr : residual;
    if (b != nullptr || residual_pass != nullptr) {
        launch_epilogue(y, Tout, b, residual_pass, y, Cout, Tout, Tout, stream);
    }
}

void conv_transpose1d_depthwise_half_rows(const float* x, const float* w, const float* b,
                                          __half* rows, int C, int Tin, int K, int stride,
                                          int pad, int output_padding, HalfOperands form,
                                          cudaStream_t stream) {
    const int Tout = conv_transpose1d_out_len(Tin, K, stride, pad, output_padding);
    if (C == 0 || Tout <= 0) return;
    launch_dependent(depthwise_transposed_half_rows_kernel, half_rows_grid(C, Tout),
                     dim3(kHalfRowsThreads), 0, stream, "depthwise_transposed_half_rows_kernel",
                     DepthwiseTransposedSource{x, w, b, Tin, Tout, K, stride, pad}, rows,
                     half_rows_lo(rows, C, Tout, form), C);
}

void conv_transpose1d(cublasHandle_t handle, const float* x, const float* w, const float* b,
                      float* y, int Cin, int Cout, int Tin, int K, int stride, int pad,
                      int output_padding, int groups, float* scratch, cudaStream_t stream,
                      GemmMath math) {
    const int Tout = conv_transpose1d_out_len(Tin, K, stride, pad, output_padding);
    if (Cout == 0 || Tout <= 0) return;
    if (!conv_transpose1d_uses_gemm(Cin, groups)) {
        launch_dependent(conv_transpose1d_direct_kernel, per_channel_grid(Cout, Tout),
                         dim3(kThreads), 0, stream, "conv_transpose1d_direct_kernel", x, w, b, y,
                         Cin, Cout, Tin, Tout, K, stride, pad, groups);
        return;
    }
    matmul(handle, true, false, K * Cout, Tin, Cin, w, K * Cout, x, Tin, 0.f, scratch, Tin, stream,
           math);
    launch_dependent(col2im_kernel, per_channel_grid(Cout, Tout), dim3(kThreads), 0, stream,
                     "col2im_kernel", scratch, b, y, Cout, Tin, Tout, K, stride, pad);
}

}  // namespace kokoro::ops
