// Device scratch and phase timing of one lane:
// - Workspace: device scratch buffers, one per slot of the registry below
//   (and index and stream), allocated on first use and reused across calls,
//   grown only when a longer input needs more (the old buffer is retired,
//   freed once the owner's streams have drained, and the workspace
//   generation moves on: graphs captured before point at it). Slots are an
//   enum: a misspelt one does not compile;
// - PhaseMarks: timing events at the model's phase boundaries.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace kokoro {

// Every workspace slot, by phase: (id, name for messages).
#define KOKORO_WORKSPACE_SLOTS(X) \
    /* inputs and the style projections */ \
    X(kInputIds, "input.ids") \
    X(kInputRefS, "input.ref_s") \
    X(kInputSeed, "input.seed") \
    X(kStylesDecoder, "styles.decoder") \
    X(kStylesProsody, "styles.prosody") \
    /* token phase outputs of one utterance (the frame phase reads them) */ \
    X(kBert, "engine.bert") \
    X(kDEnRows, "engine.d_en_rows") \
    X(kD, "engine.d") \
    X(kDurLstm, "engine.dur_lstm") \
    X(kDurLogits, "engine.dur_logits") \
    X(kTEn, "engine.t_en") \
    X(kDurations, "engine.durations") \
    /* frame phase */ \
    X(kFrameToken, "engine.frame_token") \
    X(kEnRows, "engine.en_rows") \
    X(kSharedRows, "prosody.shared_rows") \
    X(kF0, "engine.f0") \
    X(kN, "engine.n") \
    X(kDecOut, "engine.dec_out") \
    X(kAudio, "engine.audio") \
    /* a batch group's stacked token phase and frame prefix */ \
    X(kGroupIds, "group.ids") \
    X(kGroupRefS, "group.ref_s") \
    X(kGroupStylesDecoder, "group.styles.decoder") \
    X(kGroupStylesProsody, "group.styles.prosody") \
    X(kGroupBert, "group.bert") \
    X(kGroupDEnRows, "group.d_en_rows") \
    X(kGroupD, "group.d") \
    X(kGroupDurLstm, "group.dur_lstm") \
    X(kGroupDurLogits, "group.dur_logits") \
    X(kGroupTEn, "group.t_en") \
    X(kGroupDurations, "group.durations") \
    X(kGroupFrameToken, "group.frame_token") \
    X(kGroupEnRows, "group.en_rows") \
    X(kGroupSharedRows, "group.shared_rows") \
    X(kTokenPositions, "tokens.positions") \
    X(kTokenRowChunks, "tokens.row_chunks") \
    X(kFramePositions, "frames.positions") \
    X(kFrameRowChunks, "frames.row_chunks") \
    /* model parts' scratch */ \
    X(kAlbertEmbedded, "albert.embedded") \
    X(kAlbertQkv, "albert.qkv") \
    X(kAlbertAttended, "albert.attended") \
    X(kAlbertScores, "albert.scores") \
    X(kAlbertAttentionSplit, "albert.attention_split") \
    X(kAlbertFfn, "albert.ffn") \
    X(kTextRows, "text.rows") \
    X(kTextX, "text.x") \
    X(kTextY, "text.y") \
    X(kTextLstmOut, "text.lstm_out") \
    X(kProsodyEncoderIn, "prosody.encoder_in") \
    X(kProsodyEncoderLstm, "prosody.encoder_lstm") \
    X(kProsodyShared, "prosody.shared") \
    X(kProsodyStackA, "prosody.stack_a") \
    X(kProsodyStackB, "prosody.stack_b") \
    X(kProsodyStackC, "prosody.stack_c") \
    X(kBlockUpsampled, "block.upsampled") \
    X(kBlockShortcut, "block.shortcut") \
    X(kBlockShortcutHalf, "block.shortcut_half") \
    X(kBlockHidden, "block.hidden") \
    X(kBlockNormed, "block.normed") \
    X(kBlockPooled, "block.pooled") \
    X(kDecoderEncodeIn, "decoder.encode_in") \
    X(kDecoderCatA, "decoder.cat_a") \
    X(kDecoderCatB, "decoder.cat_b") \
    X(kResblockHidden, "resblock.hidden") \
    X(kResblockStream, "resblock.stream") \
    X(kGeneratorHarSource, "generator.har_source") \
    X(kGeneratorSourceScratch, "generator.source_scratch") \
    X(kGeneratorHar, "generator.har") \
    X(kGeneratorSource, "generator.source") \
    X(kGeneratorStageIn, "generator.stage_in") \
    X(kGeneratorBlockOut, "generator.block_out") \
    X(kGeneratorMean, "generator.mean") \
    X(kGeneratorBranch, "generator.branch") \
    X(kGeneratorLogits, "generator.logits") \
    X(kTraceEn, "trace.en") \
    X(kTraceDEn, "trace.d_en") \
    /* the layers' scratch (Context) */ \
    X(kActivated, "ops.activated") \
    X(kOpScratch, "ops.scratch") \
    X(kHalfRows, "ops.half_rows") \
    X(kSplitRows, "ops.split_rows") \
    X(kAdainPartials, "ops.adain_partials") \
    X(kLstmGates, "lstm.gates") \
    /* a conv's output statistics partials, for the AdaIN that reads its output */ \
    X(kStatsResblockHidden, "ops.conv_stats.resblock.hidden") \
    X(kStatsResblockOut, "ops.conv_stats.resblock.out") \
    X(kStatsNoiseConv, "ops.conv_stats.noise_conv") \
    X(kStatsStageIn, "ops.conv_stats.stage_in") \
    X(kStatsBlockHidden, "ops.conv_stats.block.hidden")

