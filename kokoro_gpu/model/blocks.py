"""Weight access and the residual blocks shared by the prosody predictor, decoder and generator.

AdainResBlk1d (StyleTTS2's, used by the F0/N stacks and the decoder) and
AdaINResBlock1 (the generator's Snake residual block). Each block takes its
folded weights once, cast to the model dtype, and is then called with a
sequence ``x [C, T]`` and a style vector ``s``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import CheckpointError
from ..ops import adain, conv1d, conv_transpose1d, linear, upsample_nearest
from ..ops.bf16_conv import BF16Conv1d, BF16Sequence, adain_bf16
from ..ops.fast_conv import Method, PaddedInput, PreparedConv1d

Weights = Mapping[str, np.ndarray]
FloatType = type[np.floating]


class Params:
    """Folded weights under one name prefix, returned as contiguous arrays of the model dtype.

    ``fast``: the layers built from them take the fast precision's bf16 convolutions.
    """

    def __init__(self, weights: Weights, dtype: FloatType, prefix: str = "", fast: bool = False) -> None:
        self.weights = weights
        self.dtype = dtype
        self.prefix = prefix
        self.fast = fast

    def _full(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def __contains__(self, name: str) -> bool:
        return self._full(name) in self.weights

    def __call__(self, name: str) -> np.ndarray:
        full = self._full(name)
        try:
            w = self.weights[full]
        except KeyError:
            raise CheckpointError(f"checkpoint lacks tensor {full!r}; is it Kokoro-82M's?") from None
        return np.ascontiguousarray(w, dtype=self.dtype)

    def sub(self, name: str) -> Params:
        return Params(self.weights, self.dtype, self._full(name), self.fast)


def record(trace: dict[str, np.ndarray] | None, key: str, value: np.ndarray) -> None:
    """Store a copy of an intermediate when tracing."""
    if trace is not None:
        trace[key] = np.array(value, copy=True)


class Linear:
    """A linear layer (also the style projections ``fc(s)`` of the AdaIN layers)."""

    def __init__(self, p: Params, bias: bool = True) -> None:
        self.w = p("weight")
        self.b = p("bias") if bias else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return linear(x, self.w, self.b)


class Conv1d:
    """Conv1d with fixed stride and dilation; padding "same" for stride 1 unless given.

    Stride 1 runs as a :class:`PreparedConv1d` (weights laid out once; ``method``
    None picks the fastest transform for the shape), or in fast precision as a
    :class:`BF16Conv1d`; other strides as ``conv1d``.
    """

    def __init__(self, p: Params, stride: int = 1, dilation: int = 1, pad: int | None = None,
                 bias: bool = True, method: Method | None = "gemm") -> None:
        w = p("weight")
        self.b = p("bias") if bias else None
        self.stride = stride
        self.dilation = dilation
        self.pad = dilation * (w.shape[-1] - 1) // 2 if pad is None else pad
        # The prepared form holds the weights it needs; only a strided conv keeps them as given.
        self.prepared: PreparedConv1d | BF16Conv1d | None = None
        if stride == 1:
            self.prepared = (BF16Conv1d(w, self.b, self.pad, dilation) if p.fast
                             else PreparedConv1d(w, self.b, self.pad, dilation, method))
        self.w = w if self.prepared is None else None

    def after_adain(self, x: np.ndarray, style_gb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        """``self(adain(x, style_gb, "snake", alpha=alpha))``, the AdaIN written where the conv reads it.

        fast: rounded to bf16 with the conv's padding (``adain_bf16``); fp32: into the
        prepared conv's padded input buffer.
        """
        if isinstance(self.prepared, BF16Conv1d):
            return self.prepared(adain_bf16(x, style_gb, self.pad, "snake", alpha=alpha))
        if isinstance(self.prepared, PreparedConv1d):
            padded = self.prepared.padded_input(x.shape[-1])
            adain(x, style_gb, "snake", alpha=alpha, out=padded.interior)
            return self.prepared(padded)
        return self(adain(x, style_gb, "snake", alpha=alpha))

    def __call__(self, x: np.ndarray | BF16Sequence | PaddedInput) -> np.ndarray:
        if self.prepared is not None:
            return self.prepared(x)  # type: ignore[arg-type]  # a BF16Sequence only reaches a BF16Conv1d
        return conv1d(x, self.w, self.b, stride=self.stride, pad=self.pad, dilation=self.dilation)


class AdainResBlk1d:
    """``(residual(x) + shortcut(x)) / sqrt(2)``, optionally upsampling time x2.

    residual: AdaIN -> LeakyReLU(0.2) -> [depthwise ConvTranspose1d k3 s2 if
    upsampling] -> conv k3 -> AdaIN -> LeakyReLU(0.2) -> conv k3;
    shortcut: [nearest x2 if upsampling] -> [1x1 conv if channels change].
    ``method`` picks the k3 convs' algorithm (see :class:`Conv1d`).
    """

    slope = 0.2

    def __init__(self, p: Params, upsample: bool, method: Method | None = "gemm") -> None:
        self.upsample = upsample
        self.norm1 = Linear(p.sub("norm1.fc"))
        self.norm2 = Linear(p.sub("norm2.fc"))
        self.conv1 = Conv1d(p.sub("conv1"), method=method)
        self.conv2 = Conv1d(p.sub("conv2"), method=method)
        self.conv1x1 = Conv1d(p.sub("conv1x1"), bias=False) if "conv1x1.weight" in p else None
        self.pool = (p("pool.weight"), p("pool.bias")) if upsample else None
        self.scale = p.dtype(1.0 / math.sqrt(2.0))

    def __call__(self, x: np.ndarray, s: np.ndarray) -> np.ndarray:
        r = adain(x, self.norm1(s), "leaky_relu", slope=self.slope)
        if self.pool is not None:
            r = conv_transpose1d(r, *self.pool, stride=2, pad=1, output_padding=1, groups=r.shape[0])
        r = self.conv2(adain(self.conv1(r), self.norm2(s), "leaky_relu", slope=self.slope))
        sc = upsample_nearest(x, 2) if self.upsample else x
        if self.conv1x1 is not None:
            sc = self.conv1x1(sc)
        return (r + sc) * self.scale


class AdaINResBlock1:
    """The generator's residual block: three times
    ``x += conv2(snake2(adain2(conv1_dilated(snake1(adain1(x))))))``.
    """

    def __init__(self, p: Params, dilations: Sequence[int]) -> None:
        self.layers = [
            (
                Linear(p.sub(f"adain1.{j}.fc")),
                p(f"alpha1.{j}").reshape(-1),
                Conv1d(p.sub(f"convs1.{j}"), dilation=int(d), method=None),
                Linear(p.sub(f"adain2.{j}.fc")),
                p(f"alpha2.{j}").reshape(-1),
                Conv1d(p.sub(f"convs2.{j}"), method=None),
            )
            for j, d in enumerate(dilations)
        ]

    def __call__(self, x: np.ndarray, s: np.ndarray) -> np.ndarray:
        for fc1, a1, c1, fc2, a2, c2 in self.layers:
            # Each AdaIN writes its conv's input where the conv reads it (bf16 in fast precision).
            xt = c1.after_adain(x, fc1(s), a1)
            y = c2.after_adain(xt, fc2(s), a2)
            y += x  # in place: the conv's output is a fresh array
            x = y
        return x
