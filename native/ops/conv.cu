// 1-D convolutions on channels-first [C, T] tensors. Weights come with the
// kernel axis in the middle (ops.h): Conv1d [Cout, K, Cin/groups],
// ConvTranspose1d [Cin, K, Cout/groups], so that one tap of every output
// channel is a [Cout, Cin] matrix with row pitch K * Cin.
//
// Conv1d, dense, stride 1 (the generator, decoder and text encoder convs), in
// fp32 mode: per-tap GEMMs, no im2col. Per time chunk of n outputs, taps
// grouped by alignment class r = (k * dil) mod 4: the input window with its
// zero padding is copied once per class, shifted by r (win[ci, j] =
// xpad[ci, t0 + r + j], row pitch a multiple of 4 floats), then each tap of
// the class, k * dil = 4q + r, is one GEMM
//   acc[Cout, n] (+)= w_k[Cout, Cin] @ win[:, 4q : 4q + n]
// (beta 0 for the first tap, 1 after). Every base and pitch is then 16-byte
// aligned where Cin % 4 == 0, so cuBLAS can pick its Hopper kernels. Chunks
// bound acc and win, which then stay in L2 across the taps. One epilogue
// pass writes y = acc + bias + residual.
//
// Conv1d, dense, stride 1, K >= 2, on the tensor cores (precision "fast",
// conv1d_half_rows): one implicit-GEMM kernel, y[Cout, T] = W[Cout, K * Cin]
// @ X[K * Cin, T] with X[(k, ci), t] = x[t + k * dil - pad, ci] never
// materialised. Operands are FP16 with fp32 accumulation (mma.sync
// m16n8k16): FP16 rather than BF16 for its 11-bit significand (the TF32
// precision at twice TF32's rate); the inputs are normalised activations and
// folded weights, far inside FP16's range. The input comes as half rows
// (half_rows.cuh: time-major [Tin, ld], ld = Cin rounded up to 8, written by
// the preceding AdaIN + activation or by to_half_rows) and the weight as
// [Cout, K, ld] FP16 (converted at upload), so a tap is a shift by whole
// 16-byte-aligned rows and every operand load is a 16-byte cp.async and an
// ldmatrix. A block computes a 128 (Cout) x kBN (T) tile with 8 warps (64 x
// kBN / 4 each), walking the reduction as 64-channel chunks (outer) x taps
// (inner): per chunk the window of rows t0 - pad .. t0 - pad + kBN + dil (K
// - 1) is copied to shared memory once and every tap reads its shifted
// operand from it; the weight tile W[m0 : m0 + 128, k, ci0 : ci0 + 64]
// streams per step. Three weight stages and two windows pipeline the copies
// behind the MMAs; 144-byte shared rows make every ldmatrix conflict-free.
// kBN is 128, or 64 where 128 would not give every SM two blocks; where even
// that leaves SMs idle (short inputs, the decoder's 1090-channel convs on few
// frames), the reduction chunks are split over blocks that write partial
// sums to `scratch`, added in a fixed order by a second kernel (repeatable
// bits, no atomics). The epilogue adds bias and residual and stores y (fp32,
// channels-first) directly.
//
// Conv1d, dense, strided (the noise convs): im2col into `scratch` with
// tap-major rows (cols[k * Cin + ci, t] = xpad[ci, t * stride + k * dil], so
// w is the [Cout, K * Cin] GEMM operand as stored), one GEMM per time chunk,
// then the epilogue for bias and residual; a residual that is y itself folds
// into the GEMM as beta = 1. 1x1 stride-1 convs multiply x directly.
//
// ConvTranspose1d, dense: one GEMM puts every tap of every input step in
// cols[k * Cout + co, j] = sum_ci w[ci, k, co] x[ci, j]; a gather kernel then
// overlap-adds, each output t reading the (at most ceil(K / stride)) taps
// that land on it, so no atomics and a fixed summation order.
//
// Grouped (the depthwise upsampler) and tiny convs (F0_conv: 1 channel, k3)
// run as a direct kernel, one thread per output element, in fp32 whatever
// the GemmMath (it applies to the GEMMs only).
#include <algorithm>
#include <cstdint>

#include <string>

