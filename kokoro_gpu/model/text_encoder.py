"""Text encoder: phoneme embedding, conv + LayerNorm + LeakyReLU stack, bidirectional LSTM."""

from __future__ import annotations

import numpy as np

from ..config import ModelConfig
from ..ops import layer_norm, leaky_relu, lstm_bidirectional, pack_lstm
from .blocks import Conv1d, FloatType, Params, Weights


class TextEncoder:
    """``text_encoder.*``: token ids [T] -> t_en [C, T]."""

    slope = 0.2
    eps = 1e-5

    def __init__(self, config: ModelConfig, weights: Weights, dtype: FloatType, fast: bool = False) -> None:
        p = Params(weights, dtype, "text_encoder", fast)
        self.embedding = p("embedding.weight")
        self.cnn = [
            (Conv1d(p.sub(f"cnn.{i}.0")), p(f"cnn.{i}.1.gamma"), p(f"cnn.{i}.1.beta"))
            for i in range(config.n_layer)
        ]
        self.lstm = pack_lstm(weights, "text_encoder.lstm", dtype)

    def __call__(self, input_ids: np.ndarray) -> np.ndarray:
        x = self.embedding[input_ids].T  # [C, T]
        for conv, gamma, beta in self.cnn:
            x = leaky_relu(layer_norm(conv(x), 0, gamma, beta, eps=self.eps), self.slope)
        return np.ascontiguousarray(lstm_bidirectional(x.T, *self.lstm).T)
