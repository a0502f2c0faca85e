// Linear layers and the row-major GEMM wrapper every GEMM of the engine goes
// through. cuBLAS is column-major; a row-major C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T, so the wrapper swaps the operands and
// keeps each op flag (a row-major matrix read column-major is its transpose).
// matmul_batched is the same mapping on cublasSgemmStridedBatched (plain
// fp32 only). The bias of a linear layer is one extra pass over y (a
// broadcast add along rows). GemmMath::kFp32 is cublasSgemm (the handle's
// default math, no TF32); kTf32 is cublasGemmEx with
// CUBLAS_COMPUTE_32F_FAST_TF32 on the same fp32 buffers (tensor cores, fp32
// accumulation).
#include "kokoro/check.h"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

// y[r, c] += b[c] for a [rows, cols] matrix.
__global__ void add_bias_columns_kernel(float* y, const float* b, int64_t n, int cols) {
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i < n) y[i] += b[i % cols];
}

// Rebinding resets a workspace set with cublasSetWorkspace: only on a change.
void bind_stream(cublasHandle_t handle, cudaStream_t stream) {
    cudaStream_t bound = nullptr;
    KOKORO_CUBLAS_CHECK(cublasGetStream(handle, &bound));
    if (bound != stream) KOKORO_CUBLAS_CHECK(cublasSetStream(handle, stream));
}

}  // namespace

void matmul(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, const float* A,
            int lda, const float* B, int ldb, float beta, float* C, int ldc, cudaStream_t stream,
            GemmMath math) {
    const float alpha = 1.f;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    bind_stream(handle, stream);
    if (math == GemmMath::kFp32) {
        KOKORO_CUBLAS_CHECK(
            cublasSgemm(handle, op_b, op_a, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
    } else {
        KOKORO_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, N, M, K, &alpha, B, CUDA_R_32F, ldb,
                                         A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                                         CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    }
}

void matmul_batched(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K,
                    const float* A, int lda, int64_t stride_a, const float* B, int ldb,
                    int64_t stride_b, float beta, float* C, int ldc, int64_t stride_c, int batch,
                    cudaStream_t stream) {
    const float alpha = 1.f;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    bind_stream(handle, stream);
    KOKORO_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, op_b, op_a, N, M, K, &alpha, B, ldb,
                                                  stride_b, A, lda, stride_a, &beta, C, ldc,
                                                  stride_c, batch));
}

void linear(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
            int rows, int in, int out, cudaStream_t stream, float beta, GemmMath math) {
    matmul(handle, false, true, rows, out, in, x, in, w, in, beta, y, out, stream, math);
    if (b != nullptr) {
        const int64_t n = int64_t(rows) * out;
        add_bias_columns_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(y, b, n, out);
        KOKORO_CHECK_LAUNCH("add_bias_columns_kernel");
    }
}

}  // namespace kokoro::ops
