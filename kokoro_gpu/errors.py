"""Exception types a user of kokoro_gpu can catch.

Every failure a caller can cause is raised as one of these, with a one-line
message saying what is wrong and what to do about it. The base class enforces
the "one line" part for every message, whatever a file or argument put in it:
control characters become spaces and a long message keeps its head and its
tail (where the advice is) around an ellipsis.
"""

from __future__ import annotations

import re

MAX_MESSAGE_CHARS = 1000  # room for a layout error naming a few tensors of each kind
_TAIL_CHARS = 200  # of a shortened message, kept from its end (the advice)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]+")


def one_line(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` without control characters or lone surrogates, at most ``limit`` characters."""
    text = _CONTROL.sub(" ", message).strip()
    if len(text) <= limit:
        return text
    head = limit - _TAIL_CHARS - len(" ... ")
    return f"{text[:head].rstrip()} ... {text[-_TAIL_CHARS:].lstrip()}"


class KokoroError(Exception):
    """Base class of every error kokoro_gpu raises on purpose; its message is one capped line."""

    def __init__(self, *args: object) -> None:
        if args:
            args = (one_line(str(args[0])), *args[1:])
        super().__init__(*args)


class CheckpointError(KokoroError):
    """A checkpoint file is missing, truncated, foreign or of the wrong layout."""


class ConfigError(CheckpointError):
    """A config.json value is missing, of the wrong type or out of range."""


class VoiceError(KokoroError):
    """A voice name, path, mix expression or array cannot be used."""


class InputError(KokoroError, ValueError):
    """Text, phonemes, speed or another call argument is invalid."""


class BackendError(KokoroError):
    """The requested compute backend (device) is unavailable or failed."""


class QueueFullError(KokoroError):
    """The synthesis queue is at its bound; retry after a moment (a server answers 429)."""
