// Decoder (kokoro/istftnet.py Decoder) up to the generator, and the
// AdainResBlk1d block it shares with the prosody predictor's F0/N stacks.
// The decoder's channel concatenations [x, asr_res, F0, N] are not copies:
// two [1090, F] buffers hold the side rows (asr_res, F0, N) once, and the
// encode/decode blocks write their 1024 output rows in front of them,
// alternating between the two buffers. A block's shortcut (nearest
// upsampling, 1x1 conv: x alone) runs on a second stream beside its residual
// path, whose last conv adds it and scales the sum by 1 / sqrt(2) in its
// epilogue (no pass of its own). In precision "fast" the 1x1 conv runs on the
// tensor-core conv into an FP16 shortcut (Context::conv1x1_half), the last
// conv's residual at FP16's precision, which its operands have already.
#include <cmath>

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
    return AdainAct{fc, ops::Activation::kLeakyRelu, kLeakySlope, nullptr};
}
}  // namespace

void adain_res_blk1d(const Context& ctx, const Context& shortcut_ctx, const std::string& prefix,
                     const float* x, int c_in, int c_out, int T, bool upsample, float* out) {
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
    const std::string conv1x1 = prefix + ".conv1x1";
    if (c_in != c_out && tensor_core(shortcut_ctx.weights.plan(conv1x1 + ".weight").kernel)) {
        shortcut = shortcut_ctx.conv1x1_half(conv1x1, upsampled(x, c_in), c_in, c_out, t_out,
                                     Slot::kBlockShortcutHalf);
    } else if (c_in != c_out) {
        float* projected = shortcut_ctx.floats(Slot::kBlockShortcut, int64_t(c_out) * T);
        shortcut_ctx.conv1d(conv1x1, x, projected, ConvShape{c_in, c_out, T, 1}.without_bias());
        shortcut = upsampled(projected, c_out);
    } else {
        shortcut = upsampled(x, c_in);
    }

    // Residual: AdaIN + LeakyReLU, [depthwise x2 upsampler], conv, AdaIN + LeakyReLU, conv.
    float* hidden = ctx.floats(Slot::kBlockHidden, int64_t(c_out) * t_out);
    ops::ChannelPartials hidden_stats{};
    if (upsample) {
        float* normed = ctx.floats(Slot::kBlockNormed, int64_t(c_in) * T);
        ctx.adain(x, normed, c_in, T, prefix + ".norm1.fc", ops::Activation::kLeakyRelu,
                  kLeakySlope, nullptr);
        ctx.pool_conv1d(prefix + ".pool", prefix + ".conv1", normed, hidden, c_in, c_out, T);
    } else {
        hidden_stats = ctx.adain_conv1d(x, hidden, adain_act(prefix + ".norm1.fc"),
                                        SameConv{prefix + ".conv1", c_in, c_out, T, 3, 1},
                                        nullptr, {}, Slot::kStatsBlockHidden);
    }
    // out = (residual + shortcut) / sqrt(2), all in the last conv's epilogue.
    if (apart) ctx.wait_for(shortcut_ctx);
    const float inv_sqrt2 = static_cast<float>(1.0 / std::sqrt(2.0));
    ctx.adain_conv1d(hidden, out, adain_act(prefix + ".norm2.fc"),
                     SameConv{prefix + ".conv2", c_out, c_out, t_out, 3, 1}, shortcut,
                     hidden_stats, Slot::kNone, inv_sqrt2);
}

void decoder_forward(const Context& ctx, const Context& shortcut_ctx, const float* t_en,
                     const int32_t* frame_token, int T, int F, const float* f0, const float* n,
                     float* out) {
    const int hid = ctx.cfg.hidden_dim;
    const int side_rows = kAsrResChannels + 2;
    const int cat_rows = kEncodeChannels + side_rows;

    // encode input [asr; F0 down; N down], asr = t_en @ alignment.
    float* encode_in = ctx.floats(Slot::kDecoderEncodeIn, int64_t(hid + 2) * F);
    ops::expand_frames(t_en, frame_token, encode_in, hid, T, F, ctx.stream);
    ctx.record("asr", encode_in, {hid, F});
    float* f0_down = encode_in + int64_t(hid) * F;
    float* n_down = f0_down + F;
    const ConvShape down = ConvShape{1, 1, 2 * F, 3}.with_stride(2).with_pad(1);
    ctx.conv1d("decoder.F0_conv", f0, f0_down, down);
    ctx.conv1d("decoder.N_conv", n, n_down, down);

    // The side rows [asr_res; F0 down; N down] of both cat buffers, on the
    // shortcut_ctx beside the encode block (whose shortcut queues after them there).
    float* cat[2] = {ctx.floats(Slot::kDecoderCatA, int64_t(cat_rows) * F),
                     ctx.floats(Slot::kDecoderCatB, int64_t(cat_rows) * F)};
    float* side = cat[0] + int64_t(kEncodeChannels) * F;
    shortcut_ctx.wait_for(ctx);  // encode_in
    shortcut_ctx.conv1d("decoder.asr_res.0", encode_in, side,
                        ConvShape{hid, kAsrResChannels, F, 1});
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(side + int64_t(kAsrResChannels) * F, f0_down,
                                      2 * sizeof(float) * F, cudaMemcpyDeviceToDevice,
                                      shortcut_ctx.stream));
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(cat[1] + int64_t(kEncodeChannels) * F, side,
                                      sizeof(float) * side_rows * F, cudaMemcpyDeviceToDevice,
                                      shortcut_ctx.stream));
    adain_res_blk1d(ctx, shortcut_ctx, "decoder.encode", encode_in, hid + 2, kEncodeChannels, F,
                    false, cat[0]);

    // Only the last decode block upsamples (to the generator's input width).
    for (int i = 0; i < kDecodeBlocks; ++i) {
        const std::string prefix = "decoder.decode." + std::to_string(i);
        const float* in = cat[i % 2];
        if (i + 1 < kDecodeBlocks) {
            adain_res_blk1d(ctx, shortcut_ctx, prefix, in, cat_rows, kEncodeChannels, F, false,
                            cat[(i + 1) % 2]);
        } else {
            adain_res_blk1d(ctx, shortcut_ctx, prefix, in, cat_rows,
                            ctx.cfg.upsample_initial_channel, F, true, out);
        }
    }
    ctx.record("dec_out", out, {ctx.cfg.upsample_initial_channel, 2 * F});
}

}  // namespace kokoro
