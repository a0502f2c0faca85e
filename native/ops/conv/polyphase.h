// A strided conv's polyphase form, shared by the weight relayout
// (conv_relayout.cu) and the strided conv's call (conv_tensor_core.cu).
#pragma once

namespace kokoro::ops {

// A strided conv1d's polyphase form (conv1d_strided_half_rows): taps m of
// floor(-pad / stride) .. floor((K - 1 - pad) / stride), as a stride-1 conv
// of `taps` taps with left pad `pad`.
struct Polyphase {
    int taps, pad;
    Polyphase(int K, int stride, int conv_pad)
        : taps(floor_div(K - 1 - conv_pad, stride) - floor_div(-conv_pad, stride) + 1),
          pad(-floor_div(-conv_pad, stride)) {}
    static int floor_div(int a, int b) { return a >= 0 ? a / b : -((b - 1 - a) / b); }
};

}  // namespace kokoro::ops
