// The fp32 convs' planning helpers and kernels (cuBLAS-side im2col, taps,
// epilogue, direct and pointwise kernels, col2im) and the depthwise
// transposed conv into half rows.
// Included by native/ops/conv.cu only, after per_channel_grid.h.
#pragma once

namespace kokoro::ops {
namespace {

constexpr int kMinGemmReduction = 16;  // Cin * K below this: the direct kernel
constexpr int64_t kIm2colChunkFloats = int64_t(1) << 23;
// Floats of the larger of acc [Cout, n] and win [Cin, ~n] per time chunk.
constexpr int64_t kTapChunkFloats = int64_t(1) << 21;
constexpr int kAlignFloats = 4;  // 16 bytes

bool conv1d_uses_gemm(int Cin, int K, int groups) {
    return groups == 1 && Cin * K >= kMinGemmReduction;
}
bool conv1d_is_pointwise(int K, int stride, int pad) { return K == 1 && stride == 1 && pad == 0; }
// Per-tap GEMMs where im2col would need more than one chunk; shorter convs
// take im2col + ONE GEMM (3 launches instead of a window copy per alignment
// class and a GEMM per tap: these are latency bound).
bool conv1d_uses_taps(int Cin, int K, int stride, int pad, int Tout) {
    return stride == 1 && !conv1d_is_pointwise(K, stride, pad) &&
           int64_t(Cin) * K * Tout > kIm2colChunkFloats;
}
int im2col_chunk_cols(int reduction) {
    return int(std::max<int64_t>(256, kIm2colChunkFloats / reduction));
}
// The pointwise kernel: its time tile, and w plus the tile of x within the
// default shared memory.
constexpr int kPointwiseTile = 128;
constexpr int kPointwiseRows = 16;  // channels per warp pass (warp_partials)
size_t pointwise_smem_bytes(int Cin, int Cout) {
    return sizeof(float) * size_t(Cin) * (Cout + kPointwiseTile);
}
bool conv1d_uses_pointwise(int Cin, int Cout, int K, int stride, int pad, int groups) {
    return groups == 1 && conv1d_is_pointwise(K, stride, pad) &&
           pointwise_smem_bytes(Cin, Cout) <= kDefaultSharedBytes;
}
bool conv_transpose1d_uses_gemm(int Cin, int groups) {
    return groups == 1 && Cin >= kMinGemmReduction;
}

// The time chunking of a per-tap conv: n outputs per chunk (the acc pitch)
// and the window pitch ldx, both multiples of kAlignFloats.
struct TapChunks {
    int n, ldx;
};
TapChunks tap_chunks(int Cin, int Cout, int Tout, int K, int dilation) {
    const int64_t most = std::max<int64_t>(256, kTapChunkFloats / std::max(Cin, Cout));
    const int n = int(std::min<int64_t>(most, round_up(Tout, kAlignFloats))) / kAlignFloats *
                  kAlignFloats;
    return {n, round_up(n + dilation * (K - 1), kAlignFloats)};
}

// Calls fn(k, j) for every tap k of a transposed conv whose input step j
// lands on output t (t = j * stride - pad + k), k ascending.
template <typename Fn>
__device__ void for_each_transposed_tap(int t, int K, int stride, int pad, int Tin, Fn fn) {
    const int p = t + pad;
    for (int k = p % stride; k < K && k <= p; k += stride) {
        const int j = (p - k) / stride;
        if (j < Tin) fn(k, j);
    }
}

// win[ci, j] = x[ci, src0 + j] for j < ldx, zero outside [0, Tin). grid.y = ci.
__global__ void shifted_window_kernel(const float* x, float* win, int Tin, int src0, int ldx) {
    await_producers();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= ldx) return;
    const int src = src0 + j;
    win[int64_t(blockIdx.y) * ldx + j] =
        src >= 0 && src < Tin ? x[int64_t(blockIdx.y) * Tin + src] : 0.f;
}

// cols[r, tt] for r = k * Cin + ci and tt in [0, n): x at column
// (t0 + tt) * stride - pad + k * dil, zero outside [0, Tin). grid.y = r.
__global__ void im2col_kernel(const float* x, float* cols, int Cin, int Tin, int stride, int pad,
                              int dilation, int t0, int n) {
    await_producers();
    const int tt = blockIdx.x * blockDim.x + threadIdx.x;
    if (tt >= n) return;
    const int r = blockIdx.y, k = r / Cin, ci = r % Cin;
    const int src = (t0 + tt) * stride - pad + k * dilation;
    cols[int64_t(r) * n + tt] = src >= 0 && src < Tin ? x[int64_t(ci) * Tin + src] : 0.f;
}

// y[c, t] = in[c, t] (+ b[c]) (+ residual[c, t]) for t < n; in has row
// pitch ld_in, y and residual ld_y (either of b, residual may be null; in
// and residual may equal y). grid.y = c.
__global__ void epilogue_kernel(const float* in, int ld_in, const float* b, const float* residual,
                                float* y, int ld_y, int n) {
    await_producers();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const int64_t i = int64_t(blockIdx.y) * ld_y + t;
    float v = in[int64_t(blockIdx.y) * ld_in + t];
    if (b != nullptr) v += b[blockIdx.y];
    if (residual != nullptr) v += residual[i];
    y[i] = v;
}

// Direct grouped conv1d, one thread per y[co, t]. grid.y = co.
__global__ void conv1d_direct_kernel(const float* x, const float* w, const float* b, float* y,
                                     int Cin, int Cout, int Tin, int Tout, int K, int stride,
                                     int pad, int dilation, int groups, const float* residual) {
    await_producers();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= Tout) return;
    const int co = blockIdx.y;
    const int cin_g = Cin / groups, ci0 = co / (Cout / groups) * cin_g;
    const float* wr = w + int64_t(co) * K * cin_g;
    float acc = 0.f;
    for (int ci = 0; ci < cin_g; ++ci) {
        const float* xr = x + int64_t(ci0 + ci) * Tin;
        for (int k = 0; k < K; ++k) {
            const int src = t * stride - pad + k * dilation;
            if (src >= 0 && src < Tin) acc += wr[k * cin_g + ci] * xr[src];
        }
    }
    if (b != nullptr) acc += b[co];
    const int64_t i = int64_t(co) * Tout + t;
    if (residual != nullptr) acc += residual[i];
    y[i] = acc;
}

