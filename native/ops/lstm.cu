// Bidirectional single-layer LSTM.
//
// The input projection of both directions is one GEMM (w_ih [2, 4H, In] is a
// [8H, In] matrix; the folded bias rides along): gx [T, 8H] in `scratch`.
// The recurrence is then one launch that loops over all T steps on the device.
// Its cost is per step, so its latency is what matters; two paths:
//
// - Cluster path (sm_90+, H in {64, 128, 256}): one thread-block cluster
//   of H / 32 blocks per direction. Each block owns 32 hidden units, i.e.
//   their 4 x 32 gate rows of W_hh, held in registers for the whole
//   sequence (H / 4 floats per thread), so W_hh is read from memory once,
//   not per step. 16 lanes share a hidden unit: each holds H / 16 columns
//   of its 4 gate rows and reads the matching slice of h (a broadcast
//   within the half-warp) from shared memory. A transposing butterfly sums
//   the 4 rows over the 16 lanes in 5 shuffles, leaving gate (lane / 4) in
//   each quad, which applies its own nonlinearity (the same instructions
//   for every gate); 4 more shuffles give every lane i, f, g, o and the
//   cell update runs redundantly in the 16 lanes (c stays in a register).
//   Lane r < H / 32 sends the new h to block r with st.async (distributed
//   shared memory), which counts its bytes on block r's mbarrier for that
//   buffer: a block starts step s + 1 as soon as all H values of h_s have
//   arrived, with no cluster-wide barrier per step. h is double-buffered
//   by step parity; rewriting a buffer is safe without further sync
//   because h_{s+1} cannot exist before every block has sent h_s, which
//   each warp does only after its reads of h_{s-1}. On an H200: 0.75 us
//   per step for H = 256 (with a cluster barrier per step instead of the
//   mbarriers: 1.2 us; a 16-block cluster, a non-portable size, 0.72; a
//   warp per unit, 32 FMAs per lane, 1.05).
// - Fallback (no clusters, other H): one block per direction; each warp
//   computes whole gate rows of W_hh @ h with lanes striding the contiguous
//   row, so W_hh (1 MB per direction at H = 256) streams from L2 every step;
//   then one thread per hidden unit applies the cell update. On an H200:
//   30 us per step at H = 256 (bound by one SM's L2 bandwidth).
//
// The path is chosen at run time from the device (cluster launch support, a
// schedulable cluster) and the cluster kernel's compiled architecture (its
// body exists only in code built for sm_90 and newer). Both paths are plain
// fp32 with accurate expf / tanhf (gate_activation); they differ from each
// other only in the order of the W_hh @ h sums. Gate order i, f, g, o
// (PyTorch).
#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>

#include "kokoro/check.h"
#include "kokoro/launch.cuh"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kFallbackThreads = 1024;
// Cluster path: hidden units per block and lanes per hidden unit.
constexpr int kUnitsPerBlock = 32;
constexpr int kLanesPerUnit = 16;
constexpr int kClusterThreads = kUnitsPerBlock * kLanesPerUnit;

// 1 / (1 + e^-x) without overflow; the reciprocal correctly rounded, not a
// full division (fewer instructions on the recurrence's critical path).
__device__ float sigmoid(float x) {
    const float e = expf(-fabsf(x));
    const float r = __frcp_rn(1.f + e);
    return x >= 0.f ? r : e * r;
}

// A gate's nonlinearity: sigmoid, or tanh for the cell input g, as 2
// sigmoid(2x) - 1 (exact identity; ~1e-7 absolute rounding): the same
// instructions for every gate, so the cluster path's lanes, one gate per
// quad, do not diverge (the two paths had cost ~10% of the step).
__device__ float gate_activation(float pre, bool cell_input) {
    const float s = sigmoid(cell_input ? 2.f * pre : pre);
    return cell_input ? 2.f * s - 1.f : s;
}

#if __CUDA_ARCH__ >= 900
// Shared-memory mbarrier and st.async helpers (sm_90). Addresses are 32-bit
// shared-window addresses; `remote` ones are shared::cluster addresses (mapa),
// in which one block's shared memory is contiguous as in its own window.
__device__ uint32_t shared_address(const void* p) {
    return uint32_t(__cvta_generic_to_shared(p));
}

__device__ uint32_t map_to_rank(uint32_t local, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
}

// This thread's arrival on a local mbarrier, announcing `bytes` more to come.
__device__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                 :
                 : "r"(bar), "r"(bytes)
                 : "memory");
}

