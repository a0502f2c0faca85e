// The fast convolutions' transforms around their per-point GEMMs: the CPU
// backend's kokoro_gpu.ops.fast_conv.PreparedConv1d ("winograd", "dft"; the
// NumPy lines of fast_conv.forward_tiles and fast_conv.inverse_tiles are the
// readable references). Before the GEMMs, the tiles of the input through B^T
// (and the DFT's Gauss sums) into the points; after them, the fold of the
// Gauss products, A^T, the bias and the store into the output in time order.
// Each in one pass, so that neither the tiles [Cin tiles, n] nor the
// outputs [Cout tiles, m] go through memory as arrays.
#pragma once

#include <cstdint>

namespace kokoro::cpu {

// The largest tile (outputs per tile) inverse_tiles takes.
constexpr int64_t kMaxTileOutputs = 32;

// x: the padded input at the chunk's first sample, [channels, >= phases ((tiles - 1) m + n)], rows
// x_stride floats apart. forward_t [n, n] (C-contiguous): B^T, n one of 8, 16, 32. points
// [n + pairs, channels, phases tiles] (C-contiguous): the per-point GEMMs' input for the chunk.
struct ForwardTiles {
    const float* x = nullptr;
    int64_t x_stride = 0;
    const float* forward_t = nullptr;
    float* points = nullptr;
    int64_t n = 0;
    int64_t pairs = 0;
    int64_t channels = 0;
    int64_t phases = 1;  // the dilation
    int64_t tiles = 0;   // per phase
    int64_t m = 0;       // the tiles' stride: outputs per tile
};

// points[p, c, r tiles + u] = sum_l forward_t[p, l] x[c, r + phases (u m + l)] for p < n, and the
// last pairs rows the sums of the two pairs-row blocks before them (fast_conv.expand_points).
void forward_tiles(const ForwardTiles& spec);

// products [points, channels, phases tiles] (C-contiguous): the per-point
// GEMMs' result for one chunk, phase r's tile u at column r tiles + u; the
// last 3 pairs rows are the DFT's Gauss blocks t1, t2, t3 (pairs = 0 for
// Winograd). inverse_t [points - pairs, m] (C-contiguous): A^T transposed.
// y: the chunk's output columns [channels, tiles m phases], rows y_stride
// floats apart; bias one per channel or nullptr.
struct InverseTiles {
    const float* products = nullptr;
    const float* inverse_t = nullptr;
    const float* bias = nullptr;
    float* y = nullptr;
    int64_t y_stride = 0;
    int64_t points = 0;
    int64_t pairs = 0;
    int64_t channels = 0;
    int64_t phases = 1;  // the dilation
    int64_t tiles = 0;   // per phase
    int64_t m = 0;       // outputs per tile, at most kMaxTileOutputs
};

// y[c, (u m + j) phases + r] = bias[c] + sum_p f[p, c, r tiles + u] inverse_t[p, j], where f is
// products with the Gauss blocks folded: t1 - t2 and (t1 - t3) + t2 in place of t1 and t2.
void inverse_tiles(const InverseTiles& spec);

}  // namespace kokoro::cpu