// Pointwise conv of few input channels (conv.cu's header comment): block = one
// 128-step time tile, warp w channels 16 w .. 16 w + 15 (then + 128, ...),
// lane l steps l + 32 i; sums in input-channel order from the bias. stats
// (may be null): each channel's partial over the tile (channel_stats.cuh).
__global__ void __launch_bounds__(kThreads)
    conv1d_pointwise_kernel(const float* x, const float* w, const float* b, float* y, int Cin,
                            int Cout, int T, const float* residual, double* stats) {
    await_producers();
    constexpr int kWarps = kThreads / 32, kPerLane = kPointwiseTile / 32;
    extern __shared__ float pointwise_smem[];
    float* const ws = pointwise_smem;        // w [Cout, Cin]
    float* const xs = ws + int64_t(Cout) * Cin;  // x [Cin, kPointwiseTile]
    const int t0 = blockIdx.x * kPointwiseTile, parts = int(gridDim.x);
    for (int i = threadIdx.x; i < Cout * Cin; i += kThreads) ws[i] = w[i];
    for (int i = threadIdx.x; i < Cin * kPointwiseTile; i += kThreads) {
        const int k = i / kPointwiseTile, t = t0 + i % kPointwiseTile;
        xs[i] = t < T ? x[int64_t(k) * T + t] : 0.f;
    }
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int c0 = warp * kPointwiseRows; c0 < Cout; c0 += kWarps * kPointwiseRows) {
        const int rows = min(kPointwiseRows, Cout - c0);
        float v[kPointwiseRows][kPerLane];
#pragma unroll
        for (int j = 0; j < kPointwiseRows; ++j) {
            const int c = min(c0 + j, Cout - 1);  // rows past Cout: computed, never stored
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) {
                const int t = t0 + lane + 32 * i;
                v[j][i] = (b != nullptr ? b[c] : 0.f) +
                          (residual != nullptr && t < T ? residual[int64_t(c) * T + t] : 0.f);
            }
        }
        for (int k = 0; k < Cin; ++k) {
            float xv[kPerLane];
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) xv[i] = xs[k * kPointwiseTile + lane + 32 * i];
#pragma unroll
            for (int j = 0; j < kPointwiseRows; ++j) {
                const float wv = ws[min(c0 + j, Cout - 1) * Cin + k];
#pragma unroll
                for (int i = 0; i < kPerLane; ++i) v[j][i] = fmaf(wv, xv[i], v[j][i]);
            }
        }
#pragma unroll
        for (int j = 0; j < kPointwiseRows; ++j) {
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) {
                const int t = t0 + lane + 32 * i;
                if (j < rows && t < T) y[int64_t(c0 + j) * T + t] = v[j][i];
            }
        }
        if (stats != nullptr) {
            warp_partials(v, T - t0, stats + (int64_t(c0) * parts + blockIdx.x) * kPartialDoubles,
                          int64_t(parts) * kPartialDoubles, rows);
        }
    }
}

