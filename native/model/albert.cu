// ALBERT (transformers.AlbertModel as kokoro's CustomAlbert uses it): word +
// position + token-type-0 embeddings, LayerNorm, the 128 -> hidden mapping,
// then ONE shared transformer layer applied bert_layers times. Time-major
// [T, C] rows throughout; the residual adds ride on the GEMMs (beta = 1), the
// biases on the LayerNorms and the GELU after them, the ffn's split sums
// (fast) on the GELU (Linear::sums), and the attention mask is empty
// (every position of an utterance valid). Query, key and value come from ONE
// GEMM on the stacked "attention.qkv" weight (DeviceWeights): [T, 3 * hid],
// read by the attention at row pitch 3 * hid; in precision "fast" on long
// inputs the attention runs on split FP16 operands (ops::attention_split_half)
// and adds the GEMM's split sums and bias itself. Stacked utterances
// (UtteranceRows: a batch's group) run every layer but the attention on all their
// rows at once, the attention per utterance; each row's result has the bits
// of the utterance's own call (the split linears take its plans).
#include <algorithm>
#include <string>

#include "kokoro/model.h"

namespace kokoro {

namespace {
constexpr float kAlbertLayerNormEps = 1e-12f;
// Fast precision's attention moves to the tensor cores from this many
// positions on: at 502 it ends ALBERT ~0.09 ms sooner (H200); at 32 and 157 its
// small GEMMs gained nothing on the SGEMMs' latency and cost a batch of
// medium utterances ~1% throughput.
constexpr int kSplitAttentionMinPositions = 257;
const std::string kEmbeddings = "bert.embeddings";
const std::string kLayer = "bert.encoder.albert_layer_groups.0.albert_layers.0";
}  // namespace

AlbertLayer::AlbertLayer(const ModelConfig& cfg, const DeviceWeights& weights,
                         const std::string& prefix)
    : hid_(cfg.bert_hidden),
      inter_(cfg.bert_intermediate),
      heads_(cfg.bert_heads),
      qkv_(weights, prefix + ".attention.qkv", hid_, 3 * hid_),
      dense_(weights, prefix + ".attention.dense", hid_, hid_),
      ffn_(weights, prefix + ".ffn", hid_, inter_),
      ffn_output_(weights, prefix + ".ffn_output", inter_, hid_),
      attention_norm_w_(weights.get(prefix + ".attention.LayerNorm.weight", hid_)),
      attention_norm_b_(weights.get(prefix + ".attention.LayerNorm.bias", hid_)),
      full_norm_w_(weights.get(prefix + ".full_layer_layer_norm.weight", hid_)),
      full_norm_b_(weights.get(prefix + ".full_layer_layer_norm.bias", hid_)) {}

bool AlbertLayer::split_attention(int positions) const {
    return qkv_.split() && positions >= kSplitAttentionMinPositions;
}

AlbertLayer::Buffers AlbertLayer::buffers(const Context& ctx, const UtteranceRows& tokens) const {
    const int hid = hid_, head_dim = hid / heads_;
    const int T = tokens.rows();
    // Fast precision (split QKV weight): the attention of utterances of at
    // least kSplitAttentionMinPositions on the tensor cores. Where all of them
    // take it, it reads the QKV projection's split sums and adds the bias;
    // else the projection adds the bias (the same bits: its epilogue adds it
    // to the same sum) and the attention of each utterance reads it.
    Buffers b;
    int longest = 0, longest_split = 0;
    for (int u = 0; u < tokens.count(); ++u) {
        const int n = tokens.length(u);
        const bool split = split_attention(n);
        longest = std::max(longest, n);
        if (split) longest_split = std::max(longest_split, n);
        b.all_split = b.all_split && split;
    }
    b.qkv = ctx.floats(Slot::kAlbertQkv, int64_t(T) * 3 * hid);
    b.attended = ctx.floats(Slot::kAlbertAttended, int64_t(T) * hid);
    b.scores = ctx.floats(Slot::kAlbertScores, ops::attention_scratch_floats(longest, heads_));
    b.attention_halves =
        longest_split > 0
            ? ctx.halves(Slot::kAlbertAttentionSplit,
                         ops::attention_split_half_scratch_halves(longest_split, heads_, head_dim))
            : nullptr;
    b.ffn = ctx.floats(Slot::kAlbertFfn, int64_t(T) * inter_);
    return b;
}

void AlbertLayer::operator()(const Context& ctx, const UtteranceRows& tokens, float* h,
                             const Buffers& b) const {
    const int hid = hid_, inter = inter_, heads = heads_, head_dim = hid / heads;
    const int T = tokens.rows();
    // The biases of the linears that feed a LayerNorm or the GELU ride on
    // those ops (same arithmetic, one pass fewer each).
    const bool split_ffn_output = ffn_output_.split();
    ops::SplitSums qkv_sums = b.qkv;
    if (b.all_split) {
        qkv_sums = qkv_.sums(ctx, h, b.qkv, T);
    } else {
        qkv_(ctx, h, b.qkv, T);
    }
    for (int u = 0; u < tokens.count(); ++u) {
        const int n = tokens.length(u);
        const int64_t row = tokens.offset(u);
        if (split_attention(n)) {
            ops::attention_split_half(qkv_sums.from(row * 3 * hid),
                                      b.all_split ? qkv_.bias() : nullptr, b.attended + row * hid,
                                      n, heads, head_dim, n, b.scores, b.attention_halves,
                                      ctx.stream);
        } else {
            const float* q = b.qkv + row * 3 * hid;
            ops::attention(ctx.blas, q, q + hid, q + 2 * hid, b.attended + row * hid, n, heads,
                           head_dim, 3 * hid, n, b.scores, ctx.stream);
        }
    }
    // h = LayerNorm(h + dense(attended))
    dense_.without_bias(ctx, b.attended, h, T, 1.f);
    ops::layer_norm_rows(h, h, T, hid, attention_norm_w_, attention_norm_b_, nullptr, nullptr,
                         kAlbertLayerNormEps, ctx.stream, dense_.bias());
    // h = LayerNorm(h + ffn_output(gelu_new(ffn(h)))); where ffn_output is a
    // split linear (fast), the GELU writes its split operand.
    const ops::SplitSums ffn_sums = ffn_.sums(ctx, h, b.ffn, T);
    if (split_ffn_output) {
        ops::gelu_new_split(ffn_sums, ctx.split_input(T, inter), T, inter, ffn_.bias(),
                            ctx.stream);
    } else {
        ops::gelu_new(ffn_sums, b.ffn, T, inter, ffn_.bias(), ctx.stream);
    }
    ffn_output_.without_bias(ctx, split_ffn_output ? nullptr : b.ffn, h, T, 1.f);
    ops::layer_norm_rows(h, h, T, hid, full_norm_w_, full_norm_b_, nullptr, nullptr,
                         kAlbertLayerNormEps, ctx.stream, ffn_output_.bias());
}

Albert::Albert(const ModelConfig& cfg, const DeviceWeights& weights)
    : emb_(cfg.bert_embedding),
      hid_(cfg.bert_hidden),
      layers_(cfg.bert_layers),
      word_(weights.get(kEmbeddings + ".word_embeddings.weight", int64_t(cfg.n_token) * emb_)),
      position_(weights.get(kEmbeddings + ".position_embeddings.weight",
                            int64_t(cfg.bert_positions) * emb_)),
      token_type_(weights.get(kEmbeddings + ".token_type_embeddings.weight", 2 * int64_t(emb_))),
      embedding_norm_w_(weights.get(kEmbeddings + ".LayerNorm.weight", emb_)),
      embedding_norm_b_(weights.get(kEmbeddings + ".LayerNorm.bias", emb_)),
      mapping_in_(weights, "bert.encoder.embedding_hidden_mapping_in", emb_, hid_),
      layer_(cfg, weights, kLayer) {}

void Albert::operator()(const Context& base, const int32_t* ids, const UtteranceRows& tokens,
                        float* out) const {
    const Context ctx = base.with_utterance_rows(tokens);
    const int T = tokens.rows();

    float* embedded = ctx.floats(Slot::kAlbertEmbedded, int64_t(T) * emb_);
    ops::albert_embeddings(ids, word_, position_, token_type_, embedded, T, emb_, ctx.stream,
                           tokens.positions());
    ops::layer_norm_rows(embedded, embedded, T, emb_, embedding_norm_w_, embedding_norm_b_,
                         nullptr, nullptr, kAlbertLayerNormEps, ctx.stream);

    float* h = out;  // [T, hid], updated in place layer by layer
    mapping_in_(ctx, embedded, h, T);
    const AlbertLayer::Buffers buffers = layer_.buffers(ctx, tokens);
    for (int i = 0; i < layers_; ++i) layer_(ctx, tokens, h, buffers);
}

}  // namespace kokoro
