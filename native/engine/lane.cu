// The lane's phases: the token phase, the durations' read-back, the frame
// phase, and a batch group's stacked token phase and frame prefix; the
// scheduling of the model parts on the lane's streams.
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kokoro/launch.cuh"
#include "kokoro/lane.h"

namespace kokoro {

namespace {

// The duration head's sum of sigmoids / speed, for the trace only: the
// logits are copied out and reduced on the host.
Trace::Array durations_before_rounding(const float* logits, int T, int max_dur, float speed,
                                       cudaStream_t stream) {
    std::vector<float> host(size_t(T) * max_dur);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(host.data(), logits, sizeof(float) * host.size(),
                                      cudaMemcpyDeviceToHost, stream));
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream));
    Trace::Array out{{T}, std::vector<float>(T)};
    for (int t = 0; t < T; ++t) {
        float sum = 0.f;
        for (int j = 0; j < max_dur; ++j)
            sum += 1.f / (1.f + std::exp(-host[size_t(t) * max_dur + j]));
        out.values[t] = sum / speed;
    }
    return out;
}

// The one mid-pass read-back: each utterance of `tokens` (utterances[u],
// rows from tokens.offset(u)) its durations from its logits and speed,
// rounded on the device into dur (uncaptured: the frame graphs read them
// there), then all of them to the host, which they size the frame axes for.
std::vector<int32_t> read_back_durations(const float* logits, const UtteranceRows& tokens,
                                         const Utterance* utterances, int max_dur, int32_t* dur,
                                         cudaStream_t stream) {
    for (int u = 0; u < tokens.count(); ++u) {
        const int64_t row = tokens.offset(u);
        ops::durations_from_logits(logits + row * max_dur, tokens.length(u), max_dur,
                                   utterances[u].speed, dur + row, stream);
    }
    std::vector<int32_t> host(size_t(tokens.rows()));
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(host.data(), dur, sizeof(int32_t) * host.size(),
                                      cudaMemcpyDeviceToHost, stream));
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream));
    return host;
}

// The longest utterance the engine makes: kokoro_gpu.config.MAX_FRAMES
// (10 minutes of audio), the CPU backend's bound, which stops a slow speed
// or a broken duration head from asking for gigabytes; far below the int
// indexing limit of the source's samples.
constexpr int64_t kMaxFrames = 24000;
constexpr int kFramesPerSecond = 40;

// The frames that an utterance's durations give, at most kMaxFrames (and
// never more than int indexes the source's samples by).
int frame_count(const std::vector<int32_t>& durations, const ModelConfig& cfg) {
    int64_t frames = 0;
    for (const int32_t f : durations) frames += f;
    const int64_t limit =
        std::min<int64_t>(kMaxFrames, INT_MAX / (2 * int64_t(cfg.source_upsampling())));
    if (frames > limit) {
        throw InvalidInput("the predicted duration (" + std::to_string(frames) +
                           " frames) is over " + std::to_string(limit) + " frames (" +
                           std::to_string(limit / kFramesPerSecond) +
                           " s) per chunk; raise the speed or shorten the text");
    }
    return int(frames);
}

// In precision "fast" a stage's residual blocks run concurrently, one per
// stream, so that three independent chains fill each other's waves and
// tails, and overlap the k3 block's memory-bound convs with the k11
// block's compute-bound ones: the last stage at every length, earlier
// stages of at most kConcurrentResblockValues values ([C, T]; stage 0 up
// to ~490 frames). Larger earlier stages share the GPU with the next
// stage's source branch, which fills their tails already (long's stage 0
// gained nothing), and their extra slots would grow the engine's memory.
// Each concurrent block costs a hidden and a half-rows slot of the stage's
// size; block 1 at the last stage takes the side stream's (its branches are
// done by then). fp32 stays sequential: its split half rows would take the
// long case past PyTorch's memory.
constexpr int64_t kConcurrentResblockValues = int64_t(256) * 9800;

}  // namespace

