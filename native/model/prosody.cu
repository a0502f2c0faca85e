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
#include <vector>

#include "kokoro/model.h"

namespace kokoro {

namespace {
constexpr float kAdaLayerNormEps = 1e-5f;
}  // namespace

void duration_encoder_forward(const Context& ctx, const UtteranceRows& tokens,
                              const std::vector<UtteranceStyle>& styles, const float* d_en_rows,
                              float* d) {
    const int hid = ctx.cfg.hidden_dim;
    const int sd = ctx.cfg.style_dim;
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
    for (int i = 0; i < ctx.cfg.n_layer; ++i) {
        const std::string lstm = "predictor.text_encoder.lstms." + std::to_string(2 * i);
        const std::string norm_fc =
            "predictor.text_encoder.lstms." + std::to_string(2 * i + 1) + ".fc";
        stacked.lstm(lstm, d, lstm_out, rows);
        for (int u = 0; u < tokens.count(); ++u) {
            const int64_t row = tokens.offset(u);
            const float* gamma_beta = ctx.with_style(styles[u]).style(norm_fc, hid);
            ops::layer_norm_rows(lstm_out + row * hid, d + row * width, tokens.length(u), hid,
                                 nullptr, nullptr, gamma_beta, gamma_beta + hid,
                                 kAdaLayerNormEps, ctx.stream, nullptr, width);
        }
    }
}

void duration_head_forward(const Context& ctx, const UtteranceRows& tokens, const float* d,
                           float* dur_lstm, float* logits) {
    const int hid = ctx.cfg.hidden_dim;
    ctx.with_utterance_rows(tokens).lstm("predictor.lstm", d, dur_lstm, tokens.rows());
    for (int u = 0; u < tokens.count(); ++u) {
        const int64_t row = tokens.offset(u);
        ctx.linear("predictor.duration_proj.linear_layer", dur_lstm + row * hid,
                   logits + row * ctx.cfg.max_dur, tokens.length(u), hid, ctx.cfg.max_dur);
    }
}

void shared_lstm_forward(const Context& ctx, const UtteranceRows& frames, const float* en_rows,
                         float* shared_rows) {
    ctx.with_utterance_rows(frames).lstm("predictor.shared", en_rows, shared_rows, frames.rows());
}

void f0n_forward(const Context& ctx, const Context& n_ctx, const Context& f0_shortcuts,
                 const Context& n_shortcuts, const float* shared_rows, int F, float* f0, float* n) {
    const int hid = ctx.cfg.hidden_dim;
    const int half = hid / 2;

    float* shared = ctx.floats(Slot::kProsodyShared, int64_t(hid) * F);
    ops::transpose(shared_rows, shared, F, hid, ctx.stream);

    // The two stacks are independent: N on n_ctx's stream, F0 on ctx's.
    n_ctx.wait_for(ctx);
    const struct {
        const Context& ctx;
        const Context& shortcuts;
        const char* name;
        float* out;
    } stacks[] = {{ctx, f0_shortcuts, "F0", f0}, {n_ctx, n_shortcuts, "N", n}};
    for (const auto& stack : stacks) {
        const Context& sc = stack.ctx;
        const std::string p = std::string("predictor.") + stack.name;
        float* a = sc.floats(Slot::kProsodyStackA, int64_t(hid) * F);
        float* b = sc.floats(Slot::kProsodyStackB, int64_t(half) * 2 * F);
        float* c = sc.floats(Slot::kProsodyStackC, int64_t(half) * 2 * F);
        adain_res_blk1d(sc, stack.shortcuts, p + ".0", shared, hid, hid, F, false, a);
        adain_res_blk1d(sc, stack.shortcuts, p + ".1", a, hid, half, F, true, b);
        adain_res_blk1d(sc, stack.shortcuts, p + ".2", b, half, half, 2 * F, false, c);
        sc.conv1d(p + "_proj", c, stack.out, ConvShape{half, 1, 2 * F, 1});
    }
    ctx.wait_for(n_ctx);
    ctx.mark("F0 || N stacks");
}

}  // namespace kokoro
