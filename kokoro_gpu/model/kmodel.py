"""The whole Kokoro forward pass on NumPy (``KModel.forward_with_tokens`` of the official package)."""

from __future__ import annotations

from functools import partial

import numpy as np

from ..config import MAX_FRAMES, ModelConfig
from ..errors import InputError
from ..ops import expand_frames, frame_token_index, linear
from ..ops.parallel import spawn
from .albert import Albert
from .blocks import Params, Weights, record
from .decoder import Decoder
from .prosody import ProsodyPredictor
from .text_encoder import TextEncoder


class KModelCPU:
    """Reference CPU backend: folded weights (docs/DESIGN.md) in, audio and durations out.

    Weights are cast to ``dtype`` once here; float64 is supported for
    debugging against a float64 reference. ``fast``: the text encoder's,
    decoder's and generator's stride-1 convolutions take bf16 operands
    (:mod:`kokoro_gpu.ops.bf16_conv`; float32 only), the parts that the CUDA
    fast precision rounds too; the token path, durations and F0 / N stay float32.
    """

    def __init__(
        self, config: ModelConfig, weights: Weights, dtype: type[np.floating] = np.float32, fast: bool = False
    ) -> None:
        self.config = config
        self.dtype = np.dtype(dtype).type
        if fast and self.dtype is not np.float32:
            raise ValueError("the fast precision runs float32 models only")
        self.fast = fast
        self.bert = Albert(config, weights, self.dtype)
        p = Params(weights, self.dtype)
        self.bert_encoder = (p("bert_encoder.weight"), p("bert_encoder.bias"))
        self.predictor = ProsodyPredictor(config, weights, self.dtype)
        self.text_encoder = TextEncoder(config, weights, self.dtype, fast)
        self.decoder = Decoder(config, weights, self.dtype, fast)

    def _check_inputs(
        self, input_ids: np.ndarray, ref_s: np.ndarray, speed: float
    ) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(input_ids).reshape(-1).astype(np.int64)
        if ids.size == 0 or ids.size > self.config.context_length:
            raise InputError(f"need 1..{self.config.context_length} token ids, got {ids.size}")
        if ids.min() < 0 or ids.max() >= self.config.n_token:
            raise InputError(f"token ids must lie in [0, {self.config.n_token})")
        style = np.asarray(ref_s).reshape(-1).astype(self.dtype)
        if style.size != 2 * self.config.style_dim:
            raise InputError(f"ref_s must hold {2 * self.config.style_dim} values, got {style.size}")
        if not (np.isfinite(speed) and speed > 0):
            raise InputError(f"speed must be a positive number, got {speed!r}")
        return ids, style

    def forward_with_tokens(
        self,
        input_ids: np.ndarray,
        ref_s: np.ndarray,
        speed: float,
        rng: np.random.Generator | None = None,
        trace: dict[str, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Token ids [T] (boundary zeros included) and style [256] -> (audio float32 [600 F], durations [T]).

        ``rng`` drives the generator's random parts (None: deterministic, both
        zero); ``trace`` receives the intermediates of docs/DESIGN.md.
        """
        ids, style = self._check_inputs(input_ids, ref_s, speed)
        sd = self.config.style_dim
        s_dec, s_pros = style[:sd], style[sd:]

        # The text encoder depends only on the ids: it runs beside ALBERT and the predictor.
        t_en_future = spawn(partial(self.text_encoder, ids))
        bert = self.bert(ids)
        record(trace, "bert", bert)
        d_en = linear(bert, *self.bert_encoder).T
        record(trace, "d_en", d_en)
        d = self.predictor.encode(d_en, s_pros)
        record(trace, "d", d)
        dur_lstm, dur_float, pred_dur = self.predictor.durations(d, speed)
        # Bound the audio before allocating it (NaN fails the comparison too).
        frames = float(np.maximum(np.round(dur_float.astype(np.float64)), 1).sum())
        if not frames <= MAX_FRAMES:
            raise InputError(f"the predicted duration ({frames:.4g} frames) is over {MAX_FRAMES} frames "
                             f"({MAX_FRAMES // 40} s) per chunk; raise the speed or shorten the text")
        record(trace, "dur_lstm", dur_lstm)
        record(trace, "dur_float", dur_float)
        record(trace, "pred_dur", pred_dur)

        frame_token = frame_token_index(pred_dur)
        en = expand_frames(d.T, frame_token)
        record(trace, "en", en)
        shared, f0, n = self.predictor.f0_n(en, s_pros)
        record(trace, "shared_lstm", shared)
        record(trace, "F0", f0)
        record(trace, "N", n)

        t_en = t_en_future.result()
        record(trace, "t_en", t_en)
        asr = expand_frames(t_en, frame_token)
        record(trace, "asr", asr)

        audio = self.decoder(asr, f0, n, s_dec, rng=rng, trace=trace).astype(np.float32)
        record(trace, "audio", audio)
        return audio, pred_dur
