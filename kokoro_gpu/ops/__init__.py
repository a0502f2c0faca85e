"""NumPy reference ops, one module per op family, mirroring native/include/kokoro/ops.h.

Conventions: sequences are channels-first ``[C, T]``; linear layers and
attention work on time-major rows ``[T, C]``; weights are in PyTorch's layout
with weight norm folded. Every op computes in the dtype of its inputs.
"""

from .attention import attention
from .conv import conv1d, conv1d_out_len, conv_transpose1d, conv_transpose1d_out_len
from .elementwise import (
    durations_float,
    durations_from_logits,
    expand_frames,
    frame_token_index,
    gelu_new,
    interpolate_linear,
    leaky_relu,
    reflection_pad,
    sigmoid,
    snake,
    upsample_nearest,
)
from .linear import linear
from .lstm import lstm_bidirectional, pack_lstm
from .norm import ada_layer_norm, adain, instance_norm, layer_norm
from .source import harmonic_source
from .stft import hann_periodic, istft_from_logits, stft_mag_phase

__all__ = [
    "ada_layer_norm",
    "adain",
    "attention",
    "conv1d",
    "conv1d_out_len",
    "conv_transpose1d",
    "conv_transpose1d_out_len",
    "durations_float",
    "durations_from_logits",
    "expand_frames",
    "frame_token_index",
    "gelu_new",
    "hann_periodic",
    "harmonic_source",
    "instance_norm",
    "interpolate_linear",
    "istft_from_logits",
    "layer_norm",
    "leaky_relu",
    "linear",
    "lstm_bidirectional",
    "pack_lstm",
    "reflection_pad",
    "sigmoid",
    "snake",
    "stft_mag_phase",
    "upsample_nearest",
]
