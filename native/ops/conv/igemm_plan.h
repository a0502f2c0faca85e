// The tensor-core convs' launch plan: the time tile (128 or 64) and how
// many blocks split the reduction, from the GPU's SM count and shared
// memory and the GEMM's shape. Host-only C++ (the CUDA headers, no device
// code, no CUDA calls: the caller queries the GPU), so that the host test
// (native/tools/conv_plan_tool.cpp) checks the tile choices without a GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kokoro/ops.h"

#include "igemm_traits.h"

namespace kokoro::ops::igemm {

// The kernels with the output map's phases and pad compiled in.
inline bool has_phases(const ConvArgs& a) { return a.phases > 1 || a.y_left > 0; }

// What the plan and the launch need of the current GPU, queried once per conv.
struct Gpu {
    int sms, smem_optin, smem_per_sm;
    bool wgmma;  // device_runs_wgmma()
};

// A bound on the wgmma kernels' static shared memory (their TMA barriers),
// for plans made before the kernel is named (launch reads the kernel's own).
constexpr size_t kStaticShareBound = 1024;

// Whether two blocks of `smem` bytes of dynamic shared memory fit an SM
// (each with its static share, and the 1 KB the SM reserves per block).
inline bool two_blocks_fit(const Gpu& gpu, size_t smem) {
    return 2 * (smem + kStaticShareBound + 1024) <= size_t(gpu.smem_per_sm);
}

// The launch shape: the wide time tile (128) where it gives every SM a
// block (between one and two per SM, the narrow tile's twice as many blocks
// of one MMA warpgroup each issued no more, and read each weight tile twice:
// medium's stage-0 source branch, batch +1.2%), else the narrow one (64)
// with the reduction split over enough blocks to give every SM two (short
// inputs; decoder convs on few frames but 1090 channels); `streams` convs
// at once share that target. Both kernels use the same tiles.
struct Plan {
    int tile, splits, chunks_per_split;
    bool in_block = false;  // the splits walked inside one block (conv1d_wgmma_kernel's kInBlock)
    int64_t blocks(int row_tiles, int Tout) const {
        return int64_t((Tout + tile - 1) / tile) * row_tiles;
    }
};

// Rows of the grid (grid.y): tiles of kCoutTile / phases channels (BlockRows;
// the narrow tile serves Cout <= kNarrowCoutTile only: one row tile either way).
inline int row_tiles(const ConvArgs& a) {
    const int channels = kCoutTile / a.phases;
    return (a.Cout + channels - 1) / channels;
}

inline Plan plan(const Gpu& gpu, int Cin, int row_tiles, int Tout, bool split, int streams) {
    const int64_t want = std::max<int64_t>(1, 2 * int64_t(gpu.sms) / streams);
    Plan p{128, 1, 0};
    const int chunks = reduction_chunks(half_rows_pitch(Cin), split);
    if (2 * p.blocks(row_tiles, Tout) >= want) {
        p.chunks_per_split = chunks;
        return p;
    }
    p.tile = 64;
    const int64_t blocks = p.blocks(row_tiles, Tout);
    p.splits = int(std::min<int64_t>(chunks, (want + blocks - 1) / blocks));
    p.chunks_per_split = (chunks + p.splits - 1) / p.splits;
    p.splits = (chunks + p.chunks_per_split - 1) / p.chunks_per_split;  // none empty
    return p;
}

}  // namespace kokoro::ops::igemm