// Spin until the mbarrier phase of the given parity has completed; acquire at
// cluster scope, so data that remote st.async wrote for it is visible.
__device__ void mbarrier_wait_parity(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done) {
        asm volatile(
            "{\n\t.reg .pred p;\n\t"
            "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}

// 4 bytes into another block's shared memory, counted on its mbarrier.
__device__ void st_async_f32(uint32_t remote_addr, float value, uint32_t remote_bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                 :
                 : "r"(remote_addr), "r"(__float_as_uint(value)), "r"(remote_bar)
                 : "memory");
}
#endif

// Cluster path. Grid: 2 clusters of H / 32 blocks along x (direction =
// cluster index), kClusterThreads threads per block.
template <int H>
__global__ void __launch_bounds__(kClusterThreads, 1)
    lstm_cluster_kernel(const float* gx, const float* w_hh, float* out, int T) {
#if __CUDA_ARCH__ >= 900
    constexpr int kBlocks = H / kUnitsPerBlock;
    constexpr int kVec = H / 4 / kLanesPerUnit;  // float4 columns per lane and gate row
    constexpr int G = 4 * H;
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    __shared__ float4 h_buf[2][H / 4];
    // full[b]: all H floats of the step written into h_buf[b] have arrived.
    __shared__ alignas(8) uint64_t full[2];

    const int dir = blockIdx.x / kBlocks;
    const int sub = threadIdx.x % kLanesPerUnit;  // lane within the unit's 16
    const int unit = int(cluster.block_rank()) * kUnitsPerBlock + threadIdx.x / kLanesPerUnit;
    const int gate = sub / 4;  // the gate this lane's quad finishes

    // This lane's slice of W_hh: rows g H + unit, float4 columns sub + 16 v.
    float4 w[4][kVec];
    const float* w_dir = w_hh + int64_t(dir) * G * H;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
        const float* row = w_dir + int64_t(g * H + unit) * H;
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
            const int k = 4 * (sub + kLanesPerUnit * v);
            w[g][v] = make_float4(row[k], row[k + 1], row[k + 2], row[k + 3]);
        }
    }
    // Step s reads h_{s-1} from h_buf[(s + 1) & 1] and sends h_s into every
    // block's h_buf[s & 1]; h_{-1} = 0, so step 0 waits for nothing.
    for (int i = threadIdx.x; i < H / 4; i += blockDim.x) {
        h_buf[1][i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    // Buffer b's addresses are buffer 0's plus b times the buffer's size.
    constexpr uint32_t kBufBytes = H * sizeof(float), kBarBytes = sizeof(uint64_t);
    const uint32_t full_local = shared_address(&full[0]);
    if (threadIdx.x == 0) {
        for (uint32_t b = 0; b < 2; ++b) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;"
                         :
                         : "r"(full_local + b * kBarBytes)
                         : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;" : : : "memory");
    }
    // Lane sub < kBlocks sends this unit's h to block `sub`.
    const uint32_t peer = uint32_t(sub % kBlocks);
    const uint32_t h_remote = map_to_rank(shared_address(&h_buf[0][0].x) + 4 * unit, peer);
    const uint32_t full_remote = map_to_rank(full_local, peer);
    const float* gx_dir = gx + int64_t(dir) * G + gate * H + unit;
    const auto gx_at = [&](int step) {
        const int t = dir == 0 ? step : T - 1 - step;
        return gx_dir[int64_t(t) * 2 * G];
    };
    float gx_next = gx_at(0);
    float c = 0.f;
    cluster.sync();  // every block running, barriers initialised and h_{-1} zeroed

    for (int step = 0; step < T; ++step) {
        const uint32_t cur = step & 1, prev = cur ^ 1u;
        if (step > 0) {
            mbarrier_wait_parity(full_local + prev * kBarBytes, uint32_t((step - 1) >> 1) & 1u);
        }
        // full[cur]'s previous phase (step - 2) completed before the wait above.
        if (threadIdx.x == 0) mbarrier_arrive_expect_tx(full_local + cur * kBarBytes, kBufBytes);
        const float gx_cur = gx_next;
        if (step + 1 < T) gx_next = gx_at(step + 1);
        const float4* h = h_buf[prev];
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
            const float4 hv = h[sub + kLanesPerUnit * v];
#pragma unroll
            for (int g = 0; g < 4; ++g) {
                acc[g] = fmaf(w[g][v].x, hv.x, acc[g]);
                acc[g] = fmaf(w[g][v].y, hv.y, acc[g]);
                acc[g] = fmaf(w[g][v].z, hv.z, acc[g]);
                acc[g] = fmaf(w[g][v].w, hv.w, acc[g]);
            }
        }
        // Sum over the 16 lanes: lanes with bit 3 set keep gates (2, 3), the
        // others (0, 1); then bit 2 picks one gate; bits 1, 0 finish the sum.
        const bool hi = sub & 8, mid = sub & 4;
        const float b0 =
            (hi ? acc[2] : acc[0]) + __shfl_xor_sync(0xffffffffu, hi ? acc[0] : acc[2], 8);
        const float b1 =
            (hi ? acc[3] : acc[1]) + __shfl_xor_sync(0xffffffffu, hi ? acc[1] : acc[3], 8);
        float sum = (mid ? b1 : b0) + __shfl_xor_sync(0xffffffffu, mid ? b0 : b1, 4);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        const float pre = sum + gx_cur;
        const float act = gate_activation(pre, gate == 2);
        const float i_g = __shfl_sync(0xffffffffu, act, 0, kLanesPerUnit);
        const float f_g = __shfl_sync(0xffffffffu, act, 4, kLanesPerUnit);
        const float g_g = __shfl_sync(0xffffffffu, act, 8, kLanesPerUnit);
        const float o_g = __shfl_sync(0xffffffffu, act, 12, kLanesPerUnit);
        c = f_g * c + i_g * g_g;
        const float h_new = o_g * tanhf(c);
        if (sub < kBlocks) {
            st_async_f32(h_remote + cur * kBufBytes, h_new, full_remote + cur * kBarBytes);
        }
        if (sub == kLanesPerUnit - 1) {
            const int t = dir == 0 ? step : T - 1 - step;
            out[int64_t(t) * 2 * H + int64_t(dir) * H + unit] = h_new;
        }
    }
    // Every block has received the last step before any block exits.
    mbarrier_wait_parity(full_local + ((T - 1) & 1) * kBarBytes, uint32_t((T - 1) >> 1) & 1u);
    cluster.sync();
#endif
}

