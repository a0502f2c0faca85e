// Text encoder (kokoro/modules.py TextEncoder): embedding, n_layer x [weight-
// normed Conv1d, LayerNorm over channels (gamma/beta), LeakyReLU 0.2], then a
// BiLSTM. The convolutions run channels-first [C, T], the LSTM time-major;
// masks are no-ops for a batch of one and dropout is identity. Stacked
// utterances (UtteranceRows: a batch's group) run the embedding and the LSTM on
// all of their rows at once (its recurrences side by side: ops::
// lstm_recurrence), the convolutions per utterance, each with its own
// padding; every utterance's bits are those of its own call.
#include <string>

#include "kokoro/model.h"

namespace kokoro {

namespace {
constexpr float kLayerNormEps = 1e-5f;
constexpr float kLeakySlope = 0.2f;
}  // namespace

TextEncoder::TextEncoder(const ModelConfig& cfg, const DeviceWeights& weights)
    : channels_(cfg.hidden_dim),
      embedding_(weights.get("text_encoder.embedding.weight", int64_t(cfg.n_token) * channels_)),
      lstm_(weights, "text_encoder.lstm") {
    const int C = channels_;
    const int K = cfg.text_encoder_kernel_size;
    for (int i = 0; i < cfg.n_layer; ++i) {
        const std::string p = "text_encoder.cnn." + std::to_string(i);
        cnn_.push_back({Conv1d(weights, p + ".0", ConvShape{C, C, K}.with_pad((K - 1) / 2)),
                        weights.get(p + ".1.gamma", C), weights.get(p + ".1.beta", C)});
    }
}

void TextEncoder::operator()(const Context& ctx, const int32_t* ids, const UtteranceRows& tokens,
                             float* t_en) const {
    const int C = channels_;
    const int rows = tokens.rows();
    const int longest = tokens.longest();

    float* stacked = ctx.floats(Slot::kTextRows, int64_t(rows) * C);
    ops::embedding(ids, embedding_, stacked, rows, C, ctx.stream);
    float* x = ctx.floats(Slot::kTextX, int64_t(C) * longest);
    float* y = ctx.floats(Slot::kTextY, int64_t(C) * longest);
    for (int u = 0; u < tokens.count(); ++u) {
        const int T = tokens.length(u);
        const int64_t n = int64_t(C) * T;
        float* rows_u = stacked + int64_t(tokens.offset(u)) * C;
        ops::transpose(rows_u, x, T, C, ctx.stream);
        for (const Cnn& layer : cnn_) {
            layer.conv(ctx, x, y, T);
            ops::layer_norm_channels(y, y, C, T, layer.gamma, layer.beta, nullptr, nullptr,
                                     kLayerNormEps, ctx.stream);
            ops::leaky_relu(y, x, n, kLeakySlope, ctx.stream);
        }
        ops::transpose(x, rows_u, C, T, ctx.stream);
    }
    float* lstm_out = ctx.floats(Slot::kTextLstmOut, int64_t(rows) * C);
    lstm_(ctx.with_utterance_rows(tokens), stacked, lstm_out, rows);
    for (int u = 0; u < tokens.count(); ++u) {
        const int64_t at = int64_t(tokens.offset(u)) * C;
        ops::transpose(lstm_out + at, t_en + at, tokens.length(u), C, ctx.stream);
    }
}

}  // namespace kokoro
