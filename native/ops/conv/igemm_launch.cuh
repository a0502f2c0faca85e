// The tensor-core convs' dispatch body: launch_mapped picks the kernel
// instance for the GPU (wgmma or mma.sync), the plan's tile, the Cout tile
// (narrow or wide), the in-block split and the in-flight stages, sizes its
// shared memory and launches it. A template over the output map (kPhases),
// y's storage (kHalfOut) and the input (kRawX), explicitly instantiated
// once per combination in conv_igemm_*.cu (declared in igemm_dispatch.h), so
// that each kernel instance is compiled in one translation unit.
// Included after the kernels (igemm_mma_sync.cuh, igemm_wgmma.cuh) and the
// tensor maps (igemm_tensor_maps.cuh).
#pragma once

#include <string>
#include <type_traits>

namespace kokoro::ops::igemm {
namespace {

template <class Kernel, class... Extra>
void launch(Kernel kernel, const char* name, size_t smem, int threads, const Gpu& gpu,
            const Plan& p, const ConvArgs& a, cudaStream_t stream, const Extra&... extra) {
    // The dynamic share: the device's limit less the kernel's static shared
    // memory (the wgmma kernels' TMA barriers).
    cudaFuncAttributes attributes{};
    KOKORO_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    const int dynamic_limit = gpu.smem_optin - int(attributes.sharedSizeBytes);
    if (smem > size_t(dynamic_limit)) {
        throw CudaError(std::string(name) + ": a window of " +
                        std::to_string(p.tile + a.dilation * (a.K - 1)) +
                        " steps (dilation x (K - 1) = " + std::to_string(a.dilation * (a.K - 1)) +
                        ") exceeds the GPU's shared memory");
    }
    // Always the device's limit, never this launch's need: engine lanes launch
    // from several host threads, and one lowering the limit between another's
    // call and launch would fail that launch.
    KOKORO_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_limit));
    const dim3 grid(unsigned((a.Tout + p.tile - 1) / p.tile), unsigned(row_tiles(a)),
                    unsigned(p.in_block ? 1 : p.splits));
    launch_dependent(kernel, grid, dim3(threads), smem, stream, name, a, extra...);
}

}  // namespace

// The kernel for the GPU, the tile, the output map (phases or not), y's
// storage (kHalfOut: FP16; a conv1d of wide Cout tiles only) and the input
// (kRawX: raw, x_apply its parameters; a wgmma conv1d of one split).
template <bool kPhases, bool kHalfOut, bool kRawX>
void launch_mapped(const Gpu& gpu, const Plan& p, HalfKernel which, const ConvArgs& a,
                   const ChannelApply* x_apply, cudaStream_t stream) {
    const int halo = a.dilation * (a.K - 1);
    if (which == HalfKernel::kBest && gpu.wgmma) {
        // kN: the narrow tile where one covers Cout (a conv1d's rows only).
        auto wgmma = [&](auto n) {
            constexpr int kN = decltype(n)::value;
            const CUtensorMap w_map = kPhases ? CUtensorMap{} : weight_map<kN>(a);
            const CUtensorMap x_map = kRawX ? raw_map(a, raw_box_rows(p.tile + halo))
                                            : window_map(a, WindowBoxes(p.tile + halo).rows);
            if constexpr (!kPhases && kN == kCoutTile && !kRawX) {
                if (p.in_block) {
                    return launch(conv1d_wgmma_kernel<2, false, kN, true, kHalfOut, false,
                                                      kInFlightStages>,
                                  "conv1d_wgmma_kernel",
                                  wgmma_smem_bytes<2, kN, false, kInFlightStages>(halo, a.ld),
                                  2 * kWgmmaThreadsPerGroup, gpu, p, a, stream, w_map, x_map,
                                  x_apply);
                }
            }
            if (p.tile == 128) {
                // A conv1d's wide tile keeps its MMAs in flight where two
                // blocks per SM still fit its fourth weight stage (not beside
                // a raw input's staging buffer at the k11 d5 halo, nor beside
                // a one-tap conv's third window).
                if constexpr (!kPhases && kN == kCoutTile) {
                    const size_t smem = wgmma_smem_bytes<2, kN, kRawX, kInFlightStages>(halo, a.ld);
                    if (two_blocks_fit(gpu, smem)) {
                        return launch(conv1d_wgmma_kernel<2, false, kN, false, kHalfOut, kRawX,
                                                          kInFlightStages>,
                                      "conv1d_wgmma_kernel", smem, 2 * kWgmmaThreadsPerGroup, gpu,
                                      p, a, stream, w_map, x_map, x_apply);
                    }
                }
                launch(conv1d_wgmma_kernel<2, kPhases, kN, false, kHalfOut, kRawX>,
                       "conv1d_wgmma_kernel", wgmma_smem_bytes<2, kN, kRawX>(halo, a.ld),
                       2 * kWgmmaThreadsPerGroup, gpu, p, a, stream, w_map, x_map, x_apply);
            } else {
                launch(conv1d_wgmma_kernel<1, kPhases, kN, false, kHalfOut, kRawX>,
                       "conv1d_wgmma_kernel", wgmma_smem_bytes<1, kN, kRawX>(halo, a.ld),
                       kWgmmaThreadsPerGroup, gpu, p, a, stream, w_map, x_map, x_apply);
            }
        };
        using Narrow = std::integral_constant<int, kNarrowCoutTile>;
        using Wide = std::integral_constant<int, kCoutTile>;
        if constexpr (!kPhases && !kHalfOut && !kRawX) {
            if (a.Cout <= kNarrowCoutTile) return wgmma(Narrow{});
        }
        wgmma(Wide{});
    } else if (p.tile == 128) {
        launch(conv1d_mma_sync_kernel<128, kPhases, kHalfOut>, "conv1d_mma_sync_kernel",
               mma_sync_smem_bytes<128>(halo), kMmaThreads, gpu, p, a, stream);
    } else {
        launch(conv1d_mma_sync_kernel<64, kPhases, kHalfOut>, "conv1d_mma_sync_kernel",
               mma_sync_smem_bytes<64>(halo), kMmaThreads, gpu, p, a, stream);
    }
}

}  // namespace kokoro::ops::igemm