#include "kokoro/check.h"
#include "kokoro/half_rows.cuh"
#include "kokoro/ops.h"

namespace kokoro::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kMinGemmReduction = 16;  // Cin * K below this: the direct kernel
constexpr int64_t kIm2colChunkFloats = int64_t(1) << 23;
// Floats of the larger of acc [Cout, n] and win [Cin, ~n] per time chunk.
constexpr int64_t kTapChunkFloats = int64_t(1) << 21;
constexpr int kAlignFloats = 4;  // 16 bytes

int round_up(int n, int to) { return (n + to - 1) / to * to; }

bool conv1d_uses_gemm(int Cin, int K, int groups) {
    return groups == 1 && Cin * K >= kMinGemmReduction;
}
bool conv1d_is_pointwise(int K, int stride, int pad) { return K == 1 && stride == 1 && pad == 0; }
bool conv1d_uses_taps(int K, int stride, int pad) {
    return stride == 1 && !conv1d_is_pointwise(K, stride, pad);
}
int im2col_chunk_cols(int reduction) {
    return int(std::max<int64_t>(256, kIm2colChunkFloats / reduction));
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

// Overlap-add of the per-tap GEMM output cols [K * Cout, Tin] (+ bias). grid.y = co.
__global__ void col2im_kernel(const float* cols, const float* b, float* y, int Cout, int Tin,
                              int Tout, int K, int stride, int pad) {
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

dim3 per_channel_grid(int C, int T) { return dim3(unsigned((T + kThreads - 1) / kThreads), unsigned(C)); }

void launch_epilogue(const float* in, int ld_in, const float* b, const float* residual, float* y,
                     int C, int ld_y, int n, cudaStream_t stream) {
    epilogue_kernel<<<per_channel_grid(C, n), kThreads, 0, stream>>>(in, ld_in, b, residual, y,
                                                                     ld_y, n);
    KOKORO_CHECK_LAUNCH("epilogue_kernel");
}

// The per-tap path (header comment); scratch holds acc [Cout, n] then win [Cin, ldx].
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
                    shifted_window_kernel<<<per_channel_grid(Cin, chunks.ldx), kThreads, 0,
                                            stream>>>(x, win, Tin, t0 - pad + r, chunks.ldx);
                    KOKORO_CHECK_LAUNCH("shifted_window_kernel");
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

// The implicit-GEMM conv on the tensor cores (header comment).
namespace igemm {

constexpr int kBM = 128, kBK = 64;  // block tile: Cout x reduction channels
constexpr int kWarpsM = 2, kWarpsN = 4;
constexpr int kBlockThreads = 32 * kWarpsM * kWarpsN;
constexpr int kWarpM = kBM / kWarpsM;  // 64
constexpr int kMTiles = kWarpM / 16;   // m16n8k16 tiles per warp along Cout
constexpr int kAStages = 3;
constexpr int kPitch = kBK + 8;       // halves per shared row: 144 bytes, ldmatrix conflict-free
constexpr int kPieces = kBK / 8;      // 16-byte pieces per row

template <int kBN>
size_t smem_bytes(int halo) {
    return sizeof(__half) * kPitch * (size_t(kAStages) * kBM + size_t(2) * (kBN + halo));
}

// 16-byte cp.async, zero filled when !valid (src is then not read).
__device__ void cp_async16(__half* dst, const __half* src, bool valid) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most one committed group is still in flight.
__device__ void cp_async_wait_all_but_one() { asm volatile("cp.async.wait_group 1;\n" ::); }

// Four 8 x 8 FP16 matrices from shared memory; lane l gives the address of
// row l % 8 of matrix l / 8.
__device__ void ldmatrix_x4(uint32_t (&r)[4], const __half* p) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// acc += a (16 x 16, row) @ b (16 x 8, col), FP16 in, fp32 accumulate.
__device__ void mma_f16(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// y[co, t] = sum_{k, ci} w[co, k, ci] x[t + k * dil - pad, ci] (+ b[co])
// (+ residual[co, t]); x: half rows [Tin, ld], w: [Cout, K, ld] FP16;
// residual may equal y. grid (time tiles, Cout tiles, splits): split z sums
// reduction chunks [z * chunks_per_split, (z + 1) * chunks_per_split); with
// more than one split, each writes its sum to partial[z] ([Cout, Tout]) and
// split_sum_kernel finishes.
template <int kBN>
__global__ void __launch_bounds__(kBlockThreads, 2)
    conv1d_half_rows_kernel(const __half* __restrict__ x, const __half* __restrict__ w,
                            const float* __restrict__ b, const float* residual, float* y,
                            float* partial, int ld, int Cout, int Tin, int Tout, int K, int pad,
                            int dilation, int chunks_per_split) {
    constexpr int kWarpN = kBN / kWarpsN;
    constexpr int kNTiles = kWarpN / 8;
    static_assert(kNTiles % 2 == 0, "B fragments load two n-tiles per ldmatrix.x4");
    extern __shared__ uint4 smem_vec[];
    __half* const a_smem = reinterpret_cast<__half*>(smem_vec);
    __half* const win_smem = a_smem + kAStages * kBM * kPitch;
    const int rows = kBN + dilation * (K - 1);
    const int t0 = blockIdx.x * kBN, m0 = blockIdx.y * kBM;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int c_first = blockIdx.z * chunks_per_split;
    const int steps = (min((ld + kBK - 1) / kBK, c_first + chunks_per_split) - c_first) * K;
    const int64_t w_pitch = int64_t(K) * ld;

    // Weight tile of reduction step (chunk c, tap k) into stage `stage`.
    auto load_weights = [&](int c, int k, int stage) {
        __half* dst = a_smem + stage * kBM * kPitch;
        for (int v = tid; v < kBM * kPieces; v += kBlockThreads) {
            const int r = v / kPieces, col = v % kPieces * 8;
            const int co = m0 + r, ci = c * kBK + col;
            const bool valid = co < Cout && ci < ld;
            cp_async16(dst + r * kPitch + col, valid ? w + co * w_pitch + int64_t(k) * ld + ci : w,
                       valid);
        }
    };
    // Input rows t0 - pad .. t0 - pad + rows - 1 of chunk c into buffer c % 2.
    auto load_window = [&](int c) {
        __half* dst = win_smem + (c % 2) * rows * kPitch;
        for (int v = tid; v < rows * kPieces; v += kBlockThreads) {
            const int r = v / kPieces, col = v % kPieces * 8;
            const int src = t0 - pad + r, ci = c * kBK + col;
            const bool valid = src >= 0 && src < Tin && ci < ld;
            cp_async16(dst + r * kPitch + col, valid ? x + int64_t(src) * ld + ci : x, valid);
        }
    };

    float acc[kMTiles][kNTiles][4] = {};
    const int wm = warp / kWarpsN * kWarpM, wn = warp % kWarpsN * kWarpN;
    // ldmatrix row addresses: A rows lane % 16, k half lane / 16; B (rows are
    // time steps) n = lane % 8 + 8 * (lane / 16), k half (lane / 8) % 2.
    const int a_off = (wm + lane % 16) * kPitch + lane / 16 * 8;
    const int b_off = (wn + lane % 8 + lane / 16 * 8) * kPitch + lane / 8 % 2 * 8;

    // Groups: group s holds the weights of step s and, when step s opens a
    // chunk, its window. Steps 0 and 1 are issued up front (K >= 2, so step 1
    // never opens a chunk).
    load_window(c_first);
    load_weights(c_first, 0, 0);
    cp_async_commit();
    load_weights(c_first, 1, 1);
    cp_async_commit();
    int next_c = c_first, next_k = 1;  // (chunk, tap) of the step issued last
    int c = c_first, k = 0;            // (chunk, tap) of the step computed
    for (int s = 0; s < steps; ++s) {
        cp_async_wait_all_but_one();
        // Group s has landed for every thread; stage (s + 2) % 3 and window
        // buffer (c + 1) % 2 are free (their last readers were steps <= s - 1).
        __syncthreads();
        if (++next_k == K) {
            next_k = 0;
            ++next_c;
        }
        if (s + 2 < steps) {
            load_weights(next_c, next_k, (s + 2) % kAStages);
            if (next_k == 0) load_window(next_c);
        }
        cp_async_commit();

        const __half* as = a_smem + (s % kAStages) * kBM * kPitch + a_off;
        const __half* bs = win_smem + ((c % 2) * rows + k * dilation) * kPitch + b_off;
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 16) {
            uint32_t af[kMTiles][4], bf[kNTiles / 2][4];
#pragma unroll
            for (int mi = 0; mi < kMTiles; ++mi) ldmatrix_x4(af[mi], as + mi * 16 * kPitch + kk);
#pragma unroll
            for (int np = 0; np < kNTiles / 2; ++np) ldmatrix_x4(bf[np], bs + np * 16 * kPitch + kk);
#pragma unroll
            for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
                for (int ni = 0; ni < kNTiles; ++ni) {
                    mma_f16(acc[mi][ni], af[mi], bf[ni / 2][ni % 2 * 2], bf[ni / 2][ni % 2 * 2 + 1]);
                }
            }
        }
        if (++k == K) {
            k = 0;
            ++c;
        }
    }

    const int g = lane / 4, tq = lane % 4;
    if (partial != nullptr) {
        y = partial + int64_t(blockIdx.z) * Cout * Tout;
        b = nullptr;
        residual = nullptr;
    }
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int co = m0 + wm + mi * 16 + g + 8 * half;
            if (co >= Cout) continue;
            const float bias = b != nullptr ? b[co] : 0.f;
#pragma unroll
            for (int ni = 0; ni < kNTiles; ++ni) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int t = t0 + wn + ni * 8 + 2 * tq + e;
                    if (t >= Tout) continue;
                    const int64_t i = int64_t(co) * Tout + t;
                    float v = acc[mi][ni][2 * half + e] + bias;
                    if (residual != nullptr) v += residual[i];
                    y[i] = v;
                }
            }
        }
    }
}

