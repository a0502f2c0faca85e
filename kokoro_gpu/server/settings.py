"""The server's settings and the ``kokoro-serve`` command line that fills them."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from ..api import DEFAULT_MODEL, DEFAULT_VOICE
from ..backends import DEVICES, PRECISIONS
from ..checkpoint import default_model

STRICT_MAX_INPUT_CHARS = 4096  # OpenAI's limit
DEFAULT_MAX_INPUT_CHARS = 20000
API_KEY_ENV = "KOKORO_API_KEY"


@dataclass
class ServerSettings:
    """What ``create_app`` needs; every limit a client could push against is here."""

    model: str = DEFAULT_MODEL
    device: str = "auto"
    precision: str = "fp32"
    host: str = "127.0.0.1"
    port: int = 8880
    local_files_only: bool = False
    default_voice: str | None = None  # None: the model's (af_heart where it has it)
    api_key: str | None = None
    # Input and request bounds.
    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS
    max_body_bytes: int = 256 * 1024
    max_streams: int = 256
    request_timeout_s: float = 300.0
    # Scheduling: chunks queued at most, chunks per backend call and calls at once (None: the device's
    # defaults),
    # the idle gather window, and how many of a stream's chunks are queued ahead of the one playing.
    max_queue: int = 4096
    max_batch: int | None = None
    lanes: int | None = None
    gather_ms: float = 2.0
    lookahead: int = 2
    # Text front-end processes (None: one per core) and their warm-up languages.
    g2p_workers: int | None = None
    warm_langs: tuple[str, ...] = ("a",)
    deterministic: bool = False
    graceful_timeout_s: float = 30.0
    log_level: str = "info"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kokoro-serve",
        description="An OpenAI-compatible speech server (POST /v1/audio/speech) batching concurrent "
        "requests on one model.",
    )
    p.add_argument("--model", default=None,
                   help=f"hub repo id, local model directory or file, or kokoro-onnx-int8 "
                   f"(default: {DEFAULT_MODEL}, or kokoro-onnx-int8 where the hub is unreachable)")
    p.add_argument("--ray", action="store_true", help="serve through Ray Serve, one replica per GPU "
                   "(pip install 'kokoro-gpu[ray]'; its options: python -m kokoro_gpu.ray_serve --help)")
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8880)
    p.add_argument("--local-files-only", action="store_true", help="never download from the hub")
    p.add_argument("--default-voice", default=None,
                   help=f"voice when a request names none (default: {DEFAULT_VOICE} where the model has it, "
                   "else its first)")
    p.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV} if set, else open)")
    p.add_argument("--strict", action="store_true",
                   help=f"OpenAI's limits: at most {STRICT_MAX_INPUT_CHARS} input characters")
    p.add_argument("--max-input-chars", type=_positive_int, default=None,
                   help=f"longest input accepted (default {DEFAULT_MAX_INPUT_CHARS}; "
                   f"{STRICT_MAX_INPUT_CHARS} with --strict)")
    p.add_argument("--max-body-bytes", type=_positive_int, default=256 * 1024)
    p.add_argument("--max-streams", type=_positive_int, default=256,
                   help="concurrent speech responses; more get 429 with Retry-After")
    p.add_argument("--max-queue", type=_positive_int, default=4096, help="chunks waiting for the model")
    p.add_argument("--max-batch", type=_positive_int, default=None,
                   help="chunks per model call (default 16 on CUDA, 1 on CPU)")
    p.add_argument("--lanes", type=_positive_int, default=None,
                   help="model calls at once (default: the CUDA engine's lanes; --lanes 1 --max-batch 1: "
                   "one request at a time)")
    p.add_argument("--gather-ms", type=float, default=2.0,
                   help="with one lane, how long an idle model waits for more chunks to batch with the first")
    p.add_argument("--lookahead", type=_positive_int, default=2,
                   help="chunks of one stream queued ahead of the one being sent")
    p.add_argument("--request-timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--g2p-workers", type=_positive_int, default=None,
                   help="text front-end processes (default: one per core)")
    p.add_argument("--deterministic", action="store_true",
                   help="zero the generator's random phases and noise (reproducible audio)")
    p.add_argument("--graceful-timeout", type=float, default=30.0,
                   help="seconds to let in-flight streams finish on shutdown")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    return p


def settings_from_args(argv: list[str] | None = None) -> ServerSettings:
    return settings_from_namespace(build_parser().parse_args(argv))


def settings_from_namespace(args: argparse.Namespace) -> ServerSettings:
    """Settings from ``build_parser()``'s options as parsed (by it or by a parser that has them all)."""
    model = args.model
    if model is None:
        model, notice = default_model(local_files_only=args.local_files_only)
        if notice is not None:
            print(f"kokoro-serve: {notice}", file=sys.stderr)
    max_input = args.max_input_chars or (STRICT_MAX_INPUT_CHARS if args.strict else DEFAULT_MAX_INPUT_CHARS)
    return ServerSettings(
        model=model,
        device=args.device,
        precision=args.precision,
        host=args.host,
        port=args.port,
        local_files_only=args.local_files_only,
        default_voice=args.default_voice,
        api_key=args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None,
        max_input_chars=max_input,
        max_body_bytes=args.max_body_bytes,
        max_streams=args.max_streams,
        request_timeout_s=args.request_timeout,
        max_queue=args.max_queue,
        max_batch=args.max_batch,
        lanes=args.lanes,
        gather_ms=args.gather_ms,
        lookahead=args.lookahead,
        g2p_workers=args.g2p_workers,
        deterministic=args.deterministic,
        graceful_timeout_s=args.graceful_timeout,
        log_level=args.log_level,
    )
