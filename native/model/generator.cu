// iSTFTNet generator (kokoro/istftnet.py Generator): the harmonic-plus-noise
// source and its STFT (Generator::source), then per upsampling stage:
// LeakyReLU 0.1, the source branch (noise conv + AdaINResBlock1), the
// transposed-conv upsampler (plus a reflection pad (1, 0) on the last
// stage), their sum, and the mean of the stage's AdaINResBlock1s; finally
// LeakyReLU 0.01, conv_post, and the spectral head + inverse STFT.
// The source and every stage's source branch depend on F0 alone, not on the
// decoder: they run on a second context's stream (the engine's side
// stream), concurrently with the decoder and the earlier stages' main path,
// which waits for a stage's branch just before its upsampler, whose
// tensor-core pass adds the branch as its residual (fp32 runs its last
// branch on the main path: the lane's GeneratorSchedule). The LeakyReLUs ride on
// the half rows of the convs after them. Stage buffers come from the
// workspace, each slot reused for everything whose lifetime does not
// overlap; the branch outputs are one slot per stage, and the largest
// stage, [128, 120 F], sets the generator's memory.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kokoro/model.h"

namespace kokoro {

namespace {
constexpr int kHarmonics = 9;  // fundamental + harmonic_num 8
constexpr int kSampleRate = 24000;
constexpr float kSineAmp = 0.1f;
constexpr float kNoiseStd = 0.003f;
constexpr float kVoicedThreshold = 10.f;
constexpr float kStageSlope = 0.1f;
constexpr float kPostSlope = 0.01f;  // F.leaky_relu's default, not the stages' 0.1
constexpr int kNoiseResKernel = 7;
constexpr int kLastNoiseResKernel = 11;
constexpr int kPostKernel = 7;
const std::string kGenerator = "decoder.generator";

// An AdaINResBlock1's run on ctx's stream: out = block(x) on [C, T]; out
// may equal x. Its six convs, which step(s) enqueues one at a time (s even:
// layer s / 2's first conv, odd: its second, the first to write out), so
// that concurrent blocks can be enqueued in step order. Each conv hands its
// output's statistics to the AdaIN after it (two slots: the hidden's
// partials are read before the next hidden's are written, and likewise the
// block output's); x_stats: x's, where its producer wrote them. In precision
// "fast" the hidden (the first conv's output, which only the AdaIN after it
// reads) is FP16: half its traffic and memory, its rounding relative to the
// values, which leave out the conv's bias (that AdaIN removes it with the
// channel's mean; AdainConv). So is the block's running sum between its
// layers (`stream`: read by the next layer's AdaIN and as its residual),
// bias included, and the output of a stage's block (Generator::operator();
// a source branch's stays fp32, the upsampler's residual). Their AdaINs run
// inside the next conv where its kernel takes a raw input (the last stage's
// convs: AdainConv), without a pass of their own.
class ResblockRun {
public:
    ResblockRun(const Context& ctx, const AdainResBlock1& block, ops::ConstFloatOrHalf x,
                ops::FloatOrHalf out, int T, ops::ChannelPartials x_stats)
        : ctx_(ctx),
          layers_(block.layers()),
          out_(out),
          T_(T),
          hidden_(ctx.fast ? ops::FloatOrHalf(ctx.halves(
                                 Slot::kResblockHidden,
                                 ops::half_channels_values(block.channels(), T)))
                           : ops::FloatOrHalf(ctx.floats(Slot::kResblockHidden,
                                                         int64_t(block.channels()) * T))),
          stream_(ctx.fast ? ctx.halves(Slot::kResblockStream,
                                        ops::half_channels_values(block.channels(), T))
                           : nullptr),
          in_(x),
          in_stats_(x_stats) {}
    int steps() const { return 2 * static_cast<int>(layers_.size()); }
    const Context& ctx() const { return ctx_; }
    void step(int s) {
        const size_t j = size_t(s / 2);
        const AdainResBlock1::Layer& layer = layers_[j];
        if (s % 2 == 0) {
            hidden_stats_ = layer.first(ctx_, in_, hidden_, T_, nullptr, in_stats_,
                                        Slot::kStatsResblockHidden);
            return;
        }
        const bool last = j + 1 == layers_.size();
        const ops::FloatOrHalf y = last || stream_ == nullptr ? out_ : ops::FloatOrHalf(stream_);
        in_stats_ = layer.second(ctx_, hidden_, y, T_, in_, hidden_stats_,
                                 last ? Slot::kNone : Slot::kStatsResblockOut);
        in_ = y;
    }

private:
    Context ctx_;
    const std::vector<AdainResBlock1::Layer>& layers_;
    ops::FloatOrHalf out_;
    int T_;
    ops::FloatOrHalf hidden_;
    __half* stream_;  // null: fp32 between the layers too
    ops::ConstFloatOrHalf in_;
    ops::ChannelPartials in_stats_, hidden_stats_{};
};

void run_resblock(const Context& ctx, const AdainResBlock1& block, const float* x, float* out,
                  int T, ops::ChannelPartials x_stats) {
    ResblockRun run(ctx, block, x, out, T, x_stats);
    for (int s = 0; s < run.steps(); ++s) run.step(s);
}

void check_length(const std::string& what, int got, int want) {
    if (got != want) {
        throw std::logic_error(std::string("generator: ") + what + " has " + std::to_string(got) +
                               " frames, expected " + std::to_string(want));
    }
}
}  // namespace

int generator_spec_frames(const ModelConfig& cfg, int F) {
    return 2 * F * cfg.source_upsampling() / cfg.hop + 1;
}

namespace {
// The shape of upsampling stage i: channels in and out, time steps in and out.
struct Stage {
    int c_in, c_out, t_in, t_up, t_out;
};

Stage stage_shape(const ModelConfig& cfg, int i, int F) {
    Stage s{cfg.upsample_initial_channel, cfg.upsample_initial_channel / 2, 2 * F, 0, 0};
    for (int j = 0;; ++j) {
        const int kernel = cfg.upsample_kernel_sizes[j];
        const int rate = cfg.upsample_rates[j];
        s.t_up = ops::conv_transpose1d_out_len(s.t_in, kernel, rate, (kernel - rate) / 2, 0);
        s.t_out = j + 1 == static_cast<int>(cfg.upsample_rates.size()) ? s.t_up + 1 : s.t_up;
        if (j == i) return s;
        s = {s.c_out, s.c_out / 2, s.t_out, 0, 0};
    }
}

// Stage i's noise conv on the source STFT: a kernel of two strides, the
// stride that of the stages after it; the last stage's pointwise.
struct NoiseConv {
    int kernel, stride, pad;
};

NoiseConv noise_conv(const ModelConfig& cfg, int i) {
    if (size_t(i) + 1 == cfg.upsample_rates.size()) return {1, 1, 0};
    int stride = 1;
    for (size_t j = size_t(i) + 1; j < cfg.upsample_rates.size(); ++j) {
        stride *= cfg.upsample_rates[j];
    }
    return {2 * stride, stride, (stride + 1) / 2};
}

// Stage i's output channels (stage_shape's c_out).
int stage_channels(const ModelConfig& cfg, int i) {
    int c = cfg.upsample_initial_channel / 2;
    for (int j = 0; j < i; ++j) c /= 2;
    return c;
}
}  // namespace

StridedConvs generator_strided_convs(const ModelConfig& cfg) {
    StridedConvs convs;
    for (size_t i = 0; i < cfg.upsample_rates.size(); ++i) {
        const NoiseConv c = noise_conv(cfg, int(i));
        if (c.stride > 1) {
            convs["decoder.generator.noise_convs." + std::to_string(i) + ".weight"] = {c.stride,
                                                                                      c.pad};
        }
    }
    return convs;
}

std::vector<int64_t> generator_stage_values(const ModelConfig& cfg, int F) {
    std::vector<int64_t> values;
    for (size_t i = 0; i < cfg.upsample_rates.size(); ++i) {
        const Stage s = stage_shape(cfg, int(i), F);
        values.push_back(int64_t(s.c_out) * s.t_out);
    }
    return values;
}

const float* Generator::source(const Context& ctx, const float* f0, int F, bool deterministic,
                               const uint64_t* seed) const {
    const ModelConfig& cfg = cfg_;
    const int f0_len = 2 * F;
    const int samples = f0_len * cfg.source_upsampling();
    float* har_source = ctx.floats(Slot::kGeneratorHarSource, samples);
    double* source_scratch = ctx.ws.doubles(
        Slot::kGeneratorSourceScratch,
        ops::harmonic_source_scratch_doubles(f0_len, cfg.source_upsampling(), kHarmonics));
    ops::harmonic_source(f0, f0_len, cfg.source_upsampling(), kHarmonics, kSampleRate, kSineAmp,
                         kNoiseStd, kVoicedThreshold,
                         source_linear_w_, source_linear_b_, deterministic, seed, har_source,
                         source_scratch, ctx.stream);
    ctx.record("har_source", har_source, {samples});
    const int spec_rows = cfg.n_fft + 2;
    const int spec_frames = generator_spec_frames(cfg, F);
    check_length("source STFT", stft_.frames(samples), spec_frames);
    float* har = ctx.floats(Slot::kGeneratorHar, int64_t(spec_rows) * spec_frames);
    stft_.forward(har_source, samples, har, ctx.stream);
    ctx.record("har", har, {spec_rows, spec_frames});
    return har;
}

// Source branch of stage i: the source STFT `har` brought to the stage's
// frame rate (noise conv) and through the stage's noise AdaINResBlock1,
// into the workspace slot "generator.source.<i>", which the stage's main
// path then reads (and builds its input in).
float* Generator::source_branch(const Context& ctx, const float* har, int i, int F) const {
    const ModelConfig& cfg = cfg_;
    const std::string idx = std::to_string(i);
    const Stage s = stage_shape(cfg, i, F);
    const int spec_frames = generator_spec_frames(cfg, F);
    float* source = ctx.ws.floats({Slot::kGeneratorSource, i}, int64_t(s.c_out) * s.t_out);
    const NoiseConv noise = noise_conv(cfg, i);
    check_length("noise_convs." + idx,
                 ops::conv1d_out_len(spec_frames, noise.kernel, noise.stride, noise.pad, 1),
                 s.t_out);
    const GeneratorStage& stage = stages_[size_t(i)];
    const ops::ChannelPartials source_stats =
        stage.noise_conv(ctx, har, source, spec_frames, nullptr, 1.f, Slot::kStatsNoiseConv);
    run_resblock(ctx, stage.noise_res, source, source, s.t_out, source_stats);
    ctx.mark("source branch " + idx + (ctx.tag[0] != '\0' ? " (side stream)" : ""));
    return source;
}

AdainResBlock1::AdainResBlock1(const DeviceWeights& weights, const std::string& prefix, int C,
                               int kernel, const std::vector<int>& dilations)
    : channels_(C) {
    for (size_t j = 0; j < dilations.size(); ++j) {
        const std::string idx = std::to_string(j);
        auto snake = [&](const char* adain, const char* alpha) {
            return AdainAct{prefix + adain + idx + ".fc", ops::Activation::kSnake, 0.f,
                            prefix + alpha + idx};
        };
        layers_.push_back(
            {AdainConv(weights, snake(".adain1.", ".alpha1."),
                       SameConv{prefix + ".convs1." + idx, C, C, kernel, dilations[j]}),
             AdainConv(weights, snake(".adain2.", ".alpha2."),
                       SameConv{prefix + ".convs2." + idx, C, C, kernel, 1})});
    }
}

Generator::Generator(const ModelConfig& cfg, const DeviceWeights& weights)
    : cfg_(cfg),
      source_linear_w_(weights.get(kGenerator + ".m_source.l_linear.weight", kHarmonics)),
      source_linear_b_(weights.get(kGenerator + ".m_source.l_linear.bias", 1)),
      conv_post_(weights, kGenerator + ".conv_post",
                 ConvShape{stage_channels(cfg, int(cfg.upsample_rates.size()) - 1),
                           cfg.n_fft + 2, kPostKernel}
                     .with_pad((kPostKernel - 1) / 2)),
      stft_(cfg.n_fft, cfg.hop) {
    const int n_stages = static_cast<int>(cfg.upsample_rates.size());
    const int n_kernels = static_cast<int>(cfg.resblock_kernel_sizes.size());
    for (int i = 0; i < n_stages; ++i) {
        const std::string idx = std::to_string(i);
        const bool last = i + 1 == n_stages;
        const int c_in = i == 0 ? cfg.upsample_initial_channel : stage_channels(cfg, i - 1);
        const int c_out = stage_channels(cfg, i);
        const NoiseConv noise = noise_conv(cfg, i);
        const int rate = cfg.upsample_rates[size_t(i)];
        const int kernel = cfg.upsample_kernel_sizes[size_t(i)];
        std::vector<AdainResBlock1> resblocks;
        for (int j = 0; j < n_kernels; ++j) {
            resblocks.emplace_back(weights,
                                   kGenerator + ".resblocks." + std::to_string(i * n_kernels + j),
                                   c_out, cfg.resblock_kernel_sizes[size_t(j)],
                                   cfg.resblock_dilation_sizes[size_t(j)]);
        }
        stages_.push_back(
            {Conv1d(weights, kGenerator + ".noise_convs." + idx,
                    ConvShape{cfg.n_fft + 2, c_out, noise.kernel}
                        .with_stride(noise.stride)
                        .with_pad(noise.pad)),
             AdainResBlock1(weights, kGenerator + ".noise_res." + idx, c_out,
                            last ? kLastNoiseResKernel : kNoiseResKernel,
                            cfg.resblock_dilation_sizes[0]),
             ConvTranspose1d(weights, kGenerator + ".ups." + idx,
                             ConvShape{c_in, c_out, kernel}.with_stride(rate).with_pad(
                                 (kernel - rate) / 2)),
             std::move(resblocks)});
    }
}

void Generator::operator()(const Context& ctx, const GeneratorSchedule& schedule, const float* x,
                           const float* har, int F, float* audio) const {
    const Context& side = schedule.side;
    const ModelConfig& cfg = cfg_;
    const int spec_rows = cfg.n_fft + 2;
    const int spec_frames = generator_spec_frames(cfg, F);

    const int n_stages = static_cast<int>(cfg.upsample_rates.size());
    const int n_kernels = static_cast<int>(cfg.resblock_kernel_sizes.size());
    auto on_side = [&](int i) { return schedule.branch_on_side[size_t(i)]; };
    float* side_source = source_branch(side, har, 0, F);
    ops::ScaledSum stage_x = x;
    Stage s{};
    for (int i = 0; i < n_stages; ++i) {
        const bool last = i + 1 == n_stages;
        const std::string idx = std::to_string(i);
        s = stage_shape(cfg, i, F);
        const int rate = cfg.upsample_rates[i];
        const int kernel = cfg.upsample_kernel_sizes[i];
        const int64_t n = int64_t(s.c_out) * s.t_out;

        // har and this stage's branch are done (on the side stream or here);
        // the next stage's branch then overlaps this stage.
        ctx.wait_for(side);
        float* source = on_side(i) ? side_source : source_branch(ctx, har, i, F);
        if (!last && on_side(i + 1)) side_source = source_branch(side, har, i + 1, F);
        // The stage input: the source plus the upsampled LeakyReLU 0.1 of
        // stage_x (x, then the previous stage's mean), reflection padded (1,
        // 0) on the last stage; one tensor-core pass, which also hands the
        // input's statistics to the residual blocks' first AdaINs. Built in
        // place in the branch's buffer; in precision "fast", where the pass
        // gives statistics (its reduction not split over blocks: an FP16
        // input's AdaIN needs them), as FP16 channels of its own (rounded
        // weights), which the blocks' first convs read raw at the last stage.
        const int reflect = s.t_out - s.t_up, pad = (kernel - rate) / 2;
        const GeneratorStage& stage = stages_[size_t(i)];
        const bool half_in =
            ctx.fast && ops::conv_transpose1d_half_rows_stats_parts(
                            s.c_in, s.c_out, s.t_in, kernel, rate, pad, reflect,
                            stage.up.plan_form()) > 0;
        const ops::FloatOrHalf stage_in =
            half_in ? ops::FloatOrHalf(ctx.halves(Slot::kGeneratorStageIn,
                                                  ops::half_channels_values(s.c_out, s.t_out)))
                    : ops::FloatOrHalf(source);
        const ops::ChannelPartials in_stats = stage.up(ctx, stage_x, stage_in, s.t_in,
                                                       kStageSlope, reflect, source,
                                                       Slot::kStatsStageIn);
        // stage_x is consumed: the blocks' outputs may take its buffers.
        // Mean of the stage's residual blocks, ((out0 + out1) + out2) / 3 in
        // block order either way (the same bits sequential or concurrent),
        // formed by its reader (the next upsampler's or conv_post's half
        // rows, up to three terms). In precision "fast" each block writes an
        // FP16 output of its own; in fp32 the blocks write `mean`, `branch`
        // and, the last block, stage_in (in the source's buffer) itself once
        // no other block reads it (any middle block but the last two added
        // into `mean`).
        if (ctx.fast && n_kernels > 3) {
            throw std::logic_error("generator: the stage mean takes at most three FP16 terms");
        }
        const bool concurrent = schedule.concurrent_blocks[size_t(i)];
        std::vector<ops::FloatOrHalf> outs;
        for (int j = 0; j < n_kernels; ++j) {
            if (ctx.fast) {
                outs.emplace_back(ctx.halves(Slot::kGeneratorBlockOut,
                                             ops::half_channels_values(s.c_out, s.t_out), j));
            } else {
                outs.emplace_back(j == 0               ? ctx.floats(Slot::kGeneratorMean, n)
                                  : j + 1 == n_kernels ? source
                                                       : ctx.floats(Slot::kGeneratorBranch, n));
            }
        }
        std::vector<ResblockRun> blocks;
        blocks.reserve(size_t(n_kernels));
        for (int j = 0; j < n_kernels; ++j) {
            const Context& block_ctx = schedule.block_contexts[size_t(i)][size_t(j)];
            if (concurrent && j > 0) block_ctx.wait_for(ctx);  // stage_in
            blocks.emplace_back(block_ctx.with_conv_streams(concurrent ? n_kernels : 1),
                                stage.resblocks[size_t(j)], stage_in, outs[size_t(j)], s.t_out,
                                in_stats);
        }
        if (concurrent) {  // in step order across the blocks
            int steps = 0;
            for (const ResblockRun& b : blocks) steps = std::max(steps, b.steps());
            for (int step = 0; step < steps; ++step) {
                for (ResblockRun& b : blocks) {
                    if (step < b.steps()) b.step(step);
                }
            }
            for (int j = 1; j < n_kernels; ++j) ctx.wait_for(blocks[size_t(j)].ctx());
        } else {
            for (int j = 0; j < n_kernels; ++j) {
                ResblockRun& b = blocks[size_t(j)];
                for (int step = 0; step < b.steps(); ++step) b.step(step);
                if (!ctx.fast && j > 0 && j + 2 < n_kernels) {
                    ops::add_scaled(outs[0].f32, outs[size_t(j)].f32, outs[0].f32, n, 1.f,
                                    ctx.stream);
                }
            }
        }
        static_assert(kResblockStreams == 2, "concurrent blocks: three at most");
        const float scale = 1.f / static_cast<float>(n_kernels);
        // The reader's terms, in block order (fp32: mean, then the last two).
        auto term = [&](int j) {
            return j < n_kernels ? outs[size_t(j)] : ops::FloatOrHalf(nullptr);
        };
        if (ctx.fast) {
            stage_x = ops::ScaledSum(term(0).f16, term(1).f16, scale, term(2).f16);
        } else {
            const int second = std::max(1, n_kernels - 2);
            stage_x = ops::ScaledSum(term(0).f32, term(second).f32, scale,
                                     n_kernels > 2 ? term(second + 1).f32 : nullptr);
        }
        ctx.mark("generator stage " + idx);
    }

    check_length("conv_post input", s.t_out, spec_frames);
    float* logits = ctx.floats(Slot::kGeneratorLogits, int64_t(spec_rows) * s.t_out);
    conv_post_(ctx, stage_x, logits, s.t_out, nullptr, kPostSlope);
    ctx.record("gen_post", logits, {spec_rows, s.t_out});
    stft_.inverse_from_logits(logits, s.t_out, audio, ctx.stream);
}

}  // namespace kokoro
