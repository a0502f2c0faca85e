// One direction of an LSTM's recurrence: the CPU backend's
// kokoro_gpu.ops.lstm.lstm_bidirectional (the readable NumPy reference) after
// its input projection, which NumPy does for all steps in one GEMM. Each
// step's recurrent product and gates in one pass; the two directions run on
// two threads (the call releases the GIL).
#pragma once

#include <cstdint>

namespace kokoro::cpu {

// gates_in [steps, 4H]: x W_ih^T + b per time step; w_hh_t [H, 4H]: W_hh
// transposed; out [steps, H] (rows out_stride floats apart): h at each time
// step. reverse: the steps run from the last time step to the first. Gate
// order i, f, g, o; zero initial state.
struct LstmRecurrence {
    const float* gates_in = nullptr;
    const float* w_hh_t = nullptr;
    float* out = nullptr;
    int64_t out_stride = 0;
    int64_t steps = 0;
    int64_t hidden = 0;
    bool reverse = false;
};

// c = f c + i g, h = o tanh(c), with g = gates_in[t] + h W_hh^T.
void lstm_recurrence(const LstmRecurrence& spec);

}  // namespace kokoro::cpu
