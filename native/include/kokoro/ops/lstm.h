// Ops of native/ops/lstm.cu: bidirectional LSTMs and stacked recurrences. Conventions:
// kokoro/ops.h.
// (The family headers include each other in the order the families build on
// one another: each holds the types the later ones use.)
#pragma once

#include "kokoro/ops/conv.h"

namespace kokoro::ops {

// ------------------------------------------------------------------ lstm.cu
// Bidirectional single-layer LSTM, PyTorch gate order (i, f, g, o), zero
// initial state. x [T, In]; w_ih [2, 4H, In], w_hh [2, 4H, H], b [2, 4H]
// (b_ih + b_hh folded at load); out [T, 2H] (forward half then reverse half).
// The input projection is one GEMM for both directions; the whole time loop
// runs on the device. `scratch` holds at least lstm_scratch_floats(T, H).
// max_cluster_blocks caps the cluster path's blocks per direction (lstm.cu;
// the tests pin 8, the portable cluster size, to run its narrower shape).
void lstm_bidirectional(cublasHandle_t handle, const float* x, const float* w_ih,
                        const float* w_hh, const float* b, float* out, int T, int In, int H,
                        float* scratch, cudaStream_t stream, int max_cluster_blocks = 16);
int64_t lstm_scratch_floats(int T, int H);
// The recurrence alone, on input projections gx (both directions' gates,
// bias included) computed by the caller: lstm_bidirectional's second half.
// Sequences stacked as rows: sequence i's steps are the next lengths[i] rows
// of gx [rows, 8H] and out [rows, 2H] (a batch's group: up to four recur in
// one launch, which reads W_hh once per step for all; each sequence's bits
// are those of its own call).
void lstm_recurrence(const float* gx, const float* w_hh, float* out,
                     const std::vector<int>& lengths, int H, cudaStream_t stream,
                     int max_cluster_blocks = 16);

}  // namespace kokoro::ops
