"""Decoder: F0/N downsampling, AdainResBlk1d encode/decode stack, then the generator."""

from __future__ import annotations

from functools import partial

import numpy as np

from ..config import ModelConfig
from ..ops.parallel import spawn
from .blocks import AdainResBlk1d, Conv1d, FloatType, Params, Weights, record
from .generator import Generator


class Decoder:
    """``decoder.*``: asr [C, F], F0 [2F], N [2F], decoder style -> audio [600 F]."""

    n_decode = 4

    def __init__(self, config: ModelConfig, weights: Weights, dtype: FloatType, fast: bool = False) -> None:
        p = Params(weights, dtype, "decoder", fast)
        self.f0_conv = Conv1d(p.sub("F0_conv"), stride=2, pad=1)
        self.n_conv = Conv1d(p.sub("N_conv"), stride=2, pad=1)
        # Winograd for the wide k3 convs; the F0/N stacks keep the direct GEMM, whose split by output
        # channels computes every sample as one thread does: F0's rounding reaches the STFT phases.
        self.encode = AdainResBlk1d(p.sub("encode"), upsample=False, method="winograd")
        self.asr_res = Conv1d(p.sub("asr_res.0"))
        # Only the last decode block upsamples; the side inputs are appended up to and including it.
        self.decode = [AdainResBlk1d(p.sub(f"decode.{i}"), upsample=i == self.n_decode - 1, method="winograd")
                       for i in range(self.n_decode)]
        self.generator = Generator(config, weights, dtype, fast)

    def __call__(
        self,
        asr: np.ndarray,
        f0: np.ndarray,
        n: np.ndarray,
        s: np.ndarray,
        rng: np.random.Generator | None = None,
        trace: dict[str, np.ndarray] | None = None,
    ) -> np.ndarray:
        # The generator's excitation depends only on F0 (and the random state, which nothing else
        # here draws from): it is made on a worker beside the decoder's stack, whose GEMMs leave
        # cores idle between them, instead of single-threaded between the two.
        har = spawn(partial(self.generator.excitation, f0, rng, trace))
        f0_down = self.f0_conv(f0[None, :])
        n_down = self.n_conv(n[None, :])
        x = self.encode(np.concatenate([asr, f0_down, n_down]), s)
        asr_res = self.asr_res(asr)
        for block in self.decode:
            x = block(np.concatenate([x, asr_res, f0_down, n_down]), s)
        record(trace, "dec_out", x)
        return self.generator(x, s, har.result(), trace=trace)