// y[co, t] = sum_z partial[z, co, t] (+ b[co]) (+ residual[co, t]), z in
// order (fixed summation order: repeatable bits). grid.y = co.
__global__ void split_sum_kernel(const float* partial, int splits, const float* b,
                                 const float* residual, float* y, int Cout, int Tout) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= Tout) return;
    const int64_t i = int64_t(blockIdx.y) * Tout + t;
    float v = 0.f;
    for (int z = 0; z < splits; ++z) v += partial[int64_t(z) * Cout * Tout + i];
    if (b != nullptr) v += b[blockIdx.y];
    if (residual != nullptr) v += residual[i];
    y[i] = v;
}

// The launch shape: the wide time tile (128) where it gives every SM two
// blocks, else the narrow one (64), and then the reduction split over
// enough blocks to give every SM two (short inputs; decoder convs on few
// frames but 1090 channels).
struct Plan {
    int bn, splits, chunks_per_split;
    int64_t blocks(int Cout, int Tout) const {
        return int64_t((Tout + bn - 1) / bn) * ((Cout + kBM - 1) / kBM);
    }
};

Plan plan(int Cin, int Cout, int Tout) {
    int device = 0, sms = 0;
    KOKORO_CUDA_CHECK(cudaGetDevice(&device));
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int64_t want = 2 * int64_t(sms);
    Plan p{128, 1, 0};
    if (p.blocks(Cout, Tout) < want) p.bn = 64;
    const int chunks = (half_rows_pitch(Cin) + kBK - 1) / kBK;
    const int64_t blocks = p.blocks(Cout, Tout);
    p.splits = int(std::min<int64_t>(chunks, (want + blocks - 1) / blocks));
    p.chunks_per_split = (chunks + p.splits - 1) / p.splits;
    p.splits = (chunks + p.chunks_per_split - 1) / p.chunks_per_split;  // none empty
    return p;
}

