// Linear layers and the row-major GEMM wrapper every GEMM of the engine goes
// through. cuBLAS is column-major; a row-major C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T, so the wrapper swaps the operands and
// keeps each op flag (a row-major matrix read column-major is its transpose).
// The bias of a linear layer is one extra pass over y (a broadcast add along
// rows); everything stays fp32 (the handle's default math, no TF32).
#include "kokoro/check.h"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

// y[r, c] += b[c] for a [rows, cols] matrix.
__global__ void add_bias_columns_kernel(float* y, const float* b, int64_t n, int cols) {
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i < n) y[i] += b[i % cols];
}

}  // namespace

void matmul(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, const float* A,
            int lda, const float* B, int ldb, float beta, float* C, int ldc, cudaStream_t stream) {
    const float alpha = 1.f;
    KOKORO_CUBLAS_CHECK(cublasSetStream(handle, stream));
    KOKORO_CUBLAS_CHECK(cublasSgemm(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb,
                                    A, lda, &beta, C, ldc));
}

void linear(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
            int rows, int in, int out, cudaStream_t stream, float beta) {
    matmul(handle, false, true, rows, out, in, x, in, w, in, beta, y, out, stream);
    if (b != nullptr) {
        const int64_t n = int64_t(rows) * out;
        add_bias_columns_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(y, b, n, out);
        KOKORO_CHECK_LAUNCH("add_bias_columns_kernel");
    }
}

}  // namespace kokoro::ops
