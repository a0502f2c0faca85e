// The op interface of the native engine: one function per op, grouped by op
// family (one .cu file per family under native/ops/, one header per family
// under kokoro/ops/). Model parts
// (native/model/) compose these ops; the Python CPU backend (kokoro_gpu/ops/)
// holds the reference implementation of every one of them.
//
// Conventions, shared by every op:
// - All tensors are float32 device pointers, dense, row-major, except the
//   FP16 "half rows" operands of the tensor-core convolution (half_rows.cuh:
//   time-major [T, ld], ld = C rounded up to 8, pad columns zero), rounded
//   or split (HalfOperands below).
// - Sequences in the convolutional parts are channels-first: [C, T] (the
//   PyTorch [1, C, T] layout without the batch axis). Linear layers and
//   attention work on time-major [T, C] rows.
// - Weights have weight norm already folded. Linear weights are in
//   PyTorch's layout [out, in]; conv weights have the kernel axis moved to
//   the middle (conv_weight_to_device_layout): Conv1d [Cout, K, Cin/groups],
//   ConvTranspose1d [Cin, K, Cout/groups].
// - Every op is enqueued on `stream` and returns immediately; launch errors
//   are checked (KOKORO_CHECK_LAUNCH) and thrown as kokoro::CudaError.
// - Output buffers never alias inputs unless the op says "in place".
// - Ops taking a cuBLAS handle bind it to `stream`; the handle must stay in
//   CUBLAS_DEFAULT_MATH. Their GEMMs run in the GemmMath they are given:
//   plain fp32 by default, or TF32 tensor cores (fp32 accumulation) where the
//   caller opts in per call.
// - Ops taking `scratch` need a device buffer of at least the size the
//   matching *_scratch_floats function returns (0 means it may be null); the
//   buffer may be shared between ops enqueued on the same stream.
#pragma once

#include "kokoro/ops/attention.h"
#include "kokoro/ops/conv.h"
#include "kokoro/ops/elementwise.h"
#include "kokoro/ops/linear.h"
#include "kokoro/ops/lstm.h"
#include "kokoro/ops/norm.h"
#include "kokoro/ops/source.h"
#include "kokoro/ops/stft.h"
