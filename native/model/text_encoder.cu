// Text encoder (kokoro/modules.py TextEncoder): embedding, n_layer x [weight-
// normed Conv1d, LayerNorm over channels (gamma/beta), LeakyReLU 0.2], then a
// BiLSTM. The convolutions run channels-first [C, T], the LSTM time-major;
// masks are no-ops for a batch of one and dropout is identity. Stacked
// utterances (UtteranceRows: a batch's group) run the embedding and the LSTM on
// all of their rows at once (its recurrences side by side: ops::
// lstm_recurrence), the convolutions per utterance, each with its own
// padding; every utterance's bits are those of its own call.
#include "kokoro/model.h"

namespace kokoro {

namespace {
constexpr float kLayerNormEps = 1e-5f;
constexpr float kLeakySlope = 0.2f;
}  // namespace

void text_encoder_forward(const Context& ctx, const int32_t* ids, const UtteranceRows& tokens,
                          float* t_en) {
    const int C = ctx.cfg.hidden_dim;
    const int K = ctx.cfg.text_encoder_kernel_size;
    const int rows = tokens.rows();
    const int longest = tokens.longest();

    float* stacked = ctx.floats(Slot::kTextRows, int64_t(rows) * C);
    ops::embedding(ids, ctx.w("text_encoder.embedding.weight", int64_t(ctx.cfg.n_token) * C),
                   stacked, rows, C, ctx.stream);
    float* x = ctx.floats(Slot::kTextX, int64_t(C) * longest);
    float* y = ctx.floats(Slot::kTextY, int64_t(C) * longest);
    for (int u = 0; u < tokens.count(); ++u) {
        const int T = tokens.length(u);
        const int64_t n = int64_t(C) * T;
        float* rows_u = stacked + int64_t(tokens.offset(u)) * C;
        ops::transpose(rows_u, x, T, C, ctx.stream);
        for (int i = 0; i < ctx.cfg.n_layer; ++i) {
            const std::string p = "text_encoder.cnn." + std::to_string(i);
            ctx.conv1d(p + ".0", x, y, ConvShape{C, C, T, K}.with_pad((K - 1) / 2));
            ops::layer_norm_channels(y, y, C, T, ctx.w(p + ".1.gamma", C), ctx.w(p + ".1.beta", C),
                                     nullptr, nullptr, kLayerNormEps, ctx.stream);
            ops::leaky_relu(y, x, n, kLeakySlope, ctx.stream);
        }
        ops::transpose(x, rows_u, C, T, ctx.stream);
    }
    float* lstm_out = ctx.floats(Slot::kTextLstmOut, int64_t(rows) * C);
    ctx.with_utterance_rows(tokens).lstm("text_encoder.lstm", stacked, lstm_out, rows);
    for (int u = 0; u < tokens.count(); ++u) {
        const int64_t at = int64_t(tokens.offset(u)) * C;
        ops::transpose(lstm_out + at, t_en + at, tokens.length(u), C, ctx.stream);
    }
}

}  // namespace kokoro