Lane::Lane(const ModelConfig& cfg, const DeviceWeights& weights, const Model& model,
           Precision precision, std::shared_ptr<PinnedPool> audio_pool)
    : cfg_(cfg),
      weights_(weights),
      precision_(precision),
      model_(model),
      audio_pool_(std::move(audio_pool)) {
    // The critical path first: every stream but the side stream gets the
    // device's highest priority, so that the block scheduler gives free SMs
    // to the decoder's and the stages' latency-bound kernels before the
    // source branches' wide convs, which are needed a stage later (replays
    // keep it: captured kernel nodes carry their stream's priority).
    int lowest = 0, highest = 0;
    KOKORO_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    for (int i = 0; i < kStreams; ++i) {
        cudaStream_t stream = nullptr;
        KOKORO_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking,
                                                       i == kSideStream ? lowest : highest));
        streams_[i].reset(stream);
        cudaEvent_t event = nullptr;
        KOKORO_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
        events_[i].reset(event);
        cublasHandle_t handle = nullptr;
        KOKORO_CUBLAS_CHECK(cublasCreate(&handle));
        blas_[i].reset(handle);
        // Default math (fp32 unless a call asks for TF32), no atomics, a
        // workspace of its own (no allocation inside a graph capture): the
        // same algorithms, hence the same bits, on every call.
        KOKORO_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
        KOKORO_CUBLAS_CHECK(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED));
        KOKORO_CUBLAS_CHECK(cublasSetStream(handle, stream));
        const size_t workspace =
            i <= kSideStream ? kBlasWorkspaceBytes : kResblockBlasWorkspaceBytes;
        blas_workspace_[i].reset(device_alloc(workspace, "the cuBLAS workspace"));
        KOKORO_CUBLAS_CHECK(cublasSetWorkspace(handle, blas_workspace_[i].get(), workspace));
    }
}

GeneratorSchedule Lane::generator_schedule(const Context& generator, const Context& side,
                                           const Context (&resblocks)[kResblockStreams],
                                           int F) const {
    GeneratorSchedule schedule{side, {}, {}, {}};
    const bool fast_generator = fast(ModelPart::kGenerator);
    const int n_kernels = static_cast<int>(cfg_.resblock_kernel_sizes.size());
    const std::vector<int64_t> values = generator_stage_values(cfg_, F);
    for (size_t i = 0; i < values.size(); ++i) {
        const bool last = i + 1 == values.size();
        // Stage i's source branch runs on the side stream, except in fp32 the
        // last stage's: its split half rows (hi + lo, as large as fp32) and
        // its hidden buffer there would add two of the largest slots ([128,
        // 120 F]), and the GPU is busy with the previous stage's convs by then
        // (little to overlap). Rounded half rows (fast) are half that size.
        schedule.branch_on_side.push_back(fast_generator || i == 0);
        const bool concurrent = fast_generator && n_kernels <= kResblockStreams + 1 &&
                                (last || values[i] <= kConcurrentResblockValues);
        schedule.concurrent_blocks.push_back(concurrent);
        // Block 0 on the generator's stream, the others on the residual-block
        // streams; at the last stage the source branches are done (the stage
        // waited for them): block 1 takes the side stream's slots there.
        std::vector<Context>& blocks = schedule.block_contexts.emplace_back();
        for (int j = 0; j < n_kernels; ++j) {
            blocks.push_back(!concurrent || j == 0 ? generator
                             : last && j == 1      ? resblocks[0].with_slots_of(side)
                                                   : resblocks[j - 1]);
        }
    }
    return schedule;
}

Lane::~Lane() {
    for (auto& stream : streams_) static_cast<void>(cudaStreamSynchronize(stream.get()));
}

Context Lane::context(int stream, bool fast, Trace* trace) {
    return Context{ws_,
                   blas_[stream].get(),
                   streams_[stream].get(),
                   events_[stream].get(),
                   {style_out_[0], style_out_[1]},
                   trace,
                   fast,
                   kStreamTags[stream],
                   stream,
                   timing_ ? &marks_ : nullptr};
}