// Fallback. blockIdx.x = direction (0 forward, 1 reverse). Shared: h [H], c [H], gates [4H].
__global__ void lstm_block_kernel(const float* gx, const float* w_hh, float* out, int T, int H) {
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
            const float i_g = gate_activation(gates[j], false);
            const float f_g = gate_activation(gates[H + j], false);
            const float g_g = gate_activation(gates[2 * H + j], true);
            const float o_g = gate_activation(gates[3 * H + j], false);
            const float cj = f_g * c[j] + i_g * g_g;
            const float hj = o_g * tanhf(cj);
            c[j] = cj;
            h[j] = hj;
            out[int64_t(t) * 2 * H + int64_t(dir) * H + j] = hj;
        }
        __syncthreads();
    }
}

// The cluster launch for lstm_cluster_kernel<H>: 2 clusters of H / 32 blocks.
cudaLaunchConfig_t cluster_config(int H, cudaStream_t stream, cudaLaunchAttribute* attr) {
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = unsigned(H / kUnitsPerBlock);
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(2 * H / kUnitsPerBlock));
    config.blockDim = dim3(kClusterThreads);
    config.dynamicSmemBytes = 0;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    return config;
}

// Whether lstm_cluster_kernel<H> can run here: the device launches clusters,
// the kernel was compiled for sm_90 or newer (else its body is empty), and at
// least one cluster of its shape fits on the device.
template <int H>
bool cluster_path_usable(cudaStream_t stream) {
    int device = 0, cluster_launch = 0;
    KOKORO_CUDA_CHECK(cudaGetDevice(&device));
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device));
    if (!cluster_launch) return false;
    cudaFuncAttributes attributes{};
    KOKORO_CUDA_CHECK(cudaFuncGetAttributes(&attributes, lstm_cluster_kernel<H>));
    if (attributes.ptxVersion < 90 || attributes.binaryVersion < 90) return false;
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t config = cluster_config(H, stream, &attr);
    int clusters = 0;
    KOKORO_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, lstm_cluster_kernel<H>, &config));
    return clusters > 0;
}

// Runs the cluster path when usable; false when the caller must fall back.
template <int H>
bool launch_cluster(const float* gx, const float* w_hh, float* out, int T, cudaStream_t stream) {
    if (!cluster_path_usable<H>(stream)) return false;
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t config = cluster_config(H, stream, &attr);
    const cudaError_t launched =
        cudaLaunchKernelEx(&config, lstm_cluster_kernel<H>, gx, w_hh, out, T);
    KOKORO_CHECK_LAUNCH("lstm_cluster_kernel");  // reads and clears the launch's own error
    KOKORO_CUDA_CHECK(launched);
    return true;
}

bool launch_cluster_any(int H, const float* gx, const float* w_hh, float* out, int T,
                        cudaStream_t stream) {
    switch (H) {
        case 64: return launch_cluster<64>(gx, w_hh, out, T, stream);
        case 128: return launch_cluster<128>(gx, w_hh, out, T, stream);
        case 256: return launch_cluster<256>(gx, w_hh, out, T, stream);
        default: return false;
    }
}

}  // namespace

int64_t lstm_scratch_floats(int T, int H) { return int64_t(T) * 8 * H; }

void lstm_bidirectional(cublasHandle_t handle, const float* x, const float* w_ih,
                        const float* w_hh, const float* b, float* out, int T, int In, int H,
                        float* scratch, cudaStream_t stream) {
    if (T == 0) return;
    linear(handle, x, w_ih, b, scratch, T, In, 8 * H, stream);
    if (launch_cluster_any(H, scratch, w_hh, out, T, stream)) return;
    const size_t shared_bytes = size_t(6) * H * sizeof(float);
    if (shared_bytes > 48 * 1024) {
        KOKORO_CUDA_CHECK(cudaFuncSetAttribute(lstm_block_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(shared_bytes)));
    }
    lstm_block_kernel<<<2, kFallbackThreads, shared_bytes, stream>>>(scratch, w_hh, out, T, H);
    KOKORO_CHECK_LAUNCH("lstm_block_kernel");
}

}  // namespace kokoro::ops
