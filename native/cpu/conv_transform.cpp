#include "conv_transform.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "dispatch.h"

namespace kokoro::cpu {

namespace {

// Tiles per block of one channel and phase in inverse_tiles: its folded products [rows, kBlock]
// stay in L1. A multiple of every group's tile count (12, 6, 4, 3).
constexpr int64_t kBlock = 192;

// The products of one block's nb tiles, folded: f[p, u] for the rows A^T reads (row stride kBlock).
KOKORO_CPU_INLINE void fold_block(const float* __restrict src, int64_t plane, int64_t lead, int64_t pairs,
                                  int64_t nb, float* __restrict f) {
    for (int64_t p = 0; p < lead; ++p)
#pragma omp simd
        for (int64_t u = 0; u < nb; ++u) f[p * kBlock + u] = src[p * plane + u];
    for (int64_t q = 0; q < pairs; ++q) {
        const float* t1 = src + (lead + q) * plane;
        const float* t2 = t1 + pairs * plane;
        const float* t3 = t2 + pairs * plane;
        float* re = f + (lead + q) * kBlock;
        float* im = re + pairs * kBlock;
        // The reference's order of operations: t3 = t1 - t3, t1 = t1 - t2, t2 = t3 + t2.
#pragma omp simd
        for (int64_t u = 0; u < nb; ++u) {
            re[u] = t1[u] - t2[u];
            im[u] = (t1[u] - t3[u]) + t2[u];
        }
    }
}

// U tiles: out[u, 0 .. Mp) = bias + sum_p f[p, u] a[p, 0 .. Mp), f's rows f_stride apart, a's padded
// with zeros to Mp, out's rows out_stride apart. Vectorised over a tile's outputs, which are
// contiguous in y (no transpose), with U Mp / 8 = 12 AVX2 accumulators: each row of a is loaded once
// for U tiles, each f broadcast once for Mp outputs.
template <int Mp, int U>
KOKORO_CPU_INLINE void tile_group(const float* f, int64_t f_stride, const float* a, int64_t rows, float bias,
                                  float* out, int64_t out_stride) {
    float acc[U][Mp];
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u)
#pragma omp simd
        for (int j = 0; j < Mp; ++j) acc[u][j] = bias;
    for (int64_t p = 0; p < rows; ++p) {
        const float* ap = a + p * Mp;
        const float* fp = f + p * f_stride;
#pragma GCC unroll 16
        for (int u = 0; u < U; ++u) {
            const float x = fp[u];
#pragma omp simd
            for (int j = 0; j < Mp; ++j) acc[u][j] += x * ap[j];
        }
    }
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u)
#pragma GCC unroll 32
        for (int j = 0; j < Mp; ++j) out[u * out_stride + j] = acc[u][j];
}

template <int Mp>
KOKORO_CPU_INLINE void inverse_tiles_padded(const InverseTiles& s) {
    constexpr int U = 96 / Mp;
    const int64_t lead = s.points - 3 * s.pairs, rows = s.points - s.pairs, m = s.m, d = s.phases;
    const int64_t cols = d * s.tiles, plane = s.channels * cols;
    std::vector<float> a(static_cast<size_t>(rows * Mp), 0.f), f(static_cast<size_t>(rows * kBlock));
    for (int64_t p = 0; p < rows; ++p) std::copy_n(s.inverse_t + p * m, m, a.data() + p * Mp);
    float part[U * Mp];
    for (int64_t c = 0; c < s.channels; ++c) {
        const float bias = s.bias ? s.bias[c] : 0.f;
        float* yc = s.y + c * s.y_stride;
        for (int64_t r = 0; r < d; ++r) {
            for (int64_t u0 = 0; u0 < s.tiles; u0 += kBlock) {
                const int64_t nb = std::min(kBlock, s.tiles - u0);
                const float* src = s.products + c * cols + r * s.tiles + u0;
                // Without Gauss blocks the whole groups read the products where they are; the rest
                // goes through f, where a last group past nb reads stale columns (dropped outputs).
                const int64_t direct = s.pairs ? 0 : nb / U * U;
                if (direct < nb) fold_block(src + direct, plane, lead, s.pairs, nb - direct, f.data());
                for (int64_t g = 0; g < nb; g += U) {
                    const int64_t u = u0 + g;
                    const float* fg = g < direct ? src + g : f.data() + g - direct;
                    const int64_t f_stride = g < direct ? plane : kBlock;
                    // Undilated, a tile's outputs are stored as Mp floats, whole vectors, where those
                    // past its m lie in the row's next tiles, which are stored after it.
                    if (d == 1 && (u + U - 1) * m + Mp <= s.tiles * m) {
                        tile_group<Mp, U>(fg, f_stride, a.data(), rows, bias, yc + u * m, m);
                        continue;
                    }
                    tile_group<Mp, U>(fg, f_stride, a.data(), rows, bias, part, Mp);
                    for (int64_t t = 0; t < std::min<int64_t>(U, s.tiles - u); ++t)
                        for (int64_t j = 0; j < m; ++j) yc[((u + t) * m + j) * d + r] = part[t * Mp + j];
                }
            }
        }
    }
}

