"""Exception types a user of kokoro_gpu can catch.

Every failure a caller can cause is raised as one of these, with a one-line
message saying what is wrong and what to do about it.
"""


class KokoroError(Exception):
    """Base class of every error kokoro_gpu raises on purpose."""


class CheckpointError(KokoroError):
    """A checkpoint file is missing, truncated, foreign or of the wrong layout."""


class VoiceError(KokoroError):
    """A voice name, path, mix expression or array cannot be used."""


class InputError(KokoroError, ValueError):
    """Text, phonemes, speed or another call argument is invalid."""


class BackendError(KokoroError):
    """The requested compute backend (device) is unavailable or failed."""


class QueueFullError(KokoroError):
    """The synthesis queue is at its bound; retry after a moment (a server answers 429)."""
