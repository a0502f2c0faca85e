"""The model configuration (config.json) as a typed object.

The v1.0 config ships inside the package (``data/config.json``) so that tests
and random-weight checkpoints need no download; a model directory's own
``config.json`` takes precedence when one is given.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from .errors import ConfigError

DEFAULT_CONFIG_PATH = Path(__file__).parent / "data" / "config.json"

SAMPLE_RATE = 24000
# One acoustic frame is 600 samples: 2 (decoder upsampling) x 10 x 6 (generator
# upsampling) x 5 (iSTFT hop). Durations count frames at 40 per second.
SAMPLES_PER_FRAME = 600
# The longest utterance (one chunk) a backend makes: 24,000 frames, 10 minutes of
# audio. A 510-phoneme chunk lasts well under a minute at speed 1; the bound stops a
# slow speed or a broken duration head from asking for gigabytes.
MAX_FRAMES = 24000

MAX_CONFIG_BYTES = 1 << 20
# A config whose layout holds more values than this is refused (Kokoro-82M: 82 million).
MAX_PARAMETERS = 500_000_000
_ADVICE = "use the config.json that belongs to the checkpoint"
# The decoder's last AdainResBlk1d makes this many channels whatever the config says (as in Kokoro's
# istftnet.Decoder), so the generator's input width must match it.
DECODER_OUT_CHANNELS = 512


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
    def from_dict(cls, d: Any, source: str = "config") -> ModelConfig:
        """A checked config: every value the model uses present, of its type and in range.

        Raises :class:`ConfigError` naming the first bad key.
        """
        check = _Checker(source)
        if not isinstance(d, dict):
            raise ConfigError(f"{source}: expected a JSON object, found {type(d).__name__}; {_ADVICE}")
        n_token = check.integer(d, "n_token", 1, 1 << 16)
        vocab = check.mapping(d, "vocab", max_items=1 << 16)
        for symbol, index in vocab.items():
            if type(index) is not int or not 0 <= index < n_token:
                check.fail(f"vocab[{symbol[:20]!r}]", f"must be a token id in [0, {n_token})")
        plbert = check.mapping(d, "plbert")
        heads = check.integer(plbert, "num_attention_heads", 1, 1024, "plbert.")
        hidden = check.integer(plbert, "hidden_size", 1, 1 << 14, "plbert.")
        if hidden % heads:
            check.fail("plbert.hidden_size", f"must be a multiple of plbert.num_attention_heads ({heads})")
        check.integer(plbert, "intermediate_size", 1, 1 << 16, "plbert.")
        check.integer(plbert, "max_position_embeddings", 3, 1 << 16, "plbert.")
        check.integer(plbert, "num_hidden_layers", 1, 256, "plbert.")
        if not (type(plbert.get("dropout", 0.0)) in (int, float) and 0 <= plbert.get("dropout", 0.0) <= 1):
            check.fail("plbert.dropout", "must be a number in [0, 1]")
        istftnet = check.mapping(d, "istftnet")
        check.integer(istftnet, "gen_istft_n_fft", 2, 1 << 13, "istftnet.")
        check.integer(istftnet, "gen_istft_hop_size", 1, 1 << 13, "istftnet.")
        rates = check.int_list(istftnet, "upsample_rates", 1, 64, "istftnet.")
        kernels = check.int_list(istftnet, "upsample_kernel_sizes", 1, 256, "istftnet.")
        if len(kernels) != len(rates):
            check.fail("istftnet.upsample_kernel_sizes", "must have one entry per upsample rate")
        channels = check.integer(istftnet, "upsample_initial_channel", 1, 1 << 14, "istftnet.")
        if channels != DECODER_OUT_CHANNELS:
            # Kokoro's decoder ends in a block of fixed width that feeds the generator's first upsampler.
            check.fail("istftnet.upsample_initial_channel",
                       f"must be {DECODER_OUT_CHANNELS}, the width of the decoder's last block")
        res_kernels = check.int_list(istftnet, "resblock_kernel_sizes", 1, 255, "istftnet.")
        dilations = istftnet.get("resblock_dilation_sizes")
        if not (isinstance(dilations, list) and len(dilations) == len(res_kernels)):
            check.fail("istftnet.resblock_dilation_sizes", "must be a list with one list per resblock kernel")
        for i in range(len(dilations)):
            check.int_list(dilations, i, 1, 64, "istftnet.resblock_dilation_sizes")
        hidden_dim = check.integer(d, "hidden_dim", 2, 1 << 13)
        if hidden_dim % 2:
            check.fail("hidden_dim", "must be even (its LSTMs have hidden_dim / 2 units each way)")
        dropout = d.get("dropout", 0.0)
        if not (type(dropout) in (int, float) and 0 <= dropout <= 1):
            check.fail("dropout", "must be a number in [0, 1]")
        multispeaker = d.get("multispeaker", True)
        if type(multispeaker) is not bool:
            check.fail("multispeaker", "must be true or false")
        config = cls(
            vocab=dict(vocab),
            n_token=n_token,
            hidden_dim=hidden_dim,
            style_dim=check.integer(d, "style_dim", 1, 1 << 13),
            n_layer=check.integer(d, "n_layer", 1, 64),
            max_dur=check.integer(d, "max_dur", 1, 1 << 12),
            text_encoder_kernel_size=check.integer(d, "text_encoder_kernel_size", 1, 255),
            n_mels=check.integer(d, "n_mels", 1, 1 << 12),
            dim_in=check.integer(d, "dim_in", 1, 1 << 13),
            max_conv_dim=check.integer(d, "max_conv_dim", 1, 1 << 13),
            dropout=float(dropout),
            multispeaker=multispeaker,
            plbert=dict(plbert),
            istftnet=dict(istftnet),
            raw=dict(d),
        )
        if config.parameter_count() > MAX_PARAMETERS:
            raise ConfigError(f"{source}: its sizes make a model of {config.parameter_count()} parameters, "
                              f"more than {MAX_PARAMETERS}; {_ADVICE}")
        return config

    def parameter_count(self) -> int:
        """Values in the folded checkpoint layout this config implies."""
        from .layout import folded_layout

        return sum(math.prod(shape) for shape in folded_layout(self).values())

    @classmethod
    def load(cls, path: str | Path | None = None) -> ModelConfig:
        """Read a config.json; without a path, the bundled v1.0 config."""
        p = Path(path) if path is not None else DEFAULT_CONFIG_PATH
        try:
            with open(p, "rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {p}") from None
        except OSError as e:
            raise ConfigError(f"cannot read config {p}: {e.strerror or e}") from None
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config {p} is larger than {MAX_CONFIG_BYTES} bytes; {_ADVICE}")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:
            raise ConfigError(f"cannot read config {p}: {type(e).__name__}: {e}; {_ADVICE}") from None
        return cls.from_dict(data, source=f"config {p}")


class _Checker:
    """Value checks that raise a :class:`ConfigError` naming the key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigError(f"{self.source}: {key} {problem}; {_ADVICE}")

    def integer(self, d: Any, key: Any, lo: int, hi: int, prefix: str = "") -> int:
        value = d.get(key) if isinstance(d, dict) else d[key]
        name = f"{prefix}{key}" if isinstance(key, str) else f"{prefix}[{key}]"
        if value is None:
            self.fail(name, "is missing")
        if type(value) is not int or not lo <= value <= hi:
            self.fail(name, f"must be an integer in [{lo}, {hi}], got {_show(value)}")
        return value

    def int_list(self, d: Any, key: Any, lo: int, hi: int, prefix: str = "") -> list[int]:
        value = d.get(key) if isinstance(d, dict) else d[key]
        name = f"{prefix}{key}" if isinstance(key, str) else f"{prefix}[{key}]"
        if not (isinstance(value, list) and 1 <= len(value) <= 16):
            self.fail(name, f"must be a list of 1 to 16 integers, got {_show(value)}")
        for i in range(len(value)):
            self.integer(value, i, lo, hi, name)
        return value

    def mapping(self, d: dict, key: str, max_items: int = 256) -> dict:
        value = d.get(key)
        if not (isinstance(value, dict) and 0 < len(value) <= max_items):
            self.fail(key, f"must be an object of 1 to {max_items} entries, got {_show(value)}")
        return value


def _show(value: Any) -> str:
    """A short description of a JSON value for an error message."""
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)[:30]
    if isinstance(value, str):
        return repr(value[:30])
    return f"{type(value).__name__} of {len(value)} entries"
