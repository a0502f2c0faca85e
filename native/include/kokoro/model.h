// The Kokoro-82M model parts of the native engine, composed from the ops of
// ops.h through a Context (context.h). They mirror the official modules
// (kokoro/modules.py, istftnet.py) and the CPU backend's kokoro_gpu/model:
// albert.cu, prosody.cu, text_encoder.cu, decoder.cu (also the shared
// AdainResBlk1d), generator.cu; native/engine/lane.cu runs them in order
// and chooses their streams.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kokoro/context.h"
#include "kokoro/ops.h"

namespace kokoro {

// ------------------------------------------------------------- albert.cu
// ALBERT last hidden state: ids [rows] -> out [rows, bert_hidden], every
// utterance of `tokens` on its own rows (attention within the utterance).
void albert_forward(const Context& ctx, const int32_t* ids, const UtteranceRows& tokens,
                    float* out);

// ------------------------------------------------------------ prosody.cu
// Duration encoder: d_en_rows [rows, hidden] (time-major bert_encoder
// output) and each utterance's style (its prosody style s [style_dim] and
// style projections) -> d [rows, hidden + style_dim]; every utterance of
// `tokens` on its own rows.
void duration_encoder_forward(const Context& ctx, const UtteranceRows& tokens,
                              const std::vector<UtteranceStyle>& styles, const float* d_en_rows,
                              float* d);
// Duration head: d [rows, hidden + style] -> dur_lstm [rows, hidden] and
// duration logits [rows, max_dur].
void duration_head_forward(const Context& ctx, const UtteranceRows& tokens, const float* d,
                           float* dur_lstm, float* logits);
// F0Ntrain's shared LSTM: en_rows [rows, hidden + style] (time-major, the
// aligned frames) -> shared_rows [rows, hidden]; every utterance of `frames`
// (one, or a batch's group stacked) on its own rows.
void shared_lstm_forward(const Context& ctx, const UtteranceRows& frames, const float* en_rows,
                         float* shared_rows);
// F0Ntrain's stacks: shared_rows [F, hidden] (the shared LSTM's output) ->
// f0 [2F], n [2F]. The F0 stack runs on `ctx`, the N stack concurrently on
// `n_ctx`, their blocks' shortcuts on `f0_shortcuts` and `n_shortcuts`
// (adain_res_blk1d); `ctx` has waited for all of them on return.
void f0n_forward(const Context& ctx, const Context& n_ctx, const Context& f0_shortcuts,
                 const Context& n_shortcuts, const float* shared_rows, int F, float* f0, float* n);

// ------------------------------------------------------- text_encoder.cu
// Text encoder: ids [rows] -> t_en, utterance u's [hidden, T_u] at hidden x
// its first row (back to back, each channels-first).
void text_encoder_forward(const Context& ctx, const int32_t* ids, const UtteranceRows& tokens,
                          float* t_en);

// ------------------------------------------------------------ decoder.cu
// AdainResBlk1d `prefix`: x [c_in, T] -> out [c_out, T or 2T] (out may not
// be x); style from `prefix.norm{1,2}.fc`. The shortcut (upsampling, 1x1
// conv) runs on `shortcut_ctx`, concurrently with the residual path on ctx
// (shortcut_ctx may be ctx itself); ctx has waited for it on return.
void adain_res_blk1d(const Context& ctx, const Context& shortcut_ctx, const std::string& prefix,
                     const float* x, int c_in, int c_out, int T, bool upsample, float* out);
// Decoder up to the generator: t_en [hidden, T], frame_token [F], f0/n [2F]
// -> out [upsample_initial_channel, 2F]; the blocks' shortcuts and asr_res
// on `shortcut_ctx` (ctx has waited for it on return).
void decoder_forward(const Context& ctx, const Context& shortcut_ctx, const float* t_en,
                     const int32_t* frame_token, int T, int F, const float* f0, const float* n,
                     float* out);

// ---------------------------------------------------------- generator.cu
// The generator's harmonic source and its STFT: f0 [2F] -> har [n_fft + 2,
// generator_spec_frames()] (a buffer of ctx's workspace). `seed` is a device
// word, read only when !deterministic.
const float* generator_source(const Context& ctx, ops::Stft& stft, const float* f0, int F,
                              bool deterministic, const uint64_t* seed);
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
// iSTFTNet generator: x [upsample_initial_channel, 2F] and the source har
// -> audio [source_upsampling() * 2F], scheduled by `schedule`. ctx has
// waited for all of its streams' work on return.
void generator_forward(const Context& ctx, const GeneratorSchedule& schedule, ops::Stft& stft,
                       const float* x, const float* har, int F, float* audio);

}  // namespace kokoro