void Lane::set_phase_timing(bool on) {
    for (auto& stream : streams_) KOKORO_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    timing_ = on;
    token_graphs_.clear();
    frame_graphs_.clear();
    prefix_graphs_.clear();
}

template <typename Body>
void Lane::run_phase(GraphCache& cache, GraphKey key, bool capture, Body&& body) {
    // A graph holds its launches' kinds and plans: whether the thread shares
    // the GPU is part of the key.
    key.push_back(gpu_shared());
    CachedGraph* entry = capture ? cache.find_or_note(key) : nullptr;
    if (entry == nullptr) {
        body();
        eager_runs_.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    cudaStream_t main = streams_[0].get();
    const bool fresh = !entry->exec || entry->generation != ws_.generation();
    (fresh ? captured_runs_ : replayed_runs_).fetch_add(1, std::memory_order_relaxed);
    if (fresh) {
        entry->exec.reset();
        const uint64_t generation = ws_.generation();
        KOKORO_CUDA_CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeRelaxed));
        cudaGraph_t graph = nullptr;
        try {
            body();
        } catch (...) {
            // Already failing: end the capture and report the first error.
            if (cudaStreamEndCapture(main, &graph) == cudaSuccess && graph != nullptr)
                static_cast<void>(cudaGraphDestroy(graph));
            throw;
        }
        KOKORO_CUDA_CHECK(cudaStreamEndCapture(main, &graph));
        const Owned<cudaGraph_t, GraphDeleter> owned(graph);
        cudaGraphExec_t exec = nullptr;
        KOKORO_CUDA_CHECK(
            cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority));
        entry->exec.reset(exec);
        entry->generation = generation;
    }
    KOKORO_CUDA_CHECK(cudaGraphLaunch(entry->exec.get(), main));
}

void Lane::take_style_slots() {
    for (int half = 0; half < 2; ++half) {
        const DeviceWeights::StyleBank& bank = weights_.style_bank(static_cast<StyleHalf>(half));
        style_out_[half] =
            ws_.floats(half ? Slot::kStylesProsody : Slot::kStylesDecoder, bank.rows);
    }
}

void Lane::token_pass(const Context& ctx, const Context& side, const int32_t* ids,
                      const float* ref_s, const UtteranceRows& tokens,
                      const std::vector<UtteranceStyle>& styles, const TokenOutputs& out) const {
    const int sd = cfg_.style_dim, hid = cfg_.hidden_dim, rows = tokens.rows();
    for (int u = 0; u < tokens.count(); ++u) {
        for (int half = 0; half < 2; ++half) {
            const DeviceWeights::StyleBank& bank =
                weights_.style_bank(static_cast<StyleHalf>(half));
            if (bank.rows > 0) {
                ops::linear(ctx.blas, ref_s + int64_t(u) * 2 * sd + half * sd, bank.weight,
                            bank.bias, styles[u].projections[half], 1, sd, bank.rows, ctx.stream);
            }
        }
    }
    model_.albert(ctx, ids, tokens, out.bert);
    ctx.mark("style projections, ALBERT");
    ctx.record("bert", out.bert, {rows, cfg_.bert_hidden});
    // The text encoder (needed by the frame phase) beside the duration
    // path, whose serial LSTMs leave most SMs free, rather than beside
    // ALBERT's GEMMs, which its LSTM's 32 SMs slowed.
    side.wait_for(ctx);
    model_.text_encoder(side, ids, tokens, out.t_en);
    side.mark("text encoder (side stream)");
    model_.bert_encoder(ctx.with_utterance_rows(tokens), out.bert, out.d_en_rows, rows);
    if (ctx.trace != nullptr) {
        float* d_en = ctx.floats(Slot::kTraceDEn, int64_t(hid) * rows);
        ops::transpose(out.d_en_rows, d_en, rows, hid, ctx.stream);
        ctx.record("d_en", d_en, {hid, rows});
    }
    model_.predictor.duration_encoder(ctx, tokens, styles, out.d_en_rows, out.d);
    ctx.mark("bert_encoder, duration encoder");
    ctx.record("d", out.d, {rows, hid + sd});
    model_.predictor.duration_head(ctx, tokens, out.d, out.dur_lstm, out.logits);
    ctx.mark("duration head");
    ctx.record("dur_lstm", out.dur_lstm, {rows, hid});
    ctx.wait_for(side);
}

