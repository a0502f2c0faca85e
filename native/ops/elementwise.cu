// Pointwise and index ops: embeddings, activations, copies, the duration head
// and the hard alignment, and every resampling/padding along time.
//
// Ops that read one source column per output column along time (expand by
// alignment, nearest upsampling, reflection padding) share one gather kernel
// templated on the index map; pointwise maps share one kernel templated on
// the functor. Everything is one thread per output element with time (the
// contiguous axis) on threadIdx.x, so loads and stores coalesce; the
// transposes (rows <-> channels, fp32 -> FP16 half rows) go through shared
// tiles instead.
#include <cmath>

#include "kokoro/block_scan.cuh"
#include "kokoro/check.h"
#include "kokoro/half_rows.cuh"
#include "kokoro/launch.cuh"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

// out[t, :] = word[ids[t], :] + type0 + pos[p, :] (HF adds the token type
// first, then the position), p = positions[t] or t; pos and type0 may be null.
__global__ void embeddings_kernel(const int32_t* ids, const float* word, const float* pos,
                                  const float* type0, const int32_t* positions, float* out, int T,
                                  int dim) {
    await_producers();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i >= int64_t(T) * dim) return;
    const int t = int(i / dim), d = int(i % dim);
    float v = word[int64_t(ids[t]) * dim + d];
    if (type0 != nullptr) v += type0[d];
    if (pos != nullptr) v += pos[int64_t(positions != nullptr ? positions[t] : t) * dim + d];
    out[i] = v;
}

struct GeluNew {
    __device__ float operator()(float x) const {
        const float c = 0.7978845608028654f;  // sqrt(2 / pi)
        return 0.5f * x * (1.f + tanhf(c * (x + 0.044715f * (x * x * x))));
    }
};

struct LeakyRelu {
    float slope;
    __device__ float operator()(float x) const { return x >= 0.f ? x : x * slope; }
};

// y = fn(x + bias[column]) on [n / cols, cols]; bias may be null (y = fn(x)).
template <typename Fn>
__global__ void map_kernel(SplitSums x, const float* bias, float* y, int64_t n, int cols, Fn fn) {
    await_producers();
    release_dependents();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i < n) y[i] = fn(bias != nullptr ? x[i] + bias[i % cols] : x[i]);
}

// y_split [2, rows, pitch] = the split FP16 parts (hi, then lo) of
// gelu_new(x + bias) on [rows, cols], zero past cols.
__global__ void gelu_split_kernel(SplitSums x, const float* bias, __half* y_split, int64_t rows,
                                  int cols, int pitch) {
    await_producers();
    release_dependents();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, n = rows * pitch;
    if (i >= n) return;
    const int c = int(i % pitch);
    const int64_t at = i / pitch * cols + c;
    const float v = c < cols ? GeluNew{}(bias != nullptr ? x[at] + bias[c] : x[at]) : 0.f;
    split_half(v, y_split[i], y_split[n + i]);
}

__global__ void add_scaled_kernel(const float* a, const float* b, float* out, int64_t n,
                                  float scale) {
    await_producers();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = (a[i] + b[i]) * scale;
}

// out[c, r] = in[r, c] through a padded 32x32 shared tile.
__global__ void transpose_kernel(const float* in, float* out, int rows, int cols) {
    await_producers();
    __shared__ float tile[32][33];
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
        const int r = r0 + dy, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[dy][threadIdx.x] = in[int64_t(r) * cols + c];
    }
    __syncthreads();
    for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
        const int c = c0 + dy, r = r0 + threadIdx.x;
        if (r < rows && c < cols) out[int64_t(c) * rows + r] = tile[threadIdx.x][dy];
    }
}

__device__ float sigmoid(float x) {
    const float e = expf(-fabsf(x));
    return x >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
}

// One warp per token: dur[t] = max(1, rint(sum_j sigmoid(logits[t, j]) / speed)).
__global__ void durations_kernel(const float* logits, int T, int max_dur, float speed,
                                 int32_t* dur) {
    await_producers();
    const int t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (t >= T) return;
    float sum = 0.f;
    for (int j = lane; j < max_dur; j += 32) sum += sigmoid(logits[int64_t(t) * max_dur + j]);
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) dur[t] = max(1, int(rintf(sum / speed)));
}