template <int kBN>
void launch(const Plan& p, const __half* x, const __half* w, const float* b, float* y,
            float* partial, int ld, int Cout, int Tin, int Tout, int K, int pad, int dilation,
            const float* residual, cudaStream_t stream) {
    int device = 0, smem_optin = 0;
    KOKORO_CUDA_CHECK(cudaGetDevice(&device));
    KOKORO_CUDA_CHECK(
        cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const int halo = dilation * (K - 1);
    const size_t smem = smem_bytes<kBN>(halo);
    if (smem > size_t(smem_optin)) {
        throw CudaError("conv1d_half_rows: a window of " + std::to_string(kBN + halo) +
                        " steps (dilation x (K - 1) = " + std::to_string(halo) +
                        ") exceeds the GPU's shared memory");
    }
    // Always the device's limit, never this launch's need: engine lanes launch
    // from several host threads, and one lowering the limit between another's
    // call and launch would fail that launch.
    KOKORO_CUDA_CHECK(cudaFuncSetAttribute(conv1d_half_rows_kernel<kBN>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           smem_optin));
    const dim3 grid(unsigned((Tout + kBN - 1) / kBN), unsigned((Cout + kBM - 1) / kBM),
                    unsigned(p.splits));
    conv1d_half_rows_kernel<kBN><<<grid, kBlockThreads, smem, stream>>>(
        x, w, b, residual, y, p.splits > 1 ? partial : nullptr, ld, Cout, Tin, Tout, K, pad,
        dilation, p.chunks_per_split);
    KOKORO_CHECK_LAUNCH("conv1d_half_rows_kernel");
}

}  // namespace igemm

}  // namespace