void Lane::run_group(const Utterance* first, size_t n, const ResultSink& sink) {
    if (n == 1) {
        sink(0, run(first[0], nullptr));
        return;
    }
    cudaStream_t main = streams_[0].get();
    const int sd = cfg_.style_dim, hid = cfg_.hidden_dim, width = hid + sd;
    std::vector<int> lengths;
    std::vector<int32_t> ids;
    std::vector<float> ref_s;
    for (size_t i = 0; i < n; ++i) {
        lengths.push_back(first[i].T);
        ids.insert(ids.end(), first[i].ids, first[i].ids + first[i].T);
        ref_s.insert(ref_s.end(), first[i].ref_s, first[i].ref_s + 2 * sd);
    }
    const GraphKey key(lengths.begin(), lengths.end());
    const UtteranceRows tokens(std::move(lengths), ws_, main, split_shapes_);
    const int rows = tokens.rows();
    int32_t* ids_dev = ws_.ints(Slot::kGroupIds, rows);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(ids_dev, ids.data(), sizeof(int32_t) * rows,
                                      cudaMemcpyHostToDevice, main));
    float* style = ws_.floats(Slot::kGroupRefS, int64_t(n) * 2 * sd);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(style, ref_s.data(), sizeof(float) * ref_s.size(),
                                      cudaMemcpyHostToDevice, main));
    float* projections[2];
    int bank_rows[2];
    for (int half = 0; half < 2; ++half) {
        bank_rows[half] = weights_.style_bank(static_cast<StyleHalf>(half)).rows;
        projections[half] = ws_.floats(half ? Slot::kGroupStylesProsody : Slot::kGroupStylesDecoder,
                                       int64_t(n) * bank_rows[half]);
    }
    float* bert = ws_.floats(Slot::kGroupBert, int64_t(rows) * cfg_.bert_hidden);
    float* d_en_rows = ws_.floats(Slot::kGroupDEnRows, int64_t(rows) * hid);
    float* d = ws_.floats(Slot::kGroupD, int64_t(rows) * width);
    float* dur_lstm = ws_.floats(Slot::kGroupDurLstm, int64_t(rows) * hid);
    float* logits = ws_.floats(Slot::kGroupDurLogits, int64_t(rows) * cfg_.max_dur);
    float* t_en = ws_.floats(Slot::kGroupTEn, int64_t(hid) * rows);
    int32_t* dur = ws_.ints(Slot::kGroupDurations, rows);
    const Context ctx = context(0, fast(ModelPart::kTokenPath), nullptr);
    const Context side = context(kSideStream, fast(ModelPart::kTextEncoder), nullptr);

    // The token phase of the whole group: Lane::run's, stacked (a graph per
    // group of these lengths).
    std::vector<UtteranceStyle> styles(n);
    for (size_t i = 0; i < n; ++i) {
        styles[i].s = style + int64_t(i) * 2 * sd + sd;
        for (int half = 0; half < 2; ++half) {
            styles[i].projections[half] = projections[half] + int64_t(i) * bank_rows[half];
        }
    }
    run_phase(token_graphs_, key, true, [&] {
        token_pass(ctx, side, ids_dev, style, tokens, styles,
                   {bert, d_en_rows, d, dur_lstm, logits, t_en});
    });
    const std::vector<int32_t> dur_host =
        read_back_durations(logits, tokens, first, cfg_.max_dur, dur, main);

    // The group's frame prefix: each utterance's alignment, then the shared
    // LSTM on all of their frames at once (stacked, as the token phase's
    // LSTMs; a graph per group's lengths and frames).
    std::vector<std::vector<int32_t>> durations(n);
    std::vector<int> frame_lengths(n);
    GraphKey prefix_key = key;
    for (size_t i = 0; i < n; ++i) {
        const int64_t row = tokens.offset(int(i));
        durations[i].assign(dur_host.begin() + row, dur_host.begin() + row + tokens.length(int(i)));
        frame_lengths[i] = frame_count(durations[i], cfg_);
        prefix_key.push_back(frame_lengths[i]);
    }
    const UtteranceRows frame_rows(std::move(frame_lengths), ws_, main, frame_split_shapes_,
                                   RowsKind::kFrames);
    int32_t* frame_token = ws_.ints(Slot::kGroupFrameToken, frame_rows.rows());
    float* en_rows = ws_.floats(Slot::kGroupEnRows, int64_t(frame_rows.rows()) * width);
    float* shared_rows = ws_.floats(Slot::kGroupSharedRows, int64_t(frame_rows.rows()) * hid);
    run_phase(prefix_graphs_, prefix_key, true, [&] {
        for (size_t i = 0; i < n; ++i) {
            const int64_t row = tokens.offset(int(i)), frame = frame_rows.offset(int(i));
            ops::frame_token_index(dur + row, tokens.length(int(i)), frame_token + frame, main);
            ops::expand_frame_rows(d + row * width, frame_token + frame, en_rows + frame * width,
                                   width, frame_rows.length(int(i)), main);
        }
        model_.predictor.shared_lstm(ctx, frame_rows, en_rows, shared_rows);
    });

    // Each utterance's frame phase, from its token and prefix outputs moved
    // into the slots that the frame graphs read. They are enqueued back to
    // back: the host enqueues an utterance's launches (or graph) while the
    // GPU runs the previous one's, which a first-seen shape (uncaptured)
    // needs to keep the GPU busy. Everything is ordered on the main stream,
    // which each frame phase's other streams join; an event after each one
    // tells when its audio has landed, so the host hands results on while
    // the GPU runs the rest (a group's short chunks do not wait for its long
    // ones). A slot that grows retires its old buffer until the last one.
    take_style_slots();
    while (landed_.size() < n) {
        cudaEvent_t event = nullptr;
        KOKORO_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
        landed_.emplace_back(event);
    }
    std::vector<ForwardResult> results(n);
    auto move = [&](void* to, const void* from, size_t bytes) {
        KOKORO_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, main));
    };
    try {
        for (size_t i = 0; i < n; ++i) {
            const int T = tokens.length(int(i)), F = frame_rows.length(int(i));
            const int64_t row = tokens.offset(int(i)), frame = frame_rows.offset(int(i));
            for (int half = 0; half < 2; ++half) {
                move(style_out_[half], styles[i].projections[half],
                     sizeof(float) * bank_rows[half]);
            }
            move(ws_.floats(Slot::kTEn, int64_t(hid) * T), t_en + row * hid,
                 sizeof(float) * T * hid);
            move(ws_.ints(Slot::kFrameToken, F), frame_token + frame, sizeof(int32_t) * F);
            move(ws_.floats(Slot::kSharedRows, int64_t(F) * hid), shared_rows + frame * hid,
                 sizeof(float) * F * hid);
            results[i] = frames(first[i], std::move(durations[i]), nullptr, true, false);
            KOKORO_CUDA_CHECK(cudaEventRecord(landed_[i].get(), main));
        }
        for (size_t i = 0; i < n; ++i) {
            KOKORO_CUDA_CHECK(cudaEventSynchronize(landed_[i].get()));
            sink(i, std::move(results[i]));
        }
    } catch (...) {
        // Queued copies still land in results' blocks: let them finish first.
        static_cast<void>(cudaStreamSynchronize(main));
        throw;
    }
    KOKORO_CUDA_CHECK(cudaStreamSynchronize(main));
    ws_.release_retired();
}

