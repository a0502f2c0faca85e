"""Phoneme strings to token ids, as the reference tokenises them."""

from __future__ import annotations

import warnings

import numpy as np

from .errors import InputError


def phonemes_to_ids(phonemes: str, vocab: dict[str, int], max_phonemes: int) -> np.ndarray:
    """Map each character through ``vocab`` and wrap in boundary tokens: int64 ``[0, ids..., 0]``.

    Characters outside the vocab are dropped with a warning (the reference drops
    them silently). Empty input, input with no known phoneme, or more than
    ``max_phonemes`` phonemes raise InputError.
    """
    if not isinstance(phonemes, str):
        raise InputError(f"phonemes must be a str, got {type(phonemes).__name__}")
    if not phonemes.strip():
        raise InputError("phonemes are empty; pass at least one phoneme")
    ids = [vocab[c] for c in phonemes if c in vocab]
    unknown = sorted({c for c in phonemes if c not in vocab})
    if unknown:
        shown = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in unknown[:8])
        warnings.warn(
            f"dropped {len(phonemes) - len(ids)} phoneme character(s) not in the vocab: {shown}", stacklevel=3
        )
    if not ids:
        raise InputError("none of the phoneme characters is in the model's vocab; pass IPA phonemes")
    if len(ids) > max_phonemes:
        raise InputError(
            f"{len(ids)} phonemes exceed the model's limit of {max_phonemes}; "
            "KokoroTTS.synthesize splits longer input into chunks"
        )
    return np.array([0, *ids, 0], dtype=np.int64)
