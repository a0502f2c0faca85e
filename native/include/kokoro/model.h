// The Kokoro-82M model parts of the native engine, built once from the
// weights out of the layers of layers.h (a missing or misshapen weight is a
// WeightsError when the Model is built). They mirror the official modules
// (kokoro/modules.py, istftnet.py) and the CPU backend's kokoro_gpu/model:
// albert.cu, prosody.cu, text_encoder.cu, decoder.cu (also the shared
// AdainResBlk1d), generator.cu (with AdaINResBlock1). A part's call runs it
// on the Context(s) it is given; native/engine/lane.cu runs the parts in
// order and chooses their contexts (streams, precision) and schedules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kokoro/context.h"
#include "kokoro/layers.h"
#include "kokoro/ops.h"

namespace kokoro {

// ------------------------------------------------------------- albert.cu
// ALBERT's transformer layer on h [T, hidden] in place: attention (query,
// key and value from one stacked linear) and its output projection, a
// LayerNorm, the feed-forward pair (GELU between), a LayerNorm.
class AlbertLayer {
public:
    AlbertLayer(const ModelConfig& cfg, const DeviceWeights& weights, const std::string& prefix);
    // The buffers a pass over `tokens` uses (ALBERT's workspace slots, taken
    // once for all of its layers), and whether every utterance's attention
    // runs split (split_attention).
    struct Buffers {
        float *qkv = nullptr, *attended = nullptr, *scores = nullptr, *ffn = nullptr;
        __half* attention_halves = nullptr;
        bool all_split = true;
    };
    Buffers buffers(const Context& ctx, const UtteranceRows& tokens) const;
    void operator()(const Context& ctx, const UtteranceRows& tokens, float* h,
                    const Buffers& b) const;

private:
    // Whether an utterance of `positions` runs its attention on split FP16
    // operands (ops::attention_split_half).
    bool split_attention(int positions) const;
    int hid_, inter_, heads_;
    Linear qkv_, dense_, ffn_, ffn_output_;
    const float *attention_norm_w_, *attention_norm_b_, *full_norm_w_, *full_norm_b_;
};

// ALBERT: embeddings, their LayerNorm and mapping to the hidden size, then
// ONE shared AlbertLayer applied bert_layers times.
class Albert {
public:
    Albert(const ModelConfig& cfg, const DeviceWeights& weights);
    // Last hidden state: ids [rows] -> out [rows, bert_hidden], every
    // utterance of `tokens` on its own rows (attention within the utterance).
    void operator()(const Context& ctx, const int32_t* ids, const UtteranceRows& tokens,
                    float* out) const;

private:
    int emb_, hid_, layers_;
    const float *word_, *position_, *token_type_, *embedding_norm_w_, *embedding_norm_b_;
    Linear mapping_in_;
    AlbertLayer layer_;
};

// ------------------------------------------------------- text_encoder.cu
// Text encoder: embedding, n_layer x [Conv1d, LayerNorm over channels,
// LeakyReLU 0.2], then a BiLSTM.
class TextEncoder {
public:
    TextEncoder(const ModelConfig& cfg, const DeviceWeights& weights);
    // ids [rows] -> t_en, utterance u's [hidden, T_u] at hidden x its first
    // row (back to back, each channels-first).
    void operator()(const Context& ctx, const int32_t* ids, const UtteranceRows& tokens,
                    float* t_en) const;

private:
    struct Cnn {
        Conv1d conv;
        const float *gamma, *beta;
    };
    int channels_;
    const float* embedding_;
    std::vector<Cnn> cnn_;
    BiLstm lstm_;
};

// ------------------------------------------------------------ decoder.cu
// AdainResBlk1d `prefix`: x [c_in, T] -> out [c_out, T or 2T] (out may not
// be x); style from `prefix.norm{1,2}.fc`.
class AdainResBlk1d {
public:
    AdainResBlk1d(const DeviceWeights& weights, const std::string& prefix, int c_in, int c_out,
                  bool upsample);
    // The shortcut (upsampling, 1x1 conv) runs on `shortcut_ctx`,
    // concurrently with the residual path on ctx (shortcut_ctx may be ctx
    // itself); ctx has waited for it on return.
    void operator()(const Context& ctx, const Context& shortcut_ctx, const float* x, int T,
                    float* out) const;

private:
    int c_in_, c_out_;
    bool upsample_;
    std::optional<Conv1d> conv1x1_;  // where c_in != c_out
    // The residual path's first AdaIN and conv: with the upsampler between
    // them, or fused (AdainConv).
    std::optional<AdaIN> norm1_;
    std::optional<PoolConv1d> pool_conv1_;
    std::optional<AdainConv> norm1_conv1_;
    AdainConv norm2_conv2_;
};

// Decoder up to the generator: the F0 / N downsampling convs, asr_res, the
// encode block and the decode blocks.
class Decoder {
public:
    Decoder(const ModelConfig& cfg, const DeviceWeights& weights);
    // t_en [hidden, T], frame_token [F], f0/n [2F] -> out
    // [upsample_initial_channel, 2F]; the blocks' shortcuts and asr_res on
    // `shortcut_ctx` (ctx has waited for it on return).
    void operator()(const Context& ctx, const Context& shortcut_ctx, const float* t_en,
                    const int32_t* frame_token, int T, int F, const float* f0, const float* n,
                    float* out) const;

private:
    int hid_, out_channels_;
    Conv1d f0_conv_, n_conv_, asr_res_;
    AdainResBlk1d encode_;
    std::vector<AdainResBlk1d> decode_;
};

// ------------------------------------------------------------ prosody.cu
// Prosody predictor: the duration encoder, the duration head, and
// F0Ntrain's shared LSTM and F0 / N stacks.
class ProsodyPredictor {
public:
    ProsodyPredictor(const ModelConfig& cfg, const DeviceWeights& weights);
    // Duration encoder: d_en_rows [rows, hidden] (time-major bert_encoder
    // output) and each utterance's style (its prosody style s [style_dim]
    // and style projections) -> d [rows, hidden + style_dim]; every
    // utterance of `tokens` on its own rows.
    void duration_encoder(const Context& ctx, const UtteranceRows& tokens,
                          const std::vector<UtteranceStyle>& styles, const float* d_en_rows,
                          float* d) const;
    // Duration head: d [rows, hidden + style] -> dur_lstm [rows, hidden] and
    // duration logits [rows, max_dur].
    void duration_head(const Context& ctx, const UtteranceRows& tokens, const float* d,
                       float* dur_lstm, float* logits) const;
    // F0Ntrain's shared LSTM: en_rows [rows, hidden + style] (time-major,
    // the aligned frames) -> shared_rows [rows, hidden]; every utterance of
    // `frames` (one, or a batch's group stacked) on its own rows.
    void shared_lstm(const Context& ctx, const UtteranceRows& frames, const float* en_rows,
                     float* shared_rows) const;
    // F0Ntrain's stacks: shared_rows [F, hidden] (the shared LSTM's output)
    // -> f0 [2F], n [2F]. The F0 stack runs on `ctx`, the N stack
    // concurrently on `n_ctx`, their blocks' shortcuts on `f0_shortcuts` and
    // `n_shortcuts` (AdainResBlk1d); `ctx` has waited for all of them on
    // return.
    void f0n(const Context& ctx, const Context& n_ctx, const Context& f0_shortcuts,
             const Context& n_shortcuts, const float* shared_rows, int F, float* f0,
             float* n) const;

private:
    struct EncoderLayer {
        BiLstm lstm;
        StyleProjection norm;  // AdaLayerNorm's
    };
    // An F0 or N stack: three AdainResBlk1d (the second upsamples), then the
    // 1x1 projection to one channel.
    struct Stack {
        std::vector<AdainResBlk1d> blocks;
        Conv1d proj;
    };
    static Stack stack(const ModelConfig& cfg, const DeviceWeights& weights,
                       const std::string& name);
    int hid_, style_dim_, max_dur_;
    std::vector<EncoderLayer> encoder_;
    BiLstm duration_lstm_;
    Linear duration_proj_;
    BiLstm shared_;
    Stack f0_, n_;
};

// ---------------------------------------------------------- generator.cu
int generator_spec_frames(const ModelConfig& cfg, int F);
// The generator's convs of stride > 1 (its noise convs but the last), by
// weight name: DeviceWeights keeps them for the polyphase tensor-core conv.
StridedConvs generator_strided_convs(const ModelConfig& cfg);
// The values [C, T] of each upsampling stage's output: the scheduler's
// measure of a stage (GeneratorSchedule).
std::vector<int64_t> generator_stage_values(const ModelConfig& cfg, int F);
// Where the generator's work runs, as the lane schedules it (lane.cu): the
// source branches' context `side` (whose stream holds har already), and per
// stage whether its source branch runs on `side` (else on ctx, just before
// the stage), whether its residual blocks run concurrently (enqueued in step
// order), and each residual block's context.
constexpr int kResblockStreams = 2;
struct GeneratorSchedule {
    const Context& side;
    std::vector<bool> branch_on_side;                  // per stage
    std::vector<bool> concurrent_blocks;               // per stage
    std::vector<std::vector<Context>> block_contexts;  // per stage, per residual block
};

// AdaINResBlock1 `prefix` on [C, T]: three times AdaIN + Snake, dilated
// conv, AdaIN + Snake, conv, residual add (generator.cu's Run enqueues it).
class AdainResBlock1 {
public:
    AdainResBlock1(const DeviceWeights& weights, const std::string& prefix, int C, int kernel,
                   const std::vector<int>& dilations);
    // Per layer: its first AdaIN + conv (dilated), its second (dilation 1).
    struct Layer {
        AdainConv first, second;
    };
    const std::vector<Layer>& layers() const { return layers_; }
    int channels() const { return channels_; }

private:
    int channels_;
    std::vector<Layer> layers_;
};

// One upsampling stage of the generator: its source branch (the noise conv
// on the source STFT, then an AdaINResBlock1), its upsampler and its
// AdaINResBlock1s (one per resblock kernel size).
struct GeneratorStage {
    Conv1d noise_conv;
    AdainResBlock1 noise_res;
    ConvTranspose1d up;
    std::vector<AdainResBlock1> resblocks;
};

// iSTFTNet generator: the harmonic-plus-noise source and its STFT, the
// upsampling stages, then conv_post and the inverse STFT.
class Generator {
public:
    Generator(const ModelConfig& cfg, const DeviceWeights& weights);
    // The harmonic source and its STFT: f0 [2F] -> har [n_fft + 2,
    // generator_spec_frames()] (a buffer of ctx's workspace). `seed` is a
    // device word, read only when !deterministic.
    const float* source(const Context& ctx, const float* f0, int F, bool deterministic,
                        const uint64_t* seed) const;
    // x [upsample_initial_channel, 2F] and the source har -> audio
    // [source_upsampling() * 2F], scheduled by `schedule`. ctx has waited
    // for all of its streams' work on return.
    void operator()(const Context& ctx, const GeneratorSchedule& schedule, const float* x,
                    const float* har, int F, float* audio) const;

private:
    // Source branch of stage i into the workspace slot kGeneratorSource i.
    float* source_branch(const Context& ctx, const float* har, int i, int F) const;
    ModelConfig cfg_;
    const float *source_linear_w_, *source_linear_b_;
    std::vector<GeneratorStage> stages_;
    Conv1d conv_post_;
    ops::Stft stft_;
};

// ---------------------------------------------------------------- model.cu
// The whole model, built once from the weights; immutable, so every lane
// may run it.
struct Model {
    Model(const ModelConfig& cfg, const DeviceWeights& weights);
    Albert albert;
    TextEncoder text_encoder;
    Linear bert_encoder;  // ALBERT's hidden -> the prosody's hidden size
    ProsodyPredictor predictor;
    Decoder decoder;
    Generator generator;
};

}  // namespace kokoro