ForwardResult Lane::run(const Utterance& u, Trace* trace) {
    const int T = u.T;
    const int sd = cfg_.style_dim;
    const int hid = cfg_.hidden_dim;
    const int width = hid + sd;
    cudaStream_t main = streams_[0].get();
    const bool capture = trace == nullptr;

    // Inputs (ids as int32, the style vector) and every buffer the two
    // phases share, taken before any graph is looked up.
    std::vector<int32_t> ids32(u.ids, u.ids + T);
    int32_t* ids_dev = ws_.ints(Slot::kInputIds, T);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(ids_dev, ids32.data(), sizeof(int32_t) * T,
                                      cudaMemcpyHostToDevice, main));
    float* style = ws_.floats(Slot::kInputRefS, 2 * sd);
    KOKORO_CUDA_CHECK(
        cudaMemcpyAsync(style, u.ref_s, sizeof(float) * 2 * sd, cudaMemcpyHostToDevice, main));
    take_style_slots();
    float* bert = ws_.floats(Slot::kBert, int64_t(T) * cfg_.bert_hidden);
    float* d_en_rows = ws_.floats(Slot::kDEnRows, int64_t(T) * hid);
    float* d = ws_.floats(Slot::kD, int64_t(T) * width);
    float* dur_lstm = ws_.floats(Slot::kDurLstm, int64_t(T) * hid);
    float* logits = ws_.floats(Slot::kDurLogits, int64_t(T) * cfg_.max_dur);
    float* t_en = ws_.floats(Slot::kTEn, int64_t(hid) * T);
    int32_t* dur = ws_.ints(Slot::kDurations, T);
    const Context ctx = context(0, fast(ModelPart::kTokenPath), trace);
    const Context side = context(kSideStream, fast(ModelPart::kTextEncoder), trace);
    ctx.mark("start");

    // Token side: styles, ALBERT, then text encoder || bert_encoder, duration
    // encoder and head.
    const UtteranceRows tokens(T);
    const std::vector<UtteranceStyle> styles{{style + sd, {style_out_[0], style_out_[1]}}};
    run_phase(token_graphs_, {T}, capture, [&] {
        token_pass(ctx, side, ids_dev, style, tokens, styles,
                   {bert, d_en_rows, d, dur_lstm, logits, t_en});
    });

    std::vector<int32_t> dur_host = read_back_durations(logits, tokens, &u, cfg_.max_dur, dur, main);
    if (trace != nullptr) {
        trace->floats["dur_float"] = durations_before_rounding(logits, T, cfg_.max_dur, u.speed, main);
    }
    return frames(u, std::move(dur_host), trace);
}

