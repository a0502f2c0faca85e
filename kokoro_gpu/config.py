"""The model configuration (config.json) as a typed object.

The v1.0 config ships inside the package (``data/config.json``) so that tests
and random-weight checkpoints need no download; a model directory's own
``config.json`` takes precedence when one is given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CheckpointError

DEFAULT_CONFIG_PATH = Path(__file__).parent / "data" / "config.json"

SAMPLE_RATE = 24000
# One acoustic frame is 600 samples: 2 (decoder upsampling) x 10 x 6 (generator
# upsampling) x 5 (iSTFT hop). Durations count frames at 40 per second.
SAMPLES_PER_FRAME = 600


@dataclass(frozen=True)
class ModelConfig:
    vocab: dict[str, int]
    n_token: int
    hidden_dim: int
    style_dim: int
    n_layer: int
    max_dur: int
    text_encoder_kernel_size: int
    n_mels: int
    dim_in: int
    max_conv_dim: int
    dropout: float
    multispeaker: bool
    plbert: dict[str, Any]
    istftnet: dict[str, Any]
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def context_length(self) -> int:
        """Token positions ALBERT accepts, boundary tokens included."""
        return int(self.plbert["max_position_embeddings"])

    @property
    def max_phonemes(self) -> int:
        return self.context_length - 2

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        try:
            return cls(
                vocab={str(k): int(v) for k, v in d["vocab"].items()},
                n_token=int(d["n_token"]),
                hidden_dim=int(d["hidden_dim"]),
                style_dim=int(d["style_dim"]),
                n_layer=int(d["n_layer"]),
                max_dur=int(d["max_dur"]),
                text_encoder_kernel_size=int(d["text_encoder_kernel_size"]),
                n_mels=int(d["n_mels"]),
                dim_in=int(d["dim_in"]),
                max_conv_dim=int(d["max_conv_dim"]),
                dropout=float(d["dropout"]),
                multispeaker=bool(d["multispeaker"]),
                plbert=dict(d["plbert"]),
                istftnet=dict(d["istftnet"]),
                raw=dict(d),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CheckpointError(
                f"config is missing or has a malformed field ({e!r}); "
                "use the config.json that belongs to the checkpoint"
            ) from None

    @classmethod
    def load(cls, path: str | Path | None = None) -> ModelConfig:
        """Read a config.json; without a path, the bundled v1.0 config."""
        p = Path(path) if path is not None else DEFAULT_CONFIG_PATH
        try:
            with open(p, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise CheckpointError(f"config file not found: {p}") from None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"cannot read config {p}: {e}") from None
        return cls.from_dict(data)
