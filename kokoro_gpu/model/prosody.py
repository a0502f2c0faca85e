"""Prosody predictor: duration encoder, duration head, F0 and energy (N) curves."""

from __future__ import annotations

from functools import partial

import numpy as np

from ..config import ModelConfig
from ..ops import ada_layer_norm, durations_float, durations_from_logits, lstm_bidirectional, pack_lstm
from ..ops.parallel import run_parallel
from .blocks import AdainResBlk1d, Conv1d, FloatType, Linear, Params, Weights


def _with_style(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Append the style vector to every row: x [T, C] -> [T, C + style]."""
    return np.concatenate([x, np.broadcast_to(s, (x.shape[0], s.shape[0]))], axis=1)


class ProsodyPredictor:
    """``predictor.*``: DurationEncoder, ``lstm`` + ``duration_proj``, ``shared`` LSTM + F0/N stacks."""

    def __init__(self, config: ModelConfig, weights: Weights, dtype: FloatType) -> None:
        p = Params(weights, dtype, "predictor")
        self.enc_layers = [
            (pack_lstm(weights, f"predictor.text_encoder.lstms.{2 * i}", dtype),
             Linear(p.sub(f"text_encoder.lstms.{2 * i + 1}.fc")))
            for i in range(config.n_layer)
        ]
        self.dur_lstm = pack_lstm(weights, "predictor.lstm", dtype)
        self.dur_proj = Linear(p.sub("duration_proj.linear_layer"))
        self.shared = pack_lstm(weights, "predictor.shared", dtype)
        # Second block of each stack upsamples time x2 (F frames -> 2F).
        self.stacks = {
            name: ([AdainResBlk1d(p.sub(f"{name}.{j}"), upsample=j == 1) for j in range(3)],
                   Conv1d(p.sub(f"{name}_proj")))
            for name in ("F0", "N")
        }

    def encode(self, d_en: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Duration encoder: d_en [C, T] and prosody style s -> d [T, C + style]."""
        x = _with_style(d_en.T, s)
        for lstm_w, fc in self.enc_layers:
            x = _with_style(ada_layer_norm(lstm_bidirectional(x, *lstm_w), fc(s)), s)
        return x

    def durations(self, d: np.ndarray, speed: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """d [T, C + style] -> (LSTM output [T, C], float durations [T], int64 durations [T])."""
        h = lstm_bidirectional(d, *self.dur_lstm)
        logits = self.dur_proj(h)
        return h, durations_float(logits, speed), durations_from_logits(logits, speed)

    def f0_n(self, en: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """en [C + style, F] -> (shared LSTM output [F, C], F0 [2F], N [2F])."""
        shared = lstm_bidirectional(en.T, *self.shared)

        def curve(blocks: list[AdainResBlk1d], proj: Conv1d) -> np.ndarray:
            x = shared.T
            for block in blocks:
                x = block(x, s)
            return proj(x)[0]

        f0, n = run_parallel([partial(curve, *stack) for stack in self.stacks.values()])
        return shared, f0, n
