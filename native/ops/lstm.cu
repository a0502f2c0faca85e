// Bidirectional single-layer LSTM.
//
// The input projection of both directions is one GEMM (w_ih [2, 4H, In] is a
// [8H, In] matrix; the folded bias rides along): gx [T, 8H] in `scratch`.
// The recurrence is one launch with one thread block per direction that
// loops over all T steps on the device: h, c and the 4H gate
// pre-activations live in shared memory; each warp computes whole gate rows
// of W_hh @ h with lanes striding the (contiguous) row, so W_hh streams from
// L2 coalesced; then one thread per hidden unit applies the cell update.
// Gate order i, f, g, o (PyTorch).
#include <cmath>

#include "kokoro/check.h"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kThreads = 1024;

__device__ float sigmoid(float x) {
    const float e = expf(-fabsf(x));
    return x >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
}

// blockIdx.x = direction (0 forward, 1 reverse). Shared: h [H], c [H], gates [4H].
__global__ void lstm_recurrence_kernel(const float* gx, const float* w_hh, float* out, int T,
                                       int H) {
    extern __shared__ float shared[];
    float* h = shared;
    float* c = h + H;
    float* gates = c + H;
    const int dir = blockIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const int G = 4 * H;
    const float* w = w_hh + int64_t(dir) * G * H;
    for (int j = threadIdx.x; j < H; j += blockDim.x) h[j] = c[j] = 0.f;
    __syncthreads();
    for (int step = 0; step < T; ++step) {
        const int t = dir == 0 ? step : T - 1 - step;
        const float* gx_t = gx + int64_t(t) * 2 * G + int64_t(dir) * G;
        for (int r = warp; r < G; r += nwarps) {
            const float* wr = w + int64_t(r) * H;
            float acc = 0.f;
            for (int k = lane; k < H; k += 32) acc += wr[k] * h[k];
            for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
            if (lane == 0) gates[r] = gx_t[r] + acc;
        }
        __syncthreads();
        for (int j = threadIdx.x; j < H; j += blockDim.x) {
            const float i_g = sigmoid(gates[j]);
            const float f_g = sigmoid(gates[H + j]);
            const float g_g = tanhf(gates[2 * H + j]);
            const float o_g = sigmoid(gates[3 * H + j]);
            const float cj = f_g * c[j] + i_g * g_g;
            const float hj = o_g * tanhf(cj);
            c[j] = cj;
            h[j] = hj;
            out[int64_t(t) * 2 * H + int64_t(dir) * H + j] = hj;
        }
        __syncthreads();
    }
}

}  // namespace

int64_t lstm_scratch_floats(int T, int H) { return int64_t(T) * 8 * H; }

void lstm_bidirectional(cublasHandle_t handle, const float* x, const float* w_ih,
                        const float* w_hh, const float* b, float* out, int T, int In, int H,
                        float* scratch, cudaStream_t stream) {
    if (T == 0) return;
    linear(handle, x, w_ih, b, scratch, T, In, 8 * H, stream);
    const size_t shared_bytes = size_t(6) * H * sizeof(float);
    if (shared_bytes > 48 * 1024) {
        KOKORO_CUDA_CHECK(cudaFuncSetAttribute(lstm_recurrence_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(shared_bytes)));
    }
    lstm_recurrence_kernel<<<2, kThreads, shared_bytes, stream>>>(scratch, w_hh, out, T, H);
    KOKORO_CHECK_LAUNCH("lstm_recurrence_kernel");
}

}  // namespace kokoro::ops
