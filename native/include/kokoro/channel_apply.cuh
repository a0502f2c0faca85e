// One channel's AdaIN and activation as the passes apply them: the
// normalisation and style affine as one multiply-add about the channel's
// mean, gain = (1 + gamma) / sqrt(var + eps) rounded once, then the
// activation. norm.cu computes them from a tensor's statistics (a finalize
// step per channel) and applies them in its passes; the tensor-core conv
// (ops/conv/igemm_tiles.cuh) applies them itself to a raw FP16 input as it loads each window
// (ops::HalfInput). mean, gain, shift and Snake's alpha are one 16-byte load:
// the half-rows pass was issue bound on loading seven fields per element.
#pragma once

#include <cuda_runtime.h>

#include "kokoro/ops.h"

namespace kokoro::ops {

struct ChannelApply {
    float4 affine;  // mean, gain, shift (beta), alpha
    float inv_alpha;

    ChannelApply() = default;  // zeros as ChannelApply{} (a tile's channels past C)
    __device__ ChannelApply(float mean, float gain, float shift, float alpha)
        : affine(make_float4(mean, gain, shift, alpha)), inv_alpha(1.f / alpha) {}
    // The activation (and Snake's sine) fixed at compile time: the passes,
    // issue-bound, run one instantiation per call.
    template <Activation kAct, bool kApproxSine>
    __device__ float apply(float x, float slope) const {
        float v = fmaf(x - affine.x, affine.y, affine.z);
        if constexpr (kAct == Activation::kLeakyRelu) {
            v = v >= 0.f ? v : v * slope;
        } else if constexpr (kAct == Activation::kSnake) {
            const float s = kApproxSine ? __sinf(affine.w * v) : sinf(affine.w * v);
            v = v + inv_alpha * (s * s);
        }
        return v;
    }
};

}  // namespace kokoro::ops
