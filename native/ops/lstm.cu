// Bidirectional single-layer LSTM.
//
// The input projection of both directions is one GEMM (w_ih [2, 4H, In] is a
// [8H, In] matrix; the folded bias rides along): gx [T, 8H] in `scratch`
// (lstm_bidirectional; the engine's fast precision computes gx as a split
// FP16 linear itself and calls lstm_recurrence). The recurrence is then one
// launch that loops over all T steps on the device.
// Its cost is per step, so its latency is what matters; two paths:
//
// - Cluster path (sm_90+, H in {64, 128, 256}): one thread-block cluster
//   per direction; each block owns `Units` hidden units, i.e. their
//   4 x Units gate rows of W_hh, held in registers for the whole sequence
//   (H / 2 floats per thread), so W_hh is read from memory once, not per
//   step. 8 lanes share a hidden unit: each holds H / 8 columns of its 4
//   gate rows and reads the matching slice of h (a broadcast within the
//   8 lanes) from shared memory. A transposing butterfly sums the 4 rows
//   over the 8 lanes in 4 shuffles, leaving gate (lane / 2) in each lane
//   pair, which applies its own nonlinearity (the same instructions for
//   every gate); 4 more shuffles give every lane i, f, g, o and the cell
//   update runs redundantly in the 8 lanes (c stays in a register). Each
//   unit's lanes send the new h to every block of the cluster with
//   st.async (distributed shared memory), which counts its bytes on the
//   receiver's mbarrier for that buffer: a block starts step s + 1 as soon
//   as all H values of h_s have arrived, with no cluster-wide barrier per
//   step. h is double-buffered by step parity; rewriting a buffer is safe
//   without further sync because h_{s+1} cannot exist before every block
//   has sent h_s, which each warp does only after its reads of h_{s-1}.
//   A step is bound by its instruction issue and its dependent latency,
//   not by the exchange: Units = 16 (16 blocks at H = 256, a non-portable
//   cluster size, used where the device schedules it; else, and in a
//   batch's lanes, 32 units, 8 blocks) halves each SM's share of the step's
//   FMAs. On an H200 at
//   H = 256: ~0.57 us per step (16 lanes per unit and 32 units per block:
//   0.75; the same with a cluster barrier per step instead of the
//   mbarriers: 1.2; 8 lanes per unit, 32 units: ~0.62; a warp per unit:
//   1.05; a warp's 4 new h values as one 16-byte st.async per block: the
//   gathering shuffles cost more than the fewer arrivals save).
//   Stacked sequences (a batch's group: lstm_recurrence's lengths) recur up
//   to kStackedSequences per launch, each lane's W_hh slice serving all of
//   them (their own h buffers, cell states and rows; the mbarrier counts
//   the live ones' bytes): a step of four costs ~2.25x one's (ncu, H = 256,
//   8 blocks, 157 steps: 295 against 131 us; 2.6x while each gate chain's
//   reciprocal had a branch, which kept the four chains from interleaving;
//   the sequences pipelined instead, each one's products beside the previous
//   one's gates on mbarriers of its own, took 379 us), and each sequence's
//   arithmetic is its lone call's, so the same bits.
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
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kokoro/check.h"
#include "kokoro/launch.cuh"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kFallbackThreads = 1024;
// Cluster path: lanes per hidden unit; hidden units per block, in the order
// tried (the first needs a 16-block cluster at H = 256).
constexpr int kLanesPerUnit = 8;
constexpr int kUnitsWide = 16, kUnitsPortable = 32;
// Sequences of a stack (lstm_recurrence) per cluster launch.
constexpr int kStackedSequences = 4;

// 1 / x for x in [1, 2], correctly rounded: __frcp_rn's own fast path (the
// approximate reciprocal and one Newton step, taken for every operand of
// normal exponent), without its call to the slow path for the others. That
// branch split a stacked step's gate chains into one block per sequence,
// which ptxas then could not interleave.
__device__ float reciprocal_one_to_two(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return fmaf(r, -fmaf(x, r, -1.f), r);
}

