"""iSTFTNet generator: harmonic source, upsampling stages with Snake residual blocks, inverse STFT."""

from __future__ import annotations

import math
from concurrent.futures import Future
from functools import partial

import numpy as np

from ..config import SAMPLE_RATE, ModelConfig
from ..ops import (
    harmonic_source,
    istft_from_logits,
    leaky_relu,
    reflection_pad,
    stft_mag_phase,
)
from ..ops.parallel import run_parallel, spawn
from ..ops.polyphase import PreparedConvTranspose1d
from .blocks import AdaINResBlock1, Conv1d, FloatType, Params, Weights, record

# The source branch's residual blocks have fixed dilations in the official
# model (not taken from the config); their kernel sizes come from the weights.
NOISE_RES_DILATIONS = (1, 3, 5)


class _Stage:
    """One upsampling stage: ConvTranspose1d, the source branch added, the mean of the resblocks."""

    def __init__(self, p: Params, i: int, config: ModelConfig, last: bool) -> None:
        ist = config.istftnet
        rates = [int(r) for r in ist["upsample_rates"]]
        self.rate = rates[i]
        ups_w = p(f"ups.{i}.weight")
        pad = (ups_w.shape[-1] - self.rate) // 2
        self.ups = PreparedConvTranspose1d(ups_w, p(f"ups.{i}.bias"), self.rate, pad)
        self.last = last
        if last:
            self.noise_conv = Conv1d(p.sub(f"noise_convs.{i}"))
        else:
            # Brings the source STFT frame rate down to this stage's rate.
            stride = math.prod(rates[i + 1 :])
            self.noise_conv = Conv1d(p.sub(f"noise_convs.{i}"), stride=stride, pad=(stride + 1) // 2)
        self.noise_res = AdaINResBlock1(p.sub(f"noise_res.{i}"), NOISE_RES_DILATIONS)
        dilations = [[int(d) for d in ds] for ds in ist["resblock_dilation_sizes"]]
        n_k = len(ist["resblock_kernel_sizes"])
        self.resblocks = [AdaINResBlock1(p.sub(f"resblocks.{i * n_k + j}"), dilations[j]) for j in range(n_k)]

    def source(self, har: np.ndarray, s: np.ndarray) -> np.ndarray:
        """The source branch: the harmonic STFT brought to this stage's rate, through its resblock."""
        return self.noise_res(self.noise_conv(har), s)

    def __call__(self, x: np.ndarray, x_source: Future[np.ndarray], s: np.ndarray) -> np.ndarray:
        x = leaky_relu(x, 0.1)
        x = self.ups(x)
        if self.last:
            x = reflection_pad(x, 1, 0)
        x += x_source.result()
        outs = run_parallel([partial(block, x, s) for block in self.resblocks])
        out = outs[0]
        for o in outs[1:]:
            out += o
        out /= x.dtype.type(len(self.resblocks))
        return out


class Generator:
    """``decoder.generator.*``: x [C, 2F] + style + the excitation made from F0 [2F] -> audio [600 F]."""

    def __init__(self, config: ModelConfig, weights: Weights, dtype: FloatType, fast: bool = False) -> None:
        p = Params(weights, dtype, "decoder.generator", fast)
        ist = config.istftnet
        self.n_fft = int(ist["gen_istft_n_fft"])
        self.hop = int(ist["gen_istft_hop_size"])
        n_up = len(ist["upsample_rates"])
        self.upp = math.prod(int(r) for r in ist["upsample_rates"]) * self.hop
        self.lin_w = p("m_source.l_linear.weight")
        self.lin_b = p("m_source.l_linear.bias")
        self.stages = [_Stage(p, i, config, last=i == n_up - 1) for i in range(n_up)]
        self.conv_post = Conv1d(p.sub("conv_post"))

    def excitation(
        self,
        f0: np.ndarray,
        rng: np.random.Generator | None = None,
        trace: dict[str, np.ndarray] | None = None,
    ) -> np.ndarray:
        """F0 [2F] -> the harmonic source's STFT (magnitudes then phases) [n_fft + 2, frames]."""
        har_source = harmonic_source(f0, self.upp, self.lin_w, self.lin_b, rng=rng, sample_rate=SAMPLE_RATE)
        record(trace, "har_source", har_source)
        har = stft_mag_phase(har_source, self.n_fft, self.hop)
        record(trace, "har", har)
        return har

    def __call__(
        self,
        x: np.ndarray,
        s: np.ndarray,
        har: np.ndarray,
        trace: dict[str, np.ndarray] | None = None,
    ) -> np.ndarray:
        """x [C, 2F], style, the excitation (``excitation(f0)``) -> audio [600 F]."""
        # The source branches depend only on the harmonics: they start at once, beside the stages.
        sources = [spawn(partial(stage.source, har, s)) for stage in reversed(self.stages)][::-1]
        for stage, x_source in zip(self.stages, sources, strict=True):
            x = stage(x, x_source, s)
        # The final LeakyReLU uses PyTorch's default slope, not the stages' 0.1.
        x = self.conv_post(leaky_relu(x, 0.01))
        record(trace, "gen_post", x)
        return istft_from_logits(x, self.n_fft, self.hop)
