"""A speech request: its JSON body read within bounds, checked field by field, its voice resolved."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import Request

from ..api import KokoroTTS, choose_lang
from ..errors import KokoroError, VoiceError
from ..voices import parse_mix
from .encoders import FORMATS
from .errors import ApiError
from .settings import ServerSettings

MODELS = ("kokoro", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
STREAM_FORMATS = ("audio", "sse")
MIN_SPEED, MAX_SPEED = 0.25, 4.0
_MAX_VOICE_CHARS = 200
_MAX_SEED = 2**63 - 1
# OpenAI's voices, each with the Kokoro voices it maps to, first that the model has.
OPENAI_VOICES: dict[str, tuple[str, ...]] = {
    "alloy": ("af_alloy", "af_heart"),
    "ash": ("am_adam", "am_michael"),
    "ballad": ("bm_lewis", "bm_george"),
    "coral": ("af_kore", "af_bella"),
    "echo": ("am_echo", "am_michael"),
    "fable": ("bm_fable", "bf_emma"),
    "onyx": ("am_onyx", "am_adam"),
    "nova": ("af_nova", "af_bella"),
    "sage": ("af_sarah", "af_heart"),
    "shimmer": ("af_sky", "af_bella"),
    "verse": ("am_puck", "am_liam"),
    "marin": ("af_heart", "af_bella"),
    "cedar": ("am_michael", "am_adam"),
}
_KNOWN_FIELDS = frozenset({"model", "input", "voice", "response_format", "speed", "stream_format",
                           "instructions", "lang", "seed", "stream"})


@dataclass(frozen=True)
class SpeechJob:
    """A checked request: what to say, with which voice pack and language, and how to send it."""

    text: str
    voice: str
    pack: np.ndarray
    lang: str
    speed: float
    response_format: str
    stream_format: str
    seed: int | None
    stream: bool
    timestamps: bool = False  # word timestamps with the audio (the captioned routes)


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object, refusing more than ``limit`` bytes before reading them all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {declared} bytes is over the limit of {limit}",
                       code="body_too_large")
    body = bytearray()
    async for part in request.stream():
        body.extend(part)
        if len(body) > limit:
            raise ApiError(413, f"request body is over the limit of {limit} bytes", code="body_too_large")
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApiError(400, f"the body is not valid JSON ({e}); send a JSON object",
                       code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object with 'model', 'input' and 'voice'",
                       code="invalid_json")
    return data


def _field(data: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = data.get(name, default)
    if value is None:
        return default
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ApiError(400, f"'{name}' must be a {_kind_name(kind)}, got {type(value).__name__}",
                       param=name, code="invalid_type")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({str: "string", int: "integer", float: "number", bool: "boolean"}[k] for k in kinds)


def resolve_voice(spec: str, available: Sequence[str]) -> list[tuple[str, float]]:
    """A voice name or mix -> [(name, weight)], each name from the model's list ``available`` (or an
    OpenAI name mapped to one): a request names voices, never files."""
    if not spec.strip():
        raise ApiError(400, "'voice' is empty; pick one from GET /v1/audio/voices", param="voice",
                       code="invalid_voice")
    if len(spec) > _MAX_VOICE_CHARS:
        raise ApiError(400, f"'voice' is longer than {_MAX_VOICE_CHARS} characters", param="voice",
                       code="invalid_voice")
    try:
        terms = parse_mix(spec)
    except VoiceError as e:
        raise ApiError(400, str(e), param="voice", code="invalid_voice") from None
    resolved = []
    for name, weight in terms:
        if name not in available and name.lower() in OPENAI_VOICES:
            mapped = next((v for v in OPENAI_VOICES[name.lower()] if v in available), None)
            if mapped is None:
                raise ApiError(400, f"voice {name!r} maps to {' or '.join(OPENAI_VOICES[name.lower()])}, "
                               "which this model does not have; pick one from GET /v1/audio/voices",
                               param="voice", code="voice_not_found")
            name = mapped
        if name not in available:
            shown = ", ".join(available[:12]) + (", ..." if len(available) > 12 else "")
            raise ApiError(400, f"unknown voice {name!r}; this model has: {shown}", param="voice",
                           code="voice_not_found")
        resolved.append((name, weight))
    return resolved


def mix_spec(terms: list[tuple[str, float]]) -> str:
    """[(name, weight)] -> ``name(w)+...``, the voice as a response reports it."""
    return "+".join(f"{name}({weight:g})" for name, weight in terms)


def parse_speech(data: dict[str, Any], tts: KokoroTTS, voices: Sequence[str],
                 settings: ServerSettings) -> SpeechJob:
    """Check every field of a speech request; raise ``ApiError`` (400) naming the first bad one.

    ``voices`` is the model's voice list (``tts.list_voices()``, read once at start-up)."""
    model = _field(data, "model", str, None)
    if model is None:
        raise ApiError(400, f"'model' is required; use one of {', '.join(MODELS)}", param="model",
                       code="missing_required_parameter")
    if model not in MODELS:
        raise ApiError(400, f"unknown model {model!r}; use one of {', '.join(MODELS)}", param="model",
                       code="model_not_found")
    text = _field(data, "input", str, None)
    if text is None or not text.strip():
        raise ApiError(400, "'input' is missing or empty; pass the text to speak", param="input",
                       code="missing_required_parameter" if text is None else "empty_input")
    if len(text) > settings.max_input_chars:
        raise ApiError(400, f"'input' has {len(text)} characters; the limit is {settings.max_input_chars}",
                       param="input", code="input_too_long")
    fmt = _field(data, "response_format", str, "mp3")
    if fmt not in FORMATS:
        raise ApiError(400, f"unknown response_format {fmt!r}; use one of {', '.join(FORMATS)}",
                       param="response_format", code="invalid_value")
    stream_format = _field(data, "stream_format", str, "audio")
    if stream_format not in STREAM_FORMATS:
        raise ApiError(400, f"unknown stream_format {stream_format!r}; use audio or sse",
                       param="stream_format", code="invalid_value")
    speed = float(_field(data, "speed", (int, float), 1.0))
    if not (math.isfinite(speed) and MIN_SPEED <= speed <= MAX_SPEED):
        raise ApiError(400, f"'speed' must be between {MIN_SPEED} and {MAX_SPEED}, got {speed:g}",
                       param="speed", code="invalid_value")
    seed = _field(data, "seed", int, None)
    if seed is not None and not 0 <= seed <= _MAX_SEED:
        raise ApiError(400, f"'seed' must be between 0 and {_MAX_SEED}", param="seed", code="invalid_value")
    _field(data, "instructions", str, None)  # accepted and ignored: Kokoro takes no style prompt
    default_voice = settings.default_voice or tts.default_voice
    terms = resolve_voice(_field(data, "voice", str, default_voice), voices)
    voice = mix_spec(terms)
    lang_arg = _field(data, "lang", str, None)
    try:
        pack = tts.voices.mix(terms)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a voice read in another language is the client's choice
            lang = choose_lang(voice, lang_arg)
    except KokoroError as e:
        param = "lang" if lang_arg is not None and "lang" in str(e).lower() else "voice"
        raise ApiError(400, str(e), param=param, code="invalid_value") from None
    return SpeechJob(text=text, voice=voice, pack=pack, lang=lang, speed=speed, response_format=fmt,
                     stream_format=stream_format, seed=seed, stream=bool(_field(data, "stream", bool, True)))


def unknown_fields(data: dict[str, Any]) -> list[str]:
    """Fields this server ignores (logged, not refused: newer clients send newer fields)."""
    return sorted(set(data) - _KNOWN_FIELDS)