// One block: a scan of the durations, 1024 tokens at a time with a running
// carry, then each token writes its own run of frames.
__global__ void frame_token_kernel(const int32_t* dur, int T, int32_t* frame_token) {
    await_producers();
    __shared__ int warp_sums[32];
    __shared__ int carry;
    if (threadIdx.x == 0) carry = 0;
    __syncthreads();
    for (int base = 0; base < T; base += blockDim.x) {
        const int t = base + threadIdx.x;
        const int d = t < T ? dur[t] : 0;
        const int start = block_inclusive_scan(d, warp_sums, &carry) - d;
        for (int f = 0; f < d; ++f) frame_token[start + f] = t;
    }
}

// Source column of each output column, one functor per op.
struct FrameTokenMap {
    const int32_t* frame_token;
    __device__ int operator()(int j) const { return frame_token[j]; }
};
struct NearestMap {
    int scale;
    __device__ int operator()(int j) const { return j / scale; }
};
struct ReflectMap {
    int T, left;
    __device__ int operator()(int j) const {
        int s = j - left;
        if (s < 0) s = -s;
        if (s >= T) s = 2 * (T - 1) - s;
        return s;
    }
};

// out[c, j] = x[c, map(j)]: x [C, Tin], out [C, Tout]; grid.y = channel.
template <typename Map>
__global__ void gather_time_kernel(const float* x, float* out, int Tin, int Tout, Map map) {
    await_producers();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t c = blockIdx.y;
    if (j < Tout) out[c * Tout + j] = x[c * Tin + map(j)];
}

template <typename Map>
void gather_time(const float* x, float* out, int C, int Tin, int Tout, Map map,
                 cudaStream_t stream) {
    if (C == 0 || Tout == 0) return;
    const dim3 grid(blocks_for(Tout), unsigned(C));
    launch_dependent(gather_time_kernel<Map>, grid, dim3(kThreads), 0, stream,
                     "gather_time_kernel", x, out, Tin, Tout, map);
}

// out[f, c] = x[frame_token[f], c] on time-major rows.
__global__ void expand_frame_rows_kernel(const float* x, const int32_t* frame_token, float* out,
                                         int C, int64_t n) {
    await_producers();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = x[int64_t(frame_token[i / C]) * C + i % C];
}

// F.interpolate(mode="linear", align_corners=False) with the given scale;
// the source position is computed in double as PyTorch does.
__global__ void interpolate_linear_kernel(const float* x, float* out, int Tin, int Tout,
                                          double scale) {
    await_producers();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t c = blockIdx.y;
    if (j >= Tout) return;
    const double src = fmax((j + 0.5) / scale - 0.5, 0.0);
    const int i0 = min(int(src), Tin - 1);
    const int i1 = min(i0 + 1, Tin - 1);
    const float w1 = float(src - i0);
    out[c * Tout + j] = x[c * Tin + i0] * (1.f - w1) + x[c * Tin + i1] * w1;
}

template <typename H>
__global__ void to_half_rows_kernel(SumSource<H> x, __half* y, __half* y_lo, int C, int T,
                                    float leaky_slope) {
    await_producers();
    const LeakyRelu act{leaky_slope};  // slope 1: the identity
    write_half_rows(x, y, y_lo, C, T, [act](int) { return act; });
}

}  // namespace

void albert_embeddings(const int32_t* ids, const float* word, const float* pos,
                       const float* type0, float* out, int T, int dim, cudaStream_t stream,
                       const int32_t* positions) {
    const int64_t n = int64_t(T) * dim;
    if (n == 0) return;
    launch_dependent(embeddings_kernel, dim3(blocks_for(n)), dim3(kThreads), 0, stream,
                     "embeddings_kernel", ids, word, pos, type0, positions, out, T, dim);
}

void embedding(const int32_t* ids, const float* table, float* out, int T, int dim,
               cudaStream_t stream) {
    albert_embeddings(ids, table, nullptr, nullptr, out, T, dim, stream);
}

void gelu_new(SplitSums x, float* y, int64_t rows, int cols, const float* bias,
              cudaStream_t stream) {
    const int64_t n = rows * cols;
    if (n == 0) return;
    launch_dependent(map_kernel<GeluNew>, dim3(blocks_for(n)), dim3(kThreads), 0, stream,
                     "map_kernel<GeluNew>", x, bias, y, n, cols, GeluNew{});
}

void gelu_new_split(SplitSums x, __half* y_split, int64_t rows, int cols, const float* bias,
                    cudaStream_t stream) {
    const int pitch = split_pitch(cols);
    const int64_t n = rows * pitch;
    if (n == 0) return;
    launch_dependent(gelu_split_kernel, dim3(blocks_for(n)), dim3(kThreads), 0, stream,
                     "gelu_split_kernel", x, bias, y_split, rows, cols, pitch);
}