enum class Slot : int {
#define KOKORO_SLOT_ID(id, name) id,
    KOKORO_WORKSPACE_SLOTS(KOKORO_SLOT_ID)
#undef KOKORO_SLOT_ID
    kNone,  // no slot: an optional statistics slot left out
};
const char* slot_name(Slot slot);

// A buffer's key: its slot, an index within the slot (a generator stage or
// block, a linear's shape), and the stream of the context that uses it
// (contexts on different streams keep their buffers apart).
struct SlotKey {
    SlotKey(Slot s, int64_t i = 0, int st = 0) : slot(s), index(i), stream(st) {}
    Slot slot;
    int64_t index;
    int stream;
    bool operator<(const SlotKey& o) const {
        return std::tie(slot, index, stream) < std::tie(o.slot, o.index, o.stream);
    }
};

class Workspace {
public:
    Workspace() = default;
    ~Workspace();  // the owner drains its streams first
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    // The buffer of `key`, holding at least `count` elements. It stays
    // valid until the next request of the same key with a larger count.
    float* floats(SlotKey key, int64_t count) { return typed<float>(key, count); }
    int32_t* ints(SlotKey key, int64_t count) { return typed<int32_t>(key, count); }
    double* doubles(SlotKey key, int64_t count) { return typed<double>(key, count); }
    uint64_t* words(SlotKey key, int64_t count) { return typed<uint64_t>(key, count); }
    __half* halves(SlotKey key, int64_t count) { return typed<__half>(key, count); }
    size_t bytes() const;
    // Moves on whenever a buffer is replaced by a larger one: work captured
    // at an older generation may point at retired memory.
    uint64_t generation() const { return generation_; }
    // Frees the retired buffers; only when no enqueued work can still use them.
    void release_retired();

private:
    void* get(const SlotKey& key, size_t bytes);
    // At least one element, so that an empty request still gets a valid pointer.
    template <typename T>
    T* typed(const SlotKey& key, int64_t count) {
        return static_cast<T*>(get(key, sizeof(T) * static_cast<size_t>(count > 1 ? count : 1)));
    }
    struct Buffer {
        void* ptr = nullptr;
        size_t bytes = 0;
    };
    std::map<SlotKey, Buffer> buffers_;
    std::vector<void*> retired_;
    uint64_t generation_ = 0;
};

// Timing events at the boundaries of the model's phases, by name: the
// benchmark's wall-clock breakdown of a forward pass. Under stream capture
// record() adds an external event record node (cudaEventRecordExternal), so
// a replayed graph records its marks too; events are created on a name's
// first record.
class PhaseMarks {
public:
    PhaseMarks() = default;
    ~PhaseMarks();
    PhaseMarks(const PhaseMarks&) = delete;
    PhaseMarks& operator=(const PhaseMarks&) = delete;
    void record(const std::string& name, cudaStream_t stream);
    // (name, ms since the mark `start`) of every mark, in time order; the
    // streams that recorded them must have drained.
    std::vector<std::pair<std::string, float>> since(const std::string& start) const;

private:
    std::map<std::string, cudaEvent_t> events_;
};

}  // namespace kokoro