// 1 / (1 + e^-x) without overflow; the reciprocal correctly rounded, not a
// full division (fewer instructions on the recurrence's critical path).
__device__ float sigmoid(float x) {
    const float e = expf(-fabsf(x));
    const float r = reciprocal_one_to_two(1.f + e);
    return x >= 0.f ? r : e * r;
}

// A gate's nonlinearity: sigmoid, or tanh for the cell input g, as 2
// sigmoid(2x) - 1 (exact identity; ~1e-7 absolute rounding): the same
// instructions for every gate, so the cluster path's lanes, one gate per
// lane pair, do not diverge (the two paths had cost ~10% of the step).
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

// The sequences of one cluster launch: row ranges of gx and out (length 0:
// no sequence).
template <int kSeqs>
struct LstmSequences {
    int offset[kSeqs];
    int length[kSeqs];
};

// Cluster path. Grid: 2 clusters of H / Units blocks along x (direction =
// cluster index), Units * kLanesPerUnit threads per block. kSeqs sequences
// of `seqs` recur at once (a batch's group: W_hh is read from the registers
// once per step for all of them; each has its own h buffers, cell state and
// rows, and the same arithmetic as when it recurs alone, so the same bits).
// A sequence past its length (or absent: length 0) still runs its step on
// its stale state, branch-free, but sends and stores nothing.
template <int H, int Units, int kSeqs>
__global__ void __launch_bounds__(Units* kLanesPerUnit, 1)
    lstm_cluster_kernel(const float* gx, const float* w_hh, float* out,
                        LstmSequences<kSeqs> seqs) {
#if __CUDA_ARCH__ >= 900
    constexpr int kBlocks = H / Units;
    constexpr int kVec = H / 4 / kLanesPerUnit;  // float4 columns per lane and gate row
    constexpr int G = 4 * H;
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    __shared__ float4 h_buf[2][kSeqs][H / 4];
    // full[b]: all h values of the step written into h_buf[b] have arrived.
    __shared__ alignas(8) uint64_t full[2];

    const int dir = blockIdx.x / kBlocks;
    constexpr int kLanesPerGate = kLanesPerUnit / 4;
    const int sub = threadIdx.x % kLanesPerUnit;  // lane within the unit's kLanesPerUnit
    const int unit = int(cluster.block_rank()) * Units + threadIdx.x / kLanesPerUnit;
    const int gate = sub / kLanesPerGate;  // the gate this lane finishes

    // This lane's slice of W_hh: rows g H + unit, float4 columns sub + kLanesPerUnit v.
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
    for (int i = threadIdx.x; i < 2 * kSeqs * H / 4; i += blockDim.x) {
        (&h_buf[0][0][0])[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    // Buffer b's addresses are buffer 0's plus b times the buffer's size.
    constexpr uint32_t kSeqBytes = H * sizeof(float), kBufBytes = kSeqs * kSeqBytes;
    constexpr uint32_t kBarBytes = sizeof(uint64_t);
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
    // Lane sub sends this unit's h to blocks sub + kLanesPerUnit i.
    constexpr int kSends = (kBlocks + kLanesPerUnit - 1) / kLanesPerUnit;
    uint32_t h_remote[kSends], full_remote[kSends];
#pragma unroll
    for (int i = 0; i < kSends; ++i) {
        const uint32_t peer = uint32_t((sub + kLanesPerUnit * i) % kBlocks);
        h_remote[i] = map_to_rank(shared_address(&h_buf[0][0][0].x) + 4 * unit, peer);
        full_remote[i] = map_to_rank(full_local, peer);
    }
    // Per sequence: this lane's gx and out elements at step 0 of its
    // direction (the reverse direction walks back from the last row).
    const int64_t gx_stride = (dir == 0 ? 2 : -2) * int64_t(G);
    const int64_t out_stride = (dir == 0 ? 2 : -2) * int64_t(H);
    int64_t gx_at[kSeqs], out_at[kSeqs];
    float gx_next[kSeqs], c[kSeqs];
    int steps = 0;
#pragma unroll
    for (int q = 0; q < kSeqs; ++q) {
        const int length = seqs.length[q];
        steps = max(steps, length);
        const int64_t t0 = seqs.offset[q] + (dir == 0 || length == 0 ? 0 : length - 1);
        gx_at[q] = t0 * 2 * int64_t(G) + int64_t(dir) * G + gate * H + unit;
        out_at[q] = t0 * 2 * int64_t(H) + int64_t(dir) * H + unit;
        gx_next[q] = length > 0 ? gx[gx_at[q]] : 0.f;
        c[q] = 0.f;
    }
    cluster.sync();  // every block running, barriers initialised and h_{-1} zeroed

    for (int step = 0; step < steps; ++step) {
        const uint32_t cur = step & 1, prev = cur ^ 1u;
        if (step > 0) {
            mbarrier_wait_parity(full_local + prev * kBarBytes, uint32_t((step - 1) >> 1) & 1u);
        }
        // full[cur]'s previous phase (step - 2) completed before the wait
        // above; this step's live sequences each send H floats.
        if (threadIdx.x == 0) {
            uint32_t live = 0;
#pragma unroll
            for (int q = 0; q < kSeqs; ++q) live += step < seqs.length[q] ? 1u : 0u;
            mbarrier_arrive_expect_tx(full_local + cur * kBarBytes, live * kSeqBytes);
        }
        float acc[kSeqs][4], gx_cur[kSeqs];
#pragma unroll
        for (int q = 0; q < kSeqs; ++q) {
            gx_cur[q] = gx_next[q];
            gx_at[q] += gx_stride;
            if (step + 1 < seqs.length[q]) gx_next[q] = gx[gx_at[q]];
#pragma unroll
            for (int g = 0; g < 4; ++g) acc[q][g] = 0.f;
        }
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
#pragma unroll
            for (int q = 0; q < kSeqs; ++q) {
                const float4 hv = h_buf[prev][q][sub + kLanesPerUnit * v];
#pragma unroll
                for (int g = 0; g < 4; ++g) {
                    acc[q][g] = fmaf(w[g][v].x, hv.x, acc[q][g]);
                    acc[q][g] = fmaf(w[g][v].y, hv.y, acc[q][g]);
                    acc[q][g] = fmaf(w[g][v].z, hv.z, acc[q][g]);
                    acc[q][g] = fmaf(w[g][v].w, hv.w, acc[q][g]);
                }
            }
        }
        // Every sequence's gates and new state first (branch-free, so that
        // their chains interleave), then the live ones' sends and stores.
        float h_new[kSeqs];
#pragma unroll
        for (int q = 0; q < kSeqs; ++q) {
            // Sum over the unit's lanes: lanes with the top bit set keep
            // gates (2, 3), the others (0, 1); the next bit picks one gate;
            // the remaining bits finish the sum.
            constexpr int kHalf = kLanesPerUnit / 2, kQuarter = kLanesPerUnit / 4;
            const bool hi = sub & kHalf, mid = sub & kQuarter;
            const float* a = acc[q];
            const float b0 =
                (hi ? a[2] : a[0]) + __shfl_xor_sync(0xffffffffu, hi ? a[0] : a[2], kHalf);
            const float b1 =
                (hi ? a[3] : a[1]) + __shfl_xor_sync(0xffffffffu, hi ? a[1] : a[3], kHalf);
            float sum = (mid ? b1 : b0) + __shfl_xor_sync(0xffffffffu, mid ? b0 : b1, kQuarter);
#pragma unroll
            for (int off = kQuarter / 2; off > 0; off /= 2) {
                sum += __shfl_xor_sync(0xffffffffu, sum, off);
            }
            const float pre = sum + gx_cur[q];
            const float act = gate_activation(pre, gate == 2);
            const float i_g = __shfl_sync(0xffffffffu, act, 0 * kLanesPerGate, kLanesPerUnit);
            const float f_g = __shfl_sync(0xffffffffu, act, 1 * kLanesPerGate, kLanesPerUnit);
            const float g_g = __shfl_sync(0xffffffffu, act, 2 * kLanesPerGate, kLanesPerUnit);
            const float o_g = __shfl_sync(0xffffffffu, act, 3 * kLanesPerGate, kLanesPerUnit);
            c[q] = fmaf(f_g, c[q], i_g * g_g);
            h_new[q] = o_g * tanhf(c[q]);
        }
#pragma unroll
        for (int q = 0; q < kSeqs; ++q) {
            if (step >= seqs.length[q]) continue;
#pragma unroll
            for (int i = 0; i < kSends; ++i) {
                if (sub + kLanesPerUnit * i < kBlocks) {
                    st_async_f32(h_remote[i] + cur * kBufBytes + q * kSeqBytes, h_new[q],
                                 full_remote[i] + cur * kBarBytes);
                }
            }
            if (sub == kLanesPerUnit - 1) out[out_at[q]] = h_new[q];
            out_at[q] += out_stride;
        }
    }
    // Every block has received the last step before any block exits.
    if (steps > 0) {
        mbarrier_wait_parity(full_local + ((steps - 1) & 1) * kBarBytes,
                             uint32_t((steps - 1) >> 1) & 1u);
    }
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

// The cluster launch for lstm_cluster_kernel<H, Units, ...>: 2 clusters of
// H / Units blocks.
template <int H, int Units>
cudaLaunchConfig_t cluster_config(cudaStream_t stream, cudaLaunchAttribute* attr) {
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = unsigned(H / Units);
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(2 * H / Units));
    config.blockDim = dim3(unsigned(Units * kLanesPerUnit));
    config.dynamicSmemBytes = 0;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    return config;
}

// Whether lstm_cluster_kernel<H, Units, kSeqs> can run here: the device
// launches clusters, the kernel was compiled for sm_90 or newer (else its
// body is empty), and at least one cluster of its shape fits on the device
// (beyond 8 blocks, a non-portable size, where the device allows it).
template <int H, int Units, int kSeqs>
bool cluster_path_usable(cudaStream_t stream) {
    int device = 0, cluster_launch = 0;
    KOKORO_CUDA_CHECK(cudaGetDevice(&device));
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device));
    if (!cluster_launch) return false;
    const auto kernel = lstm_cluster_kernel<H, Units, kSeqs>;
    cudaFuncAttributes attributes{};
    KOKORO_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    if (attributes.ptxVersion < 90 || attributes.binaryVersion < 90) return false;
    // A device that refuses the size answers with an error, which is an
    // answer here, not a failure: cleared, and the next shape is tried.
    if (H / Units > 8 &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t config = cluster_config<H, Units>(stream, &attr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return clusters > 0;
}

// Runs lstm_cluster_kernel<H, Units, kSeqs> when usable; false if not.
template <int H, int Units, int kSeqs>
bool launch_cluster(const float* gx, const float* w_hh, float* out,
                    const LstmSequences<kSeqs>& seqs, cudaStream_t stream) {
    if (!cluster_path_usable<H, Units, kSeqs>(stream)) return false;
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t config = cluster_config<H, Units>(stream, &attr);
    const cudaError_t launched =
        cudaLaunchKernelEx(&config, lstm_cluster_kernel<H, Units, kSeqs>, gx, w_hh, out, seqs);
    KOKORO_CHECK_LAUNCH("lstm_cluster_kernel");  // reads and clears the launch's own error
    KOKORO_CUDA_CHECK(launched);
    return true;
}

// The widest usable cluster of at most max_blocks blocks; false when the
// caller must fall back. On a GPU shared with other lanes (a batch:
// shared_gpu.h) the portable one, whose blocks find free SMs in a GPC
// sooner beside the other lanes' kernels (the same sums: a unit's lanes
// and columns do not depend on the units per block).
template <int H, int kSeqs>
bool launch_widest_cluster(const float* gx, const float* w_hh, float* out,
                           const LstmSequences<kSeqs>& seqs, int max_blocks, cudaStream_t stream) {
    return (!gpu_shared() && H / kUnitsWide <= max_blocks &&
            launch_cluster<H, kUnitsWide>(gx, w_hh, out, seqs, stream)) ||
           (H / kUnitsPortable <= max_blocks &&
            launch_cluster<H, kUnitsPortable>(gx, w_hh, out, seqs, stream));
}

// One launch of `count` (1 .. kStackedSequences) sequences: a lone one on
// the kernel of one sequence (its registers and per-step work), several on
// the stacked kernel, absent places at length 0.
template <int H>
bool launch_cluster_stack(const float* gx, const float* w_hh, float* out, const int* offsets,
                          const int* lengths, int count, int max_blocks, cudaStream_t stream) {
    if (count == 1) {
        return launch_widest_cluster<H>(gx, w_hh, out, LstmSequences<1>{{offsets[0]}, {lengths[0]}},
                                        max_blocks, stream);
    }
    LstmSequences<kStackedSequences> seqs{};
    for (int i = 0; i < count; ++i) {
        seqs.offset[i] = offsets[i];
        seqs.length[i] = lengths[i];
    }
    return launch_widest_cluster<H>(gx, w_hh, out, seqs, max_blocks, stream);
}

bool launch_cluster_any(int H, const float* gx, const float* w_hh, float* out, const int* offsets,
                        const int* lengths, int count, int max_blocks, cudaStream_t stream) {
    switch (H) {
        case 64:
            return launch_cluster_stack<64>(gx, w_hh, out, offsets, lengths, count, max_blocks,
                                            stream);
        case 128:
            return launch_cluster_stack<128>(gx, w_hh, out, offsets, lengths, count, max_blocks,
                                             stream);
        case 256:
            return launch_cluster_stack<256>(gx, w_hh, out, offsets, lengths, count, max_blocks,
                                             stream);
        default: return false;
    }
}

}  // namespace