void leaky_relu(const float* x, float* y, int64_t n, float slope, cudaStream_t stream) {
    if (n == 0) return;
    launch_dependent(map_kernel<LeakyRelu>, dim3(blocks_for(n)), dim3(kThreads), 0, stream,
                     "map_kernel<LeakyRelu>", x, nullptr, y, n, 1, LeakyRelu{slope});
}

void add_scaled(const float* a, const float* b, float* out, int64_t n, float scale,
                cudaStream_t stream) {
    if (n == 0) return;
    launch_dependent(add_scaled_kernel, dim3(blocks_for(n)), dim3(kThreads), 0, stream,
                     "add_scaled_kernel", a, b, out, n, scale);
}

void copy_rows(const float* src, int src_pitch, float* dst, int dst_pitch, int rows, int cols,
               cudaStream_t stream) {
    if (rows == 0 || cols == 0) return;
    KOKORO_CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_pitch) * sizeof(float), src,
                                        size_t(src_pitch) * sizeof(float),
                                        size_t(cols) * sizeof(float), size_t(rows),
                                        cudaMemcpyDeviceToDevice, stream));
}

void transpose(const float* in, float* out, int rows, int cols, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return;
    const dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32));
    launch_dependent(transpose_kernel, grid, dim3(32, 8), 0, stream, "transpose_kernel", in, out,
                     rows, cols);
}

void durations_from_logits(const float* logits, int T, int max_dur, float speed, int32_t* dur,
                           cudaStream_t stream) {
    if (T == 0) return;
    const int rows_per_block = kThreads / 32;
    launch_dependent(durations_kernel, dim3(unsigned((T + rows_per_block - 1) / rows_per_block)),
                     dim3(kThreads), 0, stream, "durations_kernel", logits, T, max_dur, speed, dur);
}

void frame_token_index(const int32_t* dur, int T, int32_t* frame_token, cudaStream_t stream) {
    if (T == 0) return;
    launch_dependent(frame_token_kernel, dim3(1), dim3(1024), 0, stream, "frame_token_kernel", dur,
                     T, frame_token);
}

void expand_frames(const float* x, const int32_t* frame_token, float* out, int C, int T, int F,
                   cudaStream_t stream) {
    gather_time(x, out, C, T, F, FrameTokenMap{frame_token}, stream);
}

void expand_frame_rows(const float* x, const int32_t* frame_token, float* out, int C, int F,
                       cudaStream_t stream) {
    const int64_t n = int64_t(F) * C;
    if (n == 0) return;
    launch_dependent(expand_frame_rows_kernel, dim3(blocks_for(n)), dim3(kThreads), 0, stream,
                     "expand_frame_rows_kernel", x, frame_token, out, C, n);
}

void upsample_nearest(const float* x, float* out, int C, int T, int scale, cudaStream_t stream) {
    gather_time(x, out, C, T, T * scale, NearestMap{scale}, stream);
}

void reflection_pad(const float* x, float* out, int C, int T, int left, int right,
                    cudaStream_t stream) {
    gather_time(x, out, C, T, left + T + right, ReflectMap{T, left}, stream);
}

void interpolate_linear(const float* x, float* out, int C, int Tin, int Tout, double scale,
                        cudaStream_t stream) {
    if (C == 0 || Tout == 0) return;
    const dim3 grid(blocks_for(Tout), unsigned(C));
    launch_dependent(interpolate_linear_kernel, grid, dim3(kThreads), 0, stream,
                     "interpolate_linear_kernel", x, out, Tin, Tout, scale);
}

void to_half_rows(ScaledSum x, __half* y, int C, int T, HalfOperands form, cudaStream_t stream,
                  float leaky_slope) {
    if (C == 0 || T == 0) return;
    __half* y_lo = half_rows_lo(y, C, T, form);
    if (x.half()) {
        launch_dependent(to_half_rows_kernel<__half>, half_rows_grid(C, T),
                         dim3(kHalfRowsThreads), 0, stream, "to_half_rows_kernel",
                         SumSource<__half>{x.x0.f16, x.x1.f16, x.x2.f16, x.scale}, y, y_lo, C, T,
                         leaky_slope);
        return;
    }
    launch_dependent(to_half_rows_kernel<float>, half_rows_grid(C, T), dim3(kHalfRowsThreads), 0,
                     stream, "to_half_rows_kernel",
                     SumSource<float>{x.x0.f32, x.x1.f32, x.x2.f32, x.scale}, y, y_lo, C, T,
                     leaky_slope);
}

}  // namespace kokoro::ops