ForwardResult Lane::frames(const Utterance& u, std::vector<int32_t> durations, Trace* trace,
                           bool aligned, bool wait) {
    const int T = u.T;
    const int hid = cfg_.hidden_dim;
    const int width = hid + cfg_.style_dim;
    cudaStream_t main = streams_[0].get();
    const bool capture = trace == nullptr;
    // (aligned: the alignment is made, from the group's d and durations)
    const float* d = aligned ? nullptr : ws_.floats(Slot::kD, int64_t(T) * width);
    const float* t_en = ws_.floats(Slot::kTEn, int64_t(hid) * T);
    const int32_t* dur = aligned ? nullptr : ws_.ints(Slot::kDurations, T);
    uint64_t* seed = ws_.words(Slot::kInputSeed, 1);
    KOKORO_CUDA_CHECK(
        cudaMemcpyAsync(seed, &u.seed, sizeof(uint64_t), cudaMemcpyHostToDevice, main));
    const Context ctx = context(0, fast(ModelPart::kProsodyStacks), trace);
    const Context side = context(kSideStream, fast(ModelPart::kGenerator), trace);
    ForwardResult result;
    const int F = frame_count(durations, cfg_);
    result.durations.assign(durations.begin(), durations.end());
    if (trace != nullptr) trace->ints["pred_dur"] = result.durations;
    ctx.mark("durations read back");

    // Frame side: alignment, shared LSTM (unless aligned), F0 || N, source +
    // STFT + source branches || decoder, generator.
    int32_t* frame_token = ws_.ints(Slot::kFrameToken, F);
    float* en_rows = aligned ? nullptr : ws_.floats(Slot::kEnRows, int64_t(F) * width);
    float* shared_rows = ws_.floats(Slot::kSharedRows, int64_t(F) * hid);
    float* f0 = ws_.floats(Slot::kF0, 2 * int64_t(F));
    float* n = ws_.floats(Slot::kN, 2 * int64_t(F));
    float* dec_out = ws_.floats(Slot::kDecOut, int64_t(cfg_.upsample_initial_channel) * 2 * F);
    const int64_t samples = 2 * int64_t(F) * cfg_.source_upsampling();
    float* audio = ws_.floats(Slot::kAudio, samples);
    const GraphKey frame_key{T, F, u.deterministic, aligned};
    run_phase(frame_graphs_, frame_key, capture, [&] {
        if (!aligned) {
            ops::frame_token_index(dur, T, frame_token, main);
            ops::expand_frame_rows(d, frame_token, en_rows, width, F, main);
            if (trace != nullptr) {
                float* en = ctx.floats(Slot::kTraceEn, int64_t(width) * F);
                ops::transpose(en_rows, en, F, width, main);
                ctx.record("en", en, {width, F});
            }
            model_.predictor.shared_lstm(ctx, UtteranceRows(F), en_rows, shared_rows);
        }
        ctx.mark("alignment, shared LSTM");
        ctx.record("shared_lstm", shared_rows, {F, hid});
        const bool prosody_fast = fast(ModelPart::kProsodyStacks);
        const Context resblocks[kResblockStreams] = {
            context(2, fast(ModelPart::kGenerator), trace),
            context(3, fast(ModelPart::kGenerator), trace)};
        model_.predictor.f0n(ctx, side.with_fast(prosody_fast),
                             resblocks[0].with_fast(prosody_fast),
                             resblocks[1].with_fast(prosody_fast), shared_rows, F, f0, n);
        ctx.record("F0", f0, {2 * F});
        ctx.record("N", n, {2 * F});
        ctx.record("t_en", t_en, {hid, T});
        side.wait_for(ctx);  // f0
        const float* har = model_.generator.source(side, f0, F, u.deterministic, seed);
        side.mark("harmonic source, STFT (side stream)");
        const Context decoder = ctx.with_fast(fast(ModelPart::kDecoder));
        model_.decoder(decoder, resblocks[0].with_fast(fast(ModelPart::kDecoder)), t_en,
                       frame_token, T, F, f0, n, dec_out);
        decoder.mark("decoder");
        const Context generator = ctx.with_fast(fast(ModelPart::kGenerator));
        model_.generator(generator, generator_schedule(generator, side, resblocks, F), dec_out,
                         har, F, audio);
        generator.mark("conv_post, iSTFT");
    });

    result.audio = audio_pool_->take(samples);
    result.samples = samples;
    // A result in ordinary memory (the pool's bound reached) is copied
    // through the lane's page-locked staging block: into pageable memory the
    // driver stages the copy itself, and a batch whose results passed the
    // bound ran host-bound (256 medium utterances: ~20% slower).
    const bool pinned = result.audio.get_deleter().pool != nullptr;
    float* const landing = pinned ? result.audio.get() : audio_staging(samples);
    KOKORO_CUDA_CHECK(cudaMemcpyAsync(landing, audio, sizeof(float) * samples,
                                      cudaMemcpyDeviceToHost, main));
    if (wait || !pinned || trace != nullptr) {
        KOKORO_CUDA_CHECK(cudaStreamSynchronize(main));  // the other streams have joined main
        if (!pinned) std::copy_n(landing, samples, result.audio.get());
        ws_.release_retired();
    }
    if (trace != nullptr) {
        trace->floats["audio"] = {{samples}, {result.audio.get(), result.audio.get() + samples}};
    }
    return result;
}

float* Lane::audio_staging(int64_t floats) {
    if (floats > audio_staging_floats_) {
        audio_staging_.reset();
        audio_staging_floats_ = 0;  // (none, should the allocation below throw)
        audio_staging_.reset(
            static_cast<float*>(pinned_alloc(sizeof(float) * floats, "the audio's staging")));
        audio_staging_floats_ = floats;
    }
    return audio_staging_.get();
}

}  // namespace kokoro