// forward_tiles: groups of kWidth tiles times kPointBlock points, 8 AVX2 accumulators (GCC spills
// some of 12).
constexpr int64_t kWidth = 16;
constexpr int kPointBlock = 4;

// Eight floats as one value, for the 8 x 8 transpose: GCC and Clang's vector extensions, which
// compile to AVX shuffles in the x86-64-v3 clone and to SSE ones in the baseline. The compilers
// vectorise no transpose written as plain loops (they gather element by element).
typedef float Float8 __attribute__((vector_size(32)));
#if defined(__clang__) || __GNUC__ >= 12
#define KOKORO_SHUFFLE8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
typedef int32_t Index8 __attribute__((vector_size(32)));
#define KOKORO_SHUFFLE8(a, b, ...) __builtin_shuffle(a, b, Index8{__VA_ARGS__})
#endif

// out[j, i] = in[i, j] for i, j < 8, rows in_stride and out_stride floats apart.
KOKORO_CPU_INLINE void transpose8(const float* in, int64_t in_stride, float* out, int64_t out_stride) {
    Float8 r[8], t[8];
    for (int i = 0; i < 8; ++i) std::memcpy(&r[i], in + i * in_stride, sizeof(Float8));
    for (int i = 0; i < 8; i += 2) {
        t[i] = KOKORO_SHUFFLE8(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = KOKORO_SHUFFLE8(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = KOKORO_SHUFFLE8(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        r[i + 1] = KOKORO_SHUFFLE8(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        r[i + 2] = KOKORO_SHUFFLE8(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        r[i + 3] = KOKORO_SHUFFLE8(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
    for (int i = 0; i < 4; ++i) {
        t[i] = KOKORO_SHUFFLE8(r[i], r[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        t[i + 4] = KOKORO_SHUFFLE8(r[i], r[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
    for (int i = 0; i < 8; ++i) std::memcpy(out + i * out_stride, &t[i], sizeof(Float8));
}

// One channel's inputs as rows of `width` = m phases samples, transposed: xt[q, i] = x[i width + q]
// for q < width rounded up to 8 (rows ld floats apart), zero from x[limit] on. Tile u of phase r
// reads its input l at xt[(l % m) phases + r, u + l / m], so that kWidth tiles' input l is one
// contiguous load.
KOKORO_CPU_INLINE void transpose_rows(const float* __restrict x, int64_t width, int64_t limit, int64_t ld,
                                      float* __restrict xt) {
    const int64_t height = (width + 7) / 8 * 8;
    int64_t i0 = 0;
    for (; i0 + 8 <= ld && (i0 + 7) * width + height <= limit; i0 += 8)
        for (int64_t q = 0; q < height; q += 8) transpose8(x + i0 * width + q, width, xt + q * ld + i0, ld);
    for (int64_t q = 0; q < height; ++q)
        for (int64_t i = i0; i < ld; ++i) xt[q * ld + i] = i * width + q < limit ? x[i * width + q] : 0.f;
}

// kWidth tiles' points p0 .. p0 + kPointBlock: out[p, u] = sum_l bt[p, l] xt[off[l] + u], out's rows
// out_stride floats apart. Vectorised over the tiles, which are contiguous in the points.
template <int N>
KOKORO_CPU_INLINE void forward_group(const float* xt, const int64_t* off, const float* bt, float* out,
                                     int64_t out_stride) {
    float acc[kPointBlock][kWidth];
#pragma GCC unroll 4
    for (int p = 0; p < kPointBlock; ++p)
#pragma omp simd
        for (int u = 0; u < kWidth; ++u) acc[p][u] = 0.f;
    for (int l = 0; l < N; ++l) {
        const float* xl = xt + off[l];
#pragma GCC unroll 4
        for (int p = 0; p < kPointBlock; ++p) {
            const float b = bt[p * N + l];
#pragma omp simd
            for (int u = 0; u < kWidth; ++u) acc[p][u] += b * xl[u];
        }
    }
    // Unrolled, not a simd loop: GCC makes that a block copy, which keeps acc in memory.
#pragma GCC unroll 4
    for (int p = 0; p < kPointBlock; ++p)
#pragma GCC unroll 16
        for (int u = 0; u < kWidth; ++u) out[p * out_stride + u] = acc[p][u];
}

template <int N>
KOKORO_CPU_INLINE void forward_tiles_n(const ForwardTiles& s) {
    const int64_t m = s.m, d = s.phases, cols = d * s.tiles, plane = s.channels * cols;
    const int64_t groups = (s.tiles + kWidth - 1) / kWidth;
    const int64_t ld = groups * kWidth + (N - 1) / m;
    std::vector<float> xt(static_cast<size_t>((m * d + 7) / 8 * 8 * ld));
    int64_t off[N];
    float part[kPointBlock * kWidth];
    const int64_t lead = N - 2 * s.pairs;
    const int64_t limit = d * ((s.tiles - 1) * m + N);
    for (int64_t c = 0; c < s.channels; ++c) {
        transpose_rows(s.x + c * s.x_stride, m * d, limit, ld, xt.data());
        for (int64_t r = 0; r < d; ++r) {
            for (int l = 0; l < N; ++l) off[l] = ((l % m) * d + r) * ld + l / m;
            float* row = s.points + c * cols + r * s.tiles;
            for (int64_t g = 0; g < groups; ++g) {
                const int64_t u = g * kWidth, valid = std::min(kWidth, s.tiles - u);
                for (int p0 = 0; p0 < N; p0 += kPointBlock) {
                    // A last group past the tiles goes through part, which keeps the valid ones.
                    float* dst = row + p0 * plane + u;
                    const bool whole = valid == kWidth;
                    forward_group<N>(xt.data() + u, off, s.forward_t + p0 * N, whole ? dst : part,
                                     whole ? plane : kWidth);
                    if (whole) continue;
                    for (int p = 0; p < kPointBlock; ++p)
                        for (int64_t t = 0; t < valid; ++t) dst[p * plane + t] = part[p * kWidth + t];
                }
            }
            for (int64_t q = 0; q < s.pairs; ++q) {
                const float* a = row + (lead + q) * plane;
                const float* b = a + s.pairs * plane;
                float* sum = row + (N + q) * plane;
#pragma omp simd
                for (int64_t u = 0; u < s.tiles; ++u) sum[u] = a[u] + b[u];
            }
        }
    }
}

}  // namespace

KOKORO_CPU_CLONES void inverse_tiles(const InverseTiles& spec) {
    if (spec.m <= 8)
        inverse_tiles_padded<8>(spec);
    else if (spec.m <= 16)
        inverse_tiles_padded<16>(spec);
    else if (spec.m <= 24)
        inverse_tiles_padded<24>(spec);
    else
        inverse_tiles_padded<32>(spec);
}

KOKORO_CPU_CLONES void forward_tiles(const ForwardTiles& spec) {
    if (spec.n == 8)
        forward_tiles_n<8>(spec);
    else if (spec.n == 16)
        forward_tiles_n<16>(spec);
    else
        forward_tiles_n<32>(spec);
}

}  // namespace kokoro::cpu