void conv_weight_to_device_layout(const float* src, float* dst, int64_t A, int B, int K) {
    for (int64_t a = 0; a < A; ++a) {
        const float* s = src + a * B * K;
        float* d = dst + a * B * K;
        for (int k = 0; k < K; ++k) {
            for (int i = 0; i < B; ++i) d[int64_t(k) * B + i] = s[int64_t(i) * K + k];
        }
    }
}

void conv_weight_to_half_rows(const float* src, __half* dst, int64_t A, int K, int B) {
    const int ld = half_rows_pitch(B);
    for (int64_t r = 0; r < A * K; ++r) {
        for (int i = 0; i < ld; ++i) dst[r * ld + i] = __float2half_rn(i < B ? src[r * B + i] : 0.f);
    }
}

int conv1d_out_len(int Tin, int K, int stride, int pad, int dilation) {
    return (Tin + 2 * pad - dilation * (K - 1) - 1) / stride + 1;
}

int conv_transpose1d_out_len(int Tin, int K, int stride, int pad, int output_padding) {
    return (Tin - 1) * stride - 2 * pad + (K - 1) + output_padding + 1;
}

int64_t conv1d_scratch_floats(int Cin, int Cout, int Tin, int K, int stride, int pad,
                              int dilation, int groups) {
    if (!conv1d_uses_gemm(Cin, K, groups) || conv1d_is_pointwise(K, stride, pad)) return 0;
    const int Tout = conv1d_out_len(Tin, K, stride, pad, dilation);
    if (Tout <= 0) return 0;
    if (conv1d_uses_taps(K, stride, pad)) {
        const TapChunks chunks = tap_chunks(Cin, Cout, Tout, K, dilation);
        return int64_t(Cout) * chunks.n + int64_t(Cin) * chunks.ldx;
    }
    const int reduction = Cin * K;
    return int64_t(reduction) * std::min(Tout, im2col_chunk_cols(reduction));
}

int64_t conv_transpose1d_scratch_floats(int Cin, int Cout, int Tin, int K, int groups) {
    return conv_transpose1d_uses_gemm(Cin, groups) ? int64_t(Cout) * K * Tin : 0;
}