// Overlap-add of the per-tap GEMM output cols [K * Cout, Tin] (+ bias). grid.y = co.
__global__ void col2im_kernel(const float* cols, const float* b, float* y, int Cout, int Tin,
                              int Tout, int K, int stride, int pad) {
    await_producers();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= Tout) return;
    const int co = blockIdx.y;
    float acc = 0.f;
    for_each_transposed_tap(t, K, stride, pad, Tin, [&](int k, int j) {
        acc += cols[(int64_t(k) * Cout + co) * Tin + j];
    });
    if (b != nullptr) acc += b[co];
    y[int64_t(co) * Tout + t] = acc;
}

// Direct grouped transposed conv, one thread per y[co, t]. grid.y = co.
__global__ void conv_transpose1d_direct_kernel(const float* x, const float* w, const float* b,
                                               float* y, int Cin, int Cout, int Tin, int Tout,
                                               int K, int stride, int pad, int groups) {
    await_producers();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= Tout) return;
    const int co = blockIdx.y;
    const int cout_g = Cout / groups, cin_g = Cin / groups;
    const int g = co / cout_g, co_l = co % cout_g;
    float acc = 0.f;
    for_each_transposed_tap(t, K, stride, pad, Tin, [&](int k, int j) {
        for (int ci = g * cin_g; ci < (g + 1) * cin_g; ++ci) {
            acc += w[(int64_t(ci) * K + k) * cout_g + co_l] * x[int64_t(ci) * Tin + j];
        }
    });
    if (b != nullptr) acc += b[co];
    y[int64_t(co) * Tout + t] = acc;
}

// A depthwise transposed conv's output as a write_half_rows source (index
// c Tout + t), each value as conv_transpose1d_direct_kernel computes it:
// taps ascending, then the bias.
struct DepthwiseTransposedSource {
    const float* x;
    const float* w;
    const float* b;
    int Tin, Tout, K, stride, pad;
    __device__ float operator[](int64_t i) const {
        const int c = int(i / Tout), t = int(i - int64_t(c) * Tout);
        float acc = 0.f;
        for_each_transposed_tap(t, K, stride, pad, Tin, [&](int k, int j) {
            acc += w[int64_t(c) * K + k] * x[int64_t(c) * Tin + j];
        });
        if (b != nullptr) acc += b[c];
        return acc;
    }
};

__global__ void depthwise_transposed_half_rows_kernel(DepthwiseTransposedSource x, __half* y,
                                                      __half* y_lo, int C) {
    await_producers();
    write_half_rows(x, y, y_lo, C, x.Tout, [](int) { return [](float v) { return v; }; });
}

void launch_epilogue(const float* in, int ld_in, const float* b, const float* residual, float* y,
                     int C, int ld_y, int n, cudaStream_t stream) {
    launch_dependent(epilogue_kernel, per_channel_grid(C, n), dim3(kThreads), 0, stream,
                     "epilogue_kernel", in, ld_in, b, residual, y, ld_y, n);
}

// The per-tap path (conv.cu's header comment); scratch holds acc [Cout, n] then win [Cin, ldx].
void conv1d_taps(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
                 int Cin, int Cout, int Tin, int Tout, int K, int pad, int dilation,
                 const float* residual, float* scratch, cudaStream_t stream, GemmMath math) {
    const TapChunks chunks = tap_chunks(Cin, Cout, Tout, K, dilation);
    float* acc = scratch;
    float* win = scratch + int64_t(Cout) * chunks.n;
    for (int t0 = 0; t0 < Tout; t0 += chunks.n) {
        const int n = std::min(chunks.n, Tout - t0);
        bool first = true;
        for (int r = 0; r < kAlignFloats; ++r) {
            bool copied = false;
            for (int k = 0; k < K; ++k) {
                const int offset = k * dilation;
                if (offset % kAlignFloats != r) continue;
                if (!copied) {
                    launch_dependent(shifted_window_kernel, per_channel_grid(Cin, chunks.ldx),
                                     dim3(kThreads), 0, stream, "shifted_window_kernel", x, win,
                                     Tin, t0 - pad + r, chunks.ldx);
                    copied = true;
                }
                matmul(handle, false, false, Cout, n, Cin, w + int64_t(k) * Cin, K * Cin,
                       win + (offset - r), chunks.ldx, first ? 0.f : 1.f, acc, chunks.n, stream,
                       math);
                first = false;
            }
        }
        launch_epilogue(acc, chunks.n, b, residual == nullptr ? nullptr : residual + t0, y + t0,
                        Cout, Tout, n, stream);
    }
}

}  // namespace
}  // namespace kokoro::ops
