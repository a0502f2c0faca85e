// Decoder (kokoro/istftnet.py Decoder) up to the generator, and the
// AdainResBlk1d block it shares with the prosody predictor's F0/N stacks.
// The decoder's channel concatenations [x, asr_res, F0, N] are not copies:
// two [1090, F] buffers hold the side rows (asr_res, F0, N) once, and the
// encode/decode blocks write their 1024 output rows in front of them,
// alternating between the two buffers. A block's shortcut (nearest
// upsampling, 1x1 conv: x alone) runs on a second stream beside its residual
// path, whose last conv adds it and scales the sum by 1 / sqrt(2) in its
// epilogue (no pass of its own). In precision "fast" the 1x1 conv runs on the
// tensor-core conv into an FP16 shortcut (Conv1d::to_half_channels), the last
// conv's residual at FP16's precision, which its operands have already.
#include <cmath>
#include <string>

#include "kokoro/check.h"
#include "kokoro/model.h"

namespace kokoro {

namespace {
constexpr float kLeakySlope = 0.2f;
constexpr int kEncodeChannels = 1024;
constexpr int kAsrResChannels = 64;
constexpr int kDecodeBlocks = 4;

// An AdainResBlk1d's AdaIN + LeakyReLU 0.2 with the style projection `fc`.
AdainAct adain_act(const std::string& fc) {
    return AdainAct{fc, ops::Activation::kLeakyRelu, kLeakySlope};
}
}  // namespace

AdainResBlk1d::AdainResBlk1d(const DeviceWeights& weights, const std::string& prefix, int c_in,
                             int c_out, bool upsample)
    : c_in_(c_in),
      c_out_(c_out),
      upsample_(upsample),
      norm2_conv2_(weights, adain_act(prefix + ".norm2.fc"),
                   SameConv{prefix + ".conv2", c_out, c_out, 3, 1}) {
    if (c_in != c_out) {
        conv1x1_.emplace(weights, prefix + ".conv1x1", ConvShape{c_in, c_out, 1}.without_bias());
    }
    if (upsample) {
        norm1_.emplace(weights, adain_act(prefix + ".norm1.fc"), c_in);
        pool_conv1_.emplace(weights, prefix + ".pool", prefix + ".conv1", c_in, c_out);
    } else {
        norm1_conv1_.emplace(weights, adain_act(prefix + ".norm1.fc"),
                             SameConv{prefix + ".conv1", c_in, c_out, 3, 1});
    }
}

void AdainResBlk1d::operator()(const Context& ctx, const Context& shortcut_ctx, const float* x,
                               int T, float* out) const {
    const int c_in = c_in_, c_out = c_out_;
    const bool upsample = upsample_;
    const int t_out = upsample ? 2 * T : T;

    // Shortcut: [nearest x2] -> [1x1 conv when the channel count changes], on
    // the shortcut_ctx: it needs x alone, so it runs beside the residual path. The
    // two commute (an upsampled column is a copy), so an fp32 1x1 conv runs
    // first, on half the columns; the tensor-core conv's output is FP16, so it
    // runs on the upsampled x.
    const bool apart = shortcut_ctx.stream != ctx.stream && (upsample || c_in != c_out);
    if (apart) shortcut_ctx.wait_for(ctx);  // x
    auto upsampled = [&](const float* src, int channels) -> const float* {
        if (!upsample) return src;
        float* buffer = shortcut_ctx.floats(Slot::kBlockUpsampled, int64_t(channels) * t_out);
        ops::upsample_nearest(src, buffer, channels, T, 2, shortcut_ctx.stream);
        return buffer;
    };
    ops::ConstFloatOrHalf shortcut = nullptr;
    if (conv1x1_ && conv1x1_->tensor_core()) {
        shortcut = conv1x1_->to_half_channels(shortcut_ctx, upsampled(x, c_in), t_out,
                                              Slot::kBlockShortcutHalf);
    } else if (conv1x1_) {
        float* projected = shortcut_ctx.floats(Slot::kBlockShortcut, int64_t(c_out) * T);
        (*conv1x1_)(shortcut_ctx, x, projected, T);
        shortcut = upsampled(projected, c_out);
    } else {
        shortcut = upsampled(x, c_in);
    }

    // Residual: AdaIN + LeakyReLU, [depthwise x2 upsampler], conv, AdaIN + LeakyReLU, conv.
    float* hidden = ctx.floats(Slot::kBlockHidden, int64_t(c_out) * t_out);
    ops::ChannelPartials hidden_stats{};
    if (upsample) {
        float* normed = ctx.floats(Slot::kBlockNormed, int64_t(c_in) * T);
        (*norm1_)(ctx, x, normed, T);
        (*pool_conv1_)(ctx, normed, hidden, T);
    } else {
        hidden_stats = (*norm1_conv1_)(ctx, x, hidden, T, nullptr, {}, Slot::kStatsBlockHidden);
    }
    // out = (residual + shortcut) / sqrt(2), all in the last conv's epilogue.
    if (apart) ctx.wait_for(shortcut_ctx);
    const float inv_sqrt2 = static_cast<float>(1.0 / std::sqrt(2.0));
    norm2_conv2_(ctx, hidden, out, t_out, shortcut, hidden_stats, Slot::kNone, inv_sqrt2);
}

Decoder::Decoder(const ModelConfig& cfg, const DeviceWeights& weights)
    : hid_(cfg.hidden_dim),
      out_channels_(cfg.upsample_initial_channel),
      f0_conv_(weights, "decoder.F0_conv", ConvShape{1, 1, 3}.with_stride(2).with_pad(1)),
      n_conv_(weights, "decoder.N_conv", ConvShape{1, 1, 3}.with_stride(2).with_pad(1)),
      asr_res_(weights, "decoder.asr_res.0", ConvShape{hid_, kAsrResChannels, 1}),
      encode_(weights, "decoder.encode", hid_ + 2, kEncodeChannels, false) {
    const int cat_rows = kEncodeChannels + kAsrResChannels + 2;
    // Only the last decode block upsamples (to the generator's input width).
    for (int i = 0; i < kDecodeBlocks; ++i) {
        const bool last = i + 1 == kDecodeBlocks;
        decode_.emplace_back(weights, "decoder.decode." + std::to_string(i), cat_rows,
                             last ? out_channels_ : kEncodeChannels, last);
    }
}

void Decoder::operator()(const Context& ctx, const Context& shortcut_ctx, const float* t_en,
                         const int32_t* frame_token, int T, int F, const float* f0,
                         const float* n, float* out) const {
    const int hid = hid_;
    const int side_rows = kAsrResChannels + 2;
    const int cat_rows = kEncodeChannels + side_rows;

    // encode input [asr; F0 down; N down], asr = t_en @ alignment.
    float* encode_in = ctx.floats(Slot::kDecoderEncodeIn, int64_t(hid + 2) * F);
    ops::expand_frames(t_en, frame_token, encode_in, hid, T, F, ctx.stream);
    ctx.record("asr", encode_in, {hid, F});
    float* f0_down = encode_in + int64_t(hid) * F;
    float* n_down = f0_down + F;
    f0_conv_(ctx, f0, f0_down, 2 * F);
    n_conv_(ctx, n, n_down, 2 * F);

    // The side rows [asr_res; F0 down; N down] of both cat buffers, on the
    // shortcut_ctx beside the encode block (whose shortcut queues after them there).
    float* cat[2] = {ctx.floats(Slot::kDecoderCatA, int64_t(cat_rows) * F),
                     ctx.floats(Slot::kDecoderCatB, int64_t(cat_rows) * F)};
    float* side = cat[0] + int64_t(kEncodeChannels) * F;
    shortcut_ctx.wait_for(ctx);  // encode_in
    asr_res_(shortcut_ctx, encode_in, side, F);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(side + int64_t(kAsrResChannels) * F, f0_down,
                                      2 * sizeof(float) * F, cudaMemcpyDeviceToDevice,
                                      shortcut_ctx.stream));
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(cat[1] + int64_t(kEncodeChannels) * F, side,
                                      sizeof(float) * side_rows * F, cudaMemcpyDeviceToDevice,
                                      shortcut_ctx.stream));
    encode_(ctx, shortcut_ctx, encode_in, F, cat[0]);

    // The decode blocks alternate between the two cat buffers; the last
    // writes out.
    for (int i = 0; i < kDecodeBlocks; ++i) {
        const float* in = cat[i % 2];
        decode_[size_t(i)](ctx, shortcut_ctx, in, F,
                           i + 1 < kDecodeBlocks ? cat[(i + 1) % 2] : out);
    }
    ctx.record("dec_out", out, {out_channels_, 2 * F});
}

}  // namespace kokoro