void conv1d(cublasHandle_t handle, const float* x, const float* w, const float* b, float* y,
            int Cin, int Cout, int Tin, int K, int stride, int pad, int dilation, int groups,
            const float* residual, float* scratch, cudaStream_t stream, GemmMath math) {
    const int Tout = conv1d_out_len(Tin, K, stride, pad, dilation);
    if (Cout == 0 || Tout <= 0) return;
    if (!conv1d_uses_gemm(Cin, K, groups)) {
        conv1d_direct_kernel<<<per_channel_grid(Cout, Tout), kThreads, 0, stream>>>(
            x, w, b, y, Cin, Cout, Tin, Tout, K, stride, pad, dilation, groups, residual);
        KOKORO_CHECK_LAUNCH("conv1d_direct_kernel");
        return;
    }
    if (conv1d_uses_taps(K, stride, pad)) {
        conv1d_taps(handle, x, w, b, y, Cin, Cout, Tin, Tout, K, pad, dilation, residual, scratch,
                    stream, math);
        return;
    }
    const bool residual_in_place = residual == y;
    const float beta = residual_in_place ? 1.f : 0.f;
    const int reduction = Cin * K;
    if (conv1d_is_pointwise(K, stride, pad)) {
        matmul(handle, false, false, Cout, Tout, Cin, w, Cin, x, Tin, beta, y, Tout, stream, math);
    } else {
        const int chunk = im2col_chunk_cols(reduction);
        for (int t0 = 0; t0 < Tout; t0 += chunk) {
            const int n = std::min(chunk, Tout - t0);
            im2col_kernel<<<per_channel_grid(reduction, n), kThreads, 0, stream>>>(
                x, scratch, Cin, Tin, stride, pad, dilation, t0, n);
            KOKORO_CHECK_LAUNCH("im2col_kernel");
            matmul(handle, false, false, Cout, n, reduction, w, reduction, scratch, n, beta, y + t0,
                   Tout, stream, math);
        }
    }
    const float* residual_pass = residual_in_place ? nullptr : residual;
    if (b != nullptr || residual_pass != nullptr) {
        launch_epilogue(y, Tout, b, residual_pass, y, Cout, Tout, Tout, stream);
    }
}

int64_t conv1d_half_rows_scratch_floats(int Cin, int Cout, int Tin, int K, int pad,
                                        int dilation) {
    const int Tout = conv1d_out_len(Tin, K, 1, pad, dilation);
    if (Cout == 0 || Tout <= 0) return 0;
    const igemm::Plan p = igemm::plan(Cin, Cout, Tout);
    return p.splits > 1 ? int64_t(p.splits) * Cout * Tout : 0;
}

void conv1d_half_rows(const __half* x, const __half* w, const float* b, float* y, int Cin,
                      int Cout, int Tin, int K, int pad, int dilation, const float* residual,
                      float* scratch, cudaStream_t stream) {
    const int Tout = conv1d_out_len(Tin, K, 1, pad, dilation);
    if (Cout == 0 || Tout <= 0) return;
    if (K < 2) throw CudaError("conv1d_half_rows: needs K >= 2, got " + std::to_string(K));
    const igemm::Plan p = igemm::plan(Cin, Cout, Tout);
    const int ld = half_rows_pitch(Cin);
    if (p.bn == 128) {
        igemm::launch<128>(p, x, w, b, y, scratch, ld, Cout, Tin, Tout, K, pad, dilation, residual,
                           stream);
    } else {
        igemm::launch<64>(p, x, w, b, y, scratch, ld, Cout, Tin, Tout, K, pad, dilation, residual,
                          stream);
    }
    if (p.splits > 1) {
        igemm::split_sum_kernel<<<per_channel_grid(Cout, Tout), kThreads, 0, stream>>>(
            scratch, p.splits, b, residual, y, Cout, Tout);
        KOKORO_CHECK_LAUNCH("split_sum_kernel");
    }
}

void conv_transpose1d(cublasHandle_t handle, const float* x, const float* w, const float* b,
                      float* y, int Cin, int Cout, int Tin, int K, int stride, int pad,
                      int output_padding, int groups, float* scratch, cudaStream_t stream,
                      GemmMath math) {
    const int Tout = conv_transpose1d_out_len(Tin, K, stride, pad, output_padding);
    if (Cout == 0 || Tout <= 0) return;
    if (!conv_transpose1d_uses_gemm(Cin, groups)) {
        conv_transpose1d_direct_kernel<<<per_channel_grid(Cout, Tout), kThreads, 0, stream>>>(
            x, w, b, y, Cin, Cout, Tin, Tout, K, stride, pad, groups);
        KOKORO_CHECK_LAUNCH("conv_transpose1d_direct_kernel");
        return;
    }
    matmul(handle, true, false, K * Cout, Tin, Cin, w, K * Cout, x, Tin, 0.f, scratch, Tin, stream,
           math);
    col2im_kernel<<<per_channel_grid(Cout, Tout), kThreads, 0, stream>>>(scratch, b, y, Cout, Tin,
                                                                         Tout, K, stride, pad);
    KOKORO_CHECK_LAUNCH("col2im_kernel");
}

}  // namespace kokoro::ops
