// Bidirectional multi-head attention core (ALBERT), fp32, flash style: one
// block per (32-query tile, head); key/value tiles of 32 rows stream through
// shared memory and each warp keeps an online softmax (running max, running
// sum, unnormalised output) for its 4 queries, so the [T, T] score matrix is
// never stored. Within a key tile lane j scores key j (the key tile is padded
// to D + 1 columns so those reads do not bank-conflict), and lane d
// accumulates output dims d, d + 32, ... with the probabilities broadcast by
// shuffles. Masked keys get HF's additive mask (-FLT_MAX), keys past T none
// at all. head_dim up to 128.
#include <cfloat>
#include <cmath>

#include "kokoro/check.h"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kTile = 32;           // queries per block and keys per tile
constexpr int kWarps = 8;
constexpr int kQueriesPerWarp = kTile / kWarps;
constexpr int kMaxDimsPerLane = 4;  // head_dim <= 128

__global__ void attention_kernel(const float* q, const float* k, const float* v, float* out, int T,
                                 int heads, int D, int valid_len) {
    extern __shared__ float shared[];
    float* q_tile = shared;                   // [kTile][D]
    float* k_tile = q_tile + kTile * D;       // [kTile][D + 1]
    float* v_tile = k_tile + kTile * (D + 1); // [kTile][D]
    const int q0 = blockIdx.x * kTile, head = blockIdx.y;
    const int width = heads * D;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float scale_div = sqrtf(float(D));

    for (int i = threadIdx.x; i < kTile * D; i += blockDim.x) {
        const int r = i / D, d = i % D;
        q_tile[i] = q0 + r < T ? q[int64_t(q0 + r) * width + head * D + d] : 0.f;
    }
    float m[kQueriesPerWarp], l[kQueriesPerWarp], acc[kQueriesPerWarp][kMaxDimsPerLane];
    for (int u = 0; u < kQueriesPerWarp; ++u) {
        m[u] = -INFINITY;
        l[u] = 0.f;
        for (int i = 0; i < kMaxDimsPerLane; ++i) acc[u][i] = 0.f;
    }
    for (int k0 = 0; k0 < T; k0 += kTile) {
        __syncthreads();
        for (int i = threadIdx.x; i < kTile * D; i += blockDim.x) {
            const int r = i / D, d = i % D;
            const bool live = k0 + r < T;
            const int64_t src = int64_t(k0 + r) * width + head * D + d;
            k_tile[r * (D + 1) + d] = live ? k[src] : 0.f;
            v_tile[i] = live ? v[src] : 0.f;
        }
        __syncthreads();
        const int key = k0 + lane;
        for (int u = 0; u < kQueriesPerWarp; ++u) {
            const int qi = warp * kQueriesPerWarp + u;
            if (q0 + qi >= T) break;
            const float* qr = q_tile + qi * D;
            float s = 0.f;
            for (int d = 0; d < D; ++d) s += qr[d] * k_tile[lane * (D + 1) + d];
            s = s / scale_div;
            if (key >= valid_len) s += -FLT_MAX;
            if (key >= T) s = -INFINITY;
            float tile_max = s;
            for (int off = 16; off > 0; off /= 2) {
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
            }
            const float m_new = fmaxf(m[u], tile_max);
            const float correction = expf(m[u] - m_new);
            const float p = expf(s - m_new);
            float p_sum = p;
            for (int off = 16; off > 0; off /= 2) p_sum += __shfl_xor_sync(0xffffffffu, p_sum, off);
            l[u] = l[u] * correction + p_sum;
            m[u] = m_new;
            for (int i = 0; i < kMaxDimsPerLane; ++i) acc[u][i] *= correction;
            for (int j = 0; j < kTile; ++j) {
                const float pj = __shfl_sync(0xffffffffu, p, j);
                for (int i = 0; i < kMaxDimsPerLane; ++i) {
                    const int d = lane + 32 * i;
                    if (d < D) acc[u][i] += pj * v_tile[j * D + d];
                }
            }
        }
    }
    for (int u = 0; u < kQueriesPerWarp; ++u) {
        const int row = q0 + warp * kQueriesPerWarp + u;
        if (row >= T) break;
        for (int i = 0; i < kMaxDimsPerLane; ++i) {
            const int d = lane + 32 * i;
            if (d < D) out[int64_t(row) * width + head * D + d] = acc[u][i] / l[u];
        }
    }
}

}  // namespace

void attention(const float* q, const float* k, const float* v, float* out, int T, int heads,
               int head_dim, int valid_len, cudaStream_t stream) {
    if (T == 0 || heads == 0) return;
    if (head_dim > 32 * kMaxDimsPerLane) {
        throw CudaError("attention: head_dim " + std::to_string(head_dim) + " exceeds " +
                        std::to_string(32 * kMaxDimsPerLane));
    }
    const size_t shared_bytes = size_t(kTile) * (3 * head_dim + 1) * sizeof(float);
    if (shared_bytes > 48 * 1024) {
        KOKORO_CUDA_CHECK(cudaFuncSetAttribute(
            attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)));
    }
    const dim3 grid(unsigned((T + kTile - 1) / kTile), unsigned(heads));
    attention_kernel<<<grid, kWarps * 32, shared_bytes, stream>>>(q, k, v, out, T, heads, head_dim,
                                                                  valid_len);
    KOKORO_CHECK_LAUNCH("attention_kernel");
}

}  // namespace kokoro::ops
