// Prosody predictor (kokoro/modules.py ProsodyPredictor, DurationEncoder):
// the duration encoder (n_layer x [BiLSTM, AdaLayerNorm, re-append style]),
// the duration head (BiLSTM + linear to max_dur logits) and F0Ntrain (shared
// BiLSTM over the frames, then the F0 and N AdainResBlk1d stacks with their
// 1x1 projections, on two streams, their shortcuts on two more; a batch's
// group runs its shared LSTMs stacked, as the duration encoder's).
// The duration encoder keeps one time-major buffer [T, hidden + style] whose
// style columns are written once; each layer's AdaLayerNorm writes its
// first `hidden` columns. Stacked utterances (UtteranceRows: a batch's group)
// run each LSTM on all of their rows at once (its input projection with each
// utterance's split plan, the recurrences side by side: ops::
// lstm_recurrence), the AdaLayerNorms and the duration projection per
// utterance with its own style: every utterance's bits are those of its own
// call.
#include <string>
#include <utility>
#include <vector>

#include "kokoro/model.h"

namespace kokoro {

namespace {
constexpr float kAdaLayerNormEps = 1e-5f;
}  // namespace

ProsodyPredictor::Stack ProsodyPredictor::stack(const ModelConfig& cfg,
                                                const DeviceWeights& weights,
                                                const std::string& name) {
    const int hid = cfg.hidden_dim, half = hid / 2;
    const std::string p = "predictor." + name;
    std::vector<AdainResBlk1d> blocks;
    blocks.emplace_back(weights, p + ".0", hid, hid, false);
    blocks.emplace_back(weights, p + ".1", hid, half, true);
    blocks.emplace_back(weights, p + ".2", half, half, false);
    return {std::move(blocks), Conv1d(weights, p + "_proj", ConvShape{half, 1, 1})};
}

ProsodyPredictor::ProsodyPredictor(const ModelConfig& cfg, const DeviceWeights& weights)
    : hid_(cfg.hidden_dim),
      style_dim_(cfg.style_dim),
      max_dur_(cfg.max_dur),
      duration_lstm_(weights, "predictor.lstm"),
      duration_proj_(weights, "predictor.duration_proj.linear_layer", hid_, max_dur_),
      shared_(weights, "predictor.shared"),
      f0_(stack(cfg, weights, "F0")),
      n_(stack(cfg, weights, "N")) {
    for (int i = 0; i < cfg.n_layer; ++i) {
        const std::string lstms = "predictor.text_encoder.lstms.";
        encoder_.push_back({BiLstm(weights, lstms + std::to_string(2 * i)),
                            StyleProjection(weights, lstms + std::to_string(2 * i + 1) + ".fc",
                                            hid_)});
    }
}

void ProsodyPredictor::duration_encoder(const Context& ctx, const UtteranceRows& tokens,
                                        const std::vector<UtteranceStyle>& styles,
                                        const float* d_en_rows, float* d) const {
    const int hid = hid_;
    const int sd = style_dim_;
    const int width = hid + sd;
    const int rows = tokens.rows();
    const int longest = tokens.longest();
    // d = [d_en^T | s on every row], built channels-first (s broadcast over
    // time by nearest upsampling) and transposed; the style columns never change.
    float* channels_first = ctx.floats(Slot::kProsodyEncoderIn, int64_t(width) * longest);
    for (int u = 0; u < tokens.count(); ++u) {
        const int T = tokens.length(u);
        const int64_t row = tokens.offset(u);
        ops::transpose(d_en_rows + row * hid, channels_first, T, hid, ctx.stream);
        ops::upsample_nearest(styles[u].s, channels_first + int64_t(hid) * T, sd, 1, T,
                              ctx.stream);
        ops::transpose(channels_first, d + row * width, width, T, ctx.stream);
    }

    const Context stacked = ctx.with_utterance_rows(tokens);
    float* lstm_out = ctx.floats(Slot::kProsodyEncoderLstm, int64_t(rows) * hid);
    for (const EncoderLayer& layer : encoder_) {
        layer.lstm(stacked, d, lstm_out, rows);
        for (int u = 0; u < tokens.count(); ++u) {
            const int64_t row = tokens.offset(u);
            const float* gamma_beta = layer.norm(ctx.with_style(styles[u]));
            ops::layer_norm_rows(lstm_out + row * hid, d + row * width, tokens.length(u), hid,
                                 nullptr, nullptr, gamma_beta, gamma_beta + hid,
                                 kAdaLayerNormEps, ctx.stream, nullptr, width);
        }
    }
}

void ProsodyPredictor::duration_head(const Context& ctx, const UtteranceRows& tokens,
                                     const float* d, float* dur_lstm, float* logits) const {
    const int hid = hid_;
    duration_lstm_(ctx.with_utterance_rows(tokens), d, dur_lstm, tokens.rows());
    for (int u = 0; u < tokens.count(); ++u) {
        const int64_t row = tokens.offset(u);
        duration_proj_(ctx, dur_lstm + row * hid, logits + row * max_dur_, tokens.length(u));
    }
}

void ProsodyPredictor::shared_lstm(const Context& ctx, const UtteranceRows& frames,
                                   const float* en_rows, float* shared_rows) const {
    shared_(ctx.with_utterance_rows(frames), en_rows, shared_rows, frames.rows());
}

void ProsodyPredictor::f0n(const Context& ctx, const Context& n_ctx, const Context& f0_shortcuts,
                           const Context& n_shortcuts, const float* shared_rows, int F, float* f0,
                           float* n) const {
    const int hid = hid_;
    const int half = hid / 2;

    float* shared = ctx.floats(Slot::kProsodyShared, int64_t(hid) * F);
    ops::transpose(shared_rows, shared, F, hid, ctx.stream);

    // The two stacks are independent: N on n_ctx's stream, F0 on ctx's.
    n_ctx.wait_for(ctx);
    const struct {
        const Context& ctx;
        const Context& shortcuts;
        const Stack& stack;
        float* out;
    } stacks[] = {{ctx, f0_shortcuts, f0_, f0}, {n_ctx, n_shortcuts, n_, n}};
    for (const auto& stack : stacks) {
        const Context& sc = stack.ctx;
        const std::vector<AdainResBlk1d>& blocks = stack.stack.blocks;
        float* a = sc.floats(Slot::kProsodyStackA, int64_t(hid) * F);
        float* b = sc.floats(Slot::kProsodyStackB, int64_t(half) * 2 * F);
        float* c = sc.floats(Slot::kProsodyStackC, int64_t(half) * 2 * F);
        blocks[0](sc, stack.shortcuts, shared, F, a);
        blocks[1](sc, stack.shortcuts, a, F, b);
        blocks[2](sc, stack.shortcuts, b, 2 * F, c);
        stack.stack.proj(sc, c, stack.out, 2 * F);
    }
    ctx.wait_for(n_ctx);
    ctx.mark("F0 || N stacks");
}

}  // namespace kokoro
