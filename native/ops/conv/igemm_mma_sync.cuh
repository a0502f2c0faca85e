// The implicit-GEMM conv's mma.sync kernel (sm_80 on).
// Included after igemm_tiles.cuh by the kernels' translation units
// (conv_igemm_*.cu).
#pragma once

namespace kokoro::ops::igemm {
namespace {

// ------------------------------------------------------------- mma.sync
// A block computes 128 (Cout) x kTile (T) with 8 warps (64 x kTile / 4
// each) of m16n8k16 MMAs, both operands by ldmatrix.
constexpr int kWarpsM = 2, kWarpsN = 4;
constexpr int kMmaThreads = 32 * kWarpsM * kWarpsN;
constexpr int kWarpM = kCoutTile / kWarpsM;  // 64
constexpr int kMTiles = kWarpM / 16;          // m16n8k16 tiles per warp along Cout

template <int kTile>
size_t mma_sync_smem_bytes(int halo) {
    return std::max(staged_tile_bytes<kTile>(),
                    sizeof(__half) * kPitch *
                        (size_t(kStages) * kCoutTile +
                         size_t(window_buffers(halo)) * (kTile + halo)));
}

template <int kTile, bool kPhases, bool kHalfOut = false>
__global__ void __launch_bounds__(kMmaThreads, 2) conv1d_mma_sync_kernel(const ConvArgs a) {
    await_producers();
    constexpr int kWarpN = kTile / kWarpsN;
    constexpr int kNTiles = kWarpN / 8;
    static_assert(kNTiles % 2 == 0, "B fragments load two n-tiles per ldmatrix.x4");
    extern __shared__ uint4 smem_vec[];
    __half* const w_smem = reinterpret_cast<__half*>(smem_vec);
    __half* const win_smem = w_smem + kStages * kCoutTile * kPitch;
    const int rows = kTile + a.dilation * (a.K - 1);
    const BlockRows<kPhases> block_rows(a);
    const int t0 = blockIdx.x * kTile;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / kWarpsN * kWarpM, wn = warp % kWarpsN * kWarpN;
    // ldmatrix row addresses: A rows lane % 16, k half lane / 16; B (rows are
    // time steps) n = lane % 8 + 8 * (lane / 16), k half (lane / 8) % 2.
    const int a_off = (wm + lane % 16) * kPitch + lane / 16 * 8;
    const int b_off = (wn + lane % 8 + lane / 16 * 8) * kPitch + lane / 8 % 2 * 8;

    float acc[kMTiles][kNTiles][4] = {};
    reduction_pipeline<false, false, kStages, !kPhases>(
        a,
        [&](int c, int k, int stage, int buffer) {
            load_weights<kMmaThreads, false>(w_smem + stage * kCoutTile * kPitch, a, block_rows,
                                             k, c);
            if (k == 0) {
                load_window<kMmaThreads>(win_smem + buffer * rows * kPitch, a, t0 - a.pad, rows,
                                         c);
            }
        },
        [&](int stage, int buffer, int k, int) {
            const __half* as = w_smem + stage * kCoutTile * kPitch + a_off;
            const __half* bs = win_smem + (buffer * rows + k * a.dilation) * kPitch + b_off;
#pragma unroll
            for (int kk = 0; kk < kBK; kk += 16) {
                uint32_t af[kMTiles][4], bf[kNTiles / 2][4];
#pragma unroll
                for (int mi = 0; mi < kMTiles; ++mi) ldmatrix_x4(af[mi], as + mi * 16 * kPitch + kk);
#pragma unroll
                for (int np = 0; np < kNTiles / 2; ++np) {
                    ldmatrix_x4(bf[np], bs + np * 16 * kPitch + kk);
                }
#pragma unroll
                for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
                    for (int ni = 0; ni < kNTiles; ++ni) {
                        mma_f16(acc[mi][ni], af[mi], bf[ni / 2][ni % 2 * 2],
                                bf[ni / 2][ni % 2 * 2 + 1]);
                    }
                }
            }
        });

    // acc[mi][ni][2 half + e]: channel wm + 16 mi + g + 8 half, time wn + 8 ni + 2 tq + e.
    float* const tile = staged_tile(smem_vec);
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float* row = tile + (wm + mi * 16 + g + 8 * half) * kStagedPitch<kTile> + wn + 2 * tq;
#pragma unroll
            for (int ni = 0; ni < kNTiles; ++ni) {
#pragma unroll
                for (int e = 0; e < 2; ++e) row[ni * 8 + e] = acc[mi][ni][2 * half + e];
            }
        }
    }
    if constexpr (kPhases) {
        store_phases_tile<kTile, kMmaThreads, kHalfOut>(a, tile, t0, block_rows);
    } else {
        store_staged_tile<kTile, kMmaThreads, kCoutTile, kHalfOut>(a, tile, t0, block_rows.c0);
    }
}

}  // namespace
}  // namespace kokoro::ops::igemm