int64_t lstm_scratch_floats(int T, int H) { return int64_t(T) * 8 * H; }

void lstm_bidirectional(cublasHandle_t handle, const float* x, const float* w_ih,
                        const float* w_hh, const float* b, float* out, int T, int In, int H,
                        float* scratch, cudaStream_t stream, int max_cluster_blocks) {
    if (T == 0) return;
    linear(handle, x, w_ih, b, scratch, T, In, 8 * H, stream);
    lstm_recurrence(scratch, w_hh, out, {T}, H, stream, max_cluster_blocks);
}

void lstm_recurrence(const float* gx, const float* w_hh, float* out,
                     const std::vector<int>& lengths, int H, cudaStream_t stream,
                     int max_cluster_blocks) {
    // The sequences that have steps, by their first rows; launches of up to
    // kStackedSequences of them.
    std::vector<int> offsets, steps;
    int row = 0;
    for (const int T : lengths) {
        if (T < 0) {
            throw CudaError("lstm_recurrence: a sequence of " + std::to_string(T) + " steps");
        }
        if (T > 0) {
            offsets.push_back(row);
            steps.push_back(T);
        }
        row += T;
    }
    const int n = int(steps.size());
    for (int first = 0; first < n; first += kStackedSequences) {
        const int count = std::min(kStackedSequences, n - first);
        if (launch_cluster_any(H, gx, w_hh, out, &offsets[first], &steps[first], count,
                               max_cluster_blocks, stream)) {
            continue;
        }
        const size_t shared_bytes = size_t(6) * H * sizeof(float);
        if (shared_bytes > kDefaultSharedBytes) {
            KOKORO_CUDA_CHECK(cudaFuncSetAttribute(lstm_block_kernel,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   int(shared_bytes)));
        }
        for (int i = first; i < first + count; ++i) {
            lstm_block_kernel<<<2, kFallbackThreads, shared_bytes, stream>>>(
                gx + int64_t(offsets[i]) * 8 * H, w_hh, out + int64_t(offsets[i]) * 2 * H,
                steps[i], H);
            KOKORO_CHECK_LAUNCH("lstm_block_kernel");
        }
    }
}

}  // namespace kokoro::ops
