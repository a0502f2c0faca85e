// ALBERT (transformers.AlbertModel as kokoro's CustomAlbert uses it): word +
// position + token-type-0 embeddings, LayerNorm, the 128 -> hidden mapping,
// then ONE shared transformer layer applied bert_layers times. Time-major
// [T, C] rows throughout; the residual adds ride on the GEMMs (beta = 1), the
// biases on the LayerNorms and the GELU after them, the ffn's split sums
// (fast) on the GELU (Context::linear_sums), and the attention mask is empty
// (every position of an utterance valid). Query, key and value come from ONE
// GEMM on the stacked "attention.qkv" weight (DeviceWeights): [T, 3 * hid],
// read by the attention at row pitch 3 * hid; in precision "fast" on long
// inputs the attention runs on split FP16 operands (ops::attention_split_half)
// and adds the GEMM's split sums and bias itself. Stacked utterances
// (UtteranceRows: a batch's group) run every layer but the attention on all their
// rows at once, the attention per utterance; each row's result has the bits
// of the utterance's own call (the split linears take its plans).
#include <algorithm>

#include "kokoro/model.h"

namespace kokoro {

namespace {
constexpr float kAlbertLayerNormEps = 1e-12f;
// Fast precision's attention moves to the tensor cores from this many
// positions on: at 502 it ends ALBERT ~0.09 ms sooner (H200); at 32 and 157 its
// small GEMMs gained nothing on the SGEMMs' latency and cost a batch of
// medium utterances ~1% throughput.
constexpr int kSplitAttentionMinPositions = 257;
const char* const kLayer = "bert.encoder.albert_layer_groups.0.albert_layers.0";
}  // namespace

void albert_forward(const Context& base, const int32_t* ids, const UtteranceRows& tokens,
                    float* out) {
    const Context ctx = base.with_utterance_rows(tokens);
    const ModelConfig& cfg = ctx.cfg;
    const int emb = cfg.bert_embedding;
    const int hid = cfg.bert_hidden;
    const int inter = cfg.bert_intermediate;
    const int T = tokens.rows();
    const std::string layer = kLayer;

    float* embedded = ctx.floats(Slot::kAlbertEmbedded, int64_t(T) * emb);
    const float* word = ctx.w("bert.embeddings.word_embeddings.weight", int64_t(cfg.n_token) * emb);
    const float* pos =
        ctx.w("bert.embeddings.position_embeddings.weight", int64_t(cfg.bert_positions) * emb);
    const float* type0 = ctx.w("bert.embeddings.token_type_embeddings.weight", 2 * int64_t(emb));
    ops::albert_embeddings(ids, word, pos, type0, embedded, T, emb, ctx.stream, tokens.positions());
    ops::layer_norm_rows(embedded, embedded, T, emb, ctx.w("bert.embeddings.LayerNorm.weight", emb),
                         ctx.w("bert.embeddings.LayerNorm.bias", emb), nullptr, nullptr,
                         kAlbertLayerNormEps, ctx.stream);

    float* h = out;  // [T, hid], updated in place layer by layer
    ctx.linear("bert.encoder.embedding_hidden_mapping_in", embedded, h, T, emb, hid);

    const int heads = cfg.bert_heads, head_dim = hid / heads;
    // Fast precision (split QKV weight): the attention of utterances of at
    // least kSplitAttentionMinPositions on the tensor cores. Where all of them
    // take it, it reads the QKV projection's split sums and adds the bias;
    // else the projection adds the bias (the same bits: its epilogue adds it
    // to the same sum) and the attention of each utterance reads it.
    const std::string qkv_prefix = layer + ".attention.qkv";
    const bool split_weight =
        ctx.weights.plan(qkv_prefix + ".weight").kernel == Kernel::kSplitLinear;
    int longest = 0, longest_split = 0;
    bool all_split = true;
    for (int u = 0; u < tokens.count(); ++u) {
        const int n = tokens.length(u);
        const bool split = split_weight && n >= kSplitAttentionMinPositions;
        longest = std::max(longest, n);
        if (split) longest_split = std::max(longest_split, n);
        all_split = all_split && split;
    }
    float* qkv = ctx.floats(Slot::kAlbertQkv, int64_t(T) * 3 * hid);
    float* attended = ctx.floats(Slot::kAlbertAttended, int64_t(T) * hid);
    float* scores = ctx.floats(Slot::kAlbertScores, ops::attention_scratch_floats(longest, heads));
    __half* attention_halves =
        longest_split > 0
            ? ctx.halves(Slot::kAlbertAttentionSplit,
                         ops::attention_split_half_scratch_halves(longest_split, heads, head_dim))
            : nullptr;
    const float* qkv_b = ctx.w(qkv_prefix + ".bias", 3 * int64_t(hid));
    float* ffn = ctx.floats(Slot::kAlbertFfn, int64_t(T) * inter);
    const float* attn_ln_w = ctx.w(layer + ".attention.LayerNorm.weight", hid);
    const float* attn_ln_b = ctx.w(layer + ".attention.LayerNorm.bias", hid);
    const float* full_ln_w = ctx.w(layer + ".full_layer_layer_norm.weight", hid);
    const float* full_ln_b = ctx.w(layer + ".full_layer_layer_norm.bias", hid);
    // The biases of the linears that feed a LayerNorm or the GELU ride on
    // those ops (same arithmetic, one pass fewer each).
    const float* dense_b = ctx.w(layer + ".attention.dense.bias", hid);
    const float* ffn_b = ctx.w(layer + ".ffn.bias", inter);
    const float* ffn_output_b = ctx.w(layer + ".ffn_output.bias", hid);
    const bool split_ffn_output = ctx.weights.plan(layer + ".ffn_output.weight").kernel ==
                                  Kernel::kSplitLinear;

    for (int i = 0; i < cfg.bert_layers; ++i) {
        ops::SplitSums qkv_sums = qkv;
        if (all_split) {
            qkv_sums = ctx.linear_sums(qkv_prefix, h, qkv, T, hid, 3 * hid);
        } else {
            ctx.linear(qkv_prefix, h, qkv, T, hid, 3 * hid);
        }
        for (int u = 0; u < tokens.count(); ++u) {
            const int n = tokens.length(u);
            const int64_t row = tokens.offset(u);
            if (split_weight && n >= kSplitAttentionMinPositions) {
                ops::attention_split_half(qkv_sums.from(row * 3 * hid), all_split ? qkv_b : nullptr,
                                          attended + row * hid, n, heads, head_dim, n, scores,
                                          attention_halves, ctx.stream);
            } else {
                const float* q = qkv + row * 3 * hid;
                ops::attention(ctx.blas, q, q + hid, q + 2 * hid, attended + row * hid, n, heads,
                               head_dim, 3 * hid, n, scores, ctx.stream);
            }
        }
        // h = LayerNorm(h + dense(attended))
        ctx.linear(layer + ".attention.dense", attended, h, T, hid, hid, 1.f, false);
        ops::layer_norm_rows(h, h, T, hid, attn_ln_w, attn_ln_b, nullptr, nullptr,
                             kAlbertLayerNormEps, ctx.stream, dense_b);
        // h = LayerNorm(h + ffn_output(gelu_new(ffn(h)))); where ffn_output
        // is a split linear (fast), the GELU writes its split operand.
        const ops::SplitSums ffn_sums = ctx.linear_sums(layer + ".ffn", h, ffn, T, hid, inter);
        if (split_ffn_output) {
            ops::gelu_new_split(ffn_sums, ctx.split_input(T, inter), T, inter, ffn_b, ctx.stream);
        } else {
            ops::gelu_new(ffn_sums, ffn, T, inter, ffn_b, ctx.stream);
        }
        ctx.linear(layer + ".ffn_output", split_ffn_output ? nullptr : ffn, h, T, inter, hid, 1.f,
                   false);
        ops::layer_norm_rows(h, h, T, hid, full_ln_w, full_ln_b, nullptr, nullptr,
                             kAlbertLayerNormEps, ctx.stream, ffn_output_b);
    }
}

}  // namespace kokoro
