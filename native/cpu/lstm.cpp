#include "lstm.h"

#include <algorithm>
#include <vector>

#include "activations.h"
#include "dispatch.h"

namespace kokoro::cpu {

namespace {

// Gate columns per block: eight AVX2 registers of accumulators, so that the
// product reads W_hh once per step and stores each gate once.
constexpr int64_t kBlock = 64;

// g[0 .. kBlock) = in + h W for one block of columns, packed [H, kBlock] (contiguous: the step
// streams W in order, which the prefetchers follow; row-major W strides a page per row).
KOKORO_CPU_INLINE void recurrent_block(const float* in, const float* h, const float* w, int64_t hidden,
                                       float* g) {
    float acc[kBlock];
#pragma omp simd
    for (int64_t b = 0; b < kBlock; ++b) acc[b] = in[b];
    for (int64_t k = 0; k < hidden; ++k) {
        const float hk = h[k];
        const float* wk = w + k * kBlock;
#pragma omp simd
        for (int64_t b = 0; b < kBlock; ++b) acc[b] += hk * wk[b];
    }
#pragma omp simd
    for (int64_t b = 0; b < kBlock; ++b) g[b] = acc[b];
}

KOKORO_CPU_INLINE void recurrent_tail(const float* in, const float* h, const float* w, int64_t hidden,
                                      int64_t stride, int64_t width, float* g) {
    for (int64_t b = 0; b < width; ++b) g[b] = in[b];
    for (int64_t k = 0; k < hidden; ++k) {
        const float hk = h[k];
        const float* wk = w + k * stride;
        for (int64_t b = 0; b < width; ++b) g[b] += hk * wk[b];
    }
}

}  // namespace

KOKORO_CPU_CLONES void lstm_recurrence(const LstmRecurrence& spec) {
    const int64_t hid = spec.hidden, gates = 4 * hid;
    std::vector<float> g(static_cast<size_t>(gates)), h(static_cast<size_t>(hid), 0.f),
        c(static_cast<size_t>(hid), 0.f);
    const int64_t blocked = gates / kBlock * kBlock;
    std::vector<float> packed(static_cast<size_t>(blocked * hid));
    for (int64_t j = 0; j < blocked; j += kBlock)
        for (int64_t k = 0; k < hid; ++k)
            std::copy_n(spec.w_hh_t + k * gates + j, kBlock, packed.data() + j * hid + k * kBlock);
    for (int64_t step = 0; step < spec.steps; ++step) {
        const int64_t t = spec.reverse ? spec.steps - 1 - step : step;
        const float* in = spec.gates_in + t * gates;
        for (int64_t j = 0; j < blocked; j += kBlock)
            recurrent_block(in + j, h.data(), packed.data() + j * hid, hid, g.data() + j);
        if (blocked < gates) {
            recurrent_tail(in + blocked, h.data(), spec.w_hh_t + blocked, hid, gates, gates - blocked,
                           g.data() + blocked);
        }
        const float* gi = g.data();
        const float* gf = gi + hid;
        const float* gg = gf + hid;
        const float* go = gg + hid;
        float* out = spec.out + t * spec.out_stride;
        float* cs = c.data();
        float* hs = h.data();
#pragma omp simd
        for (int64_t k = 0; k < hid; ++k) {
            const float cell = sigmoid_poly(gf[k]) * cs[k] + sigmoid_poly(gi[k]) * tanh_poly(gg[k]);
            cs[k] = cell;
            hs[k] = sigmoid_poly(go[k]) * tanh_poly(cell);
            out[k] = hs[k];
        }
    }
}

}  // namespace kokoro::cpu
