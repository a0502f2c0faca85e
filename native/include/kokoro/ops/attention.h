// Ops of native/ops/attention.cu: ALBERT's attention (SGEMM and split FP16). Conventions:
// kokoro/ops.h.
// (The family headers include each other in the order the families build on
// one another: each holds the types the later ones use.)
#pragma once

#include "kokoro/ops/lstm.h"

namespace kokoro::ops {

// ------------------------------------------------------------- attention.cu
// Bidirectional multi-head attention on packed projections:
// q, k, v [T, heads * head_dim], rows ld_qkv >= heads * head_dim floats apart
// (3 * heads * head_dim when they are the column blocks of one fused QKV
// projection) -> out [T, heads * head_dim] (dense),
// softmax(q k^T / sqrt(head_dim) + mask) v, where keys at positions >=
// valid_len get the additive mask (HF's large negative value). Plain fp32
// throughout (two batched SGEMMs around a softmax pass, never TF32);
// `scratch` holds at least attention_scratch_floats(T, heads) (the scores).
void attention(cublasHandle_t handle, const float* q, const float* k, const float* v, float* out,
               int T, int heads, int head_dim, int ld_qkv, int valid_len, float* scratch,
               cudaStream_t stream);
int64_t attention_scratch_floats(int T, int heads);
// The same on the tensor cores, as precision "fast" runs ALBERT's linears
// (split FP16 operands, float32-level accuracy): q, k, v the column blocks
// of one packed projection [T, 3 * heads * head_dim], given as its split
// linear's sums (SplitSums) plus its bias (may be null); scores as for
// attention, halves attention_split_half_scratch_halves(...) FP16 scratch.
void attention_split_half(SplitSums qkv, const float* qkv_bias, float* out, int T, int heads,
                          int head_dim, int valid_len, float* scores, __half* halves,
                          cudaStream_t stream, HalfKernel kernel = HalfKernel::kBest);
int64_t attention_split_half_scratch_halves(int T, int heads, int head_dim);

}  // namespace kokoro::ops
