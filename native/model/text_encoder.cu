// Text encoder (kokoro/modules.py TextEncoder): embedding, n_layer x [weight-
// normed Conv1d, LayerNorm over channels (gamma/beta), LeakyReLU 0.2], then a
// BiLSTM. The convolutions run channels-first [C, T], the LSTM time-major;
// masks are no-ops for a batch of one and dropout is identity.
#include "kokoro/model.h"

namespace kokoro {

namespace {
constexpr float kLayerNormEps = 1e-5f;
constexpr float kLeakySlope = 0.2f;
}  // namespace

void text_encoder_forward(const Context& ctx, const int32_t* ids, int T, float* t_en) {
    const int C = ctx.cfg.hidden_dim;
    const int K = ctx.cfg.text_encoder_kernel_size;
    const int64_t n = int64_t(C) * T;

    float* rows = ctx.floats("text.rows", n);
    ops::embedding(ids, ctx.w("text_encoder.embedding.weight", int64_t(ctx.cfg.n_token) * C), rows,
                   T, C, ctx.stream);
    float* x = ctx.floats("text.x", n);
    float* y = ctx.floats("text.y", n);
    ops::transpose(rows, x, T, C, ctx.stream);
    for (int i = 0; i < ctx.cfg.n_layer; ++i) {
        const std::string p = "text_encoder.cnn." + std::to_string(i);
        ctx.conv1d(p + ".0", x, y, C, C, T, K, 1, (K - 1) / 2, 1, 1, true);
        ops::layer_norm_channels(y, y, C, T, ctx.w(p + ".1.gamma", C), ctx.w(p + ".1.beta", C),
                                 nullptr, nullptr, kLayerNormEps, ctx.stream);
        ops::leaky_relu(y, x, n, kLeakySlope, ctx.stream);
    }
    ops::transpose(x, rows, C, T, ctx.stream);
    float* lstm_out = ctx.floats("text.lstm_out", n);
    ctx.lstm("text_encoder.lstm", rows, lstm_out, T);
    ops::transpose(lstm_out, t_en, T, C, ctx.stream);
}

}  // namespace kokoro
