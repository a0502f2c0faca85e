"""Word timestamps from predicted durations.

The model reads ``[0, ids..., 0]``: token ``i`` (1-based) is the ``i``-th
phoneme character that is in the vocab (characters outside it are dropped,
so they take no time), and token ``i`` lasts ``durations[i]`` frames of 600
samples (0.025 s at 24 kHz). A word runs from the first frame of its first
phoneme to the last frame of its last one; the pauses between words (spaces,
punctuation, the boundary tokens) belong to no word.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..config import SAMPLE_RATE, SAMPLES_PER_FRAME
from .chunking import WordSpan

FRAME_SECONDS = SAMPLES_PER_FRAME / SAMPLE_RATE


@dataclass(frozen=True)
class WordTimestamp:
    """A word and when it is spoken, in seconds from the start of the audio, rounded to milliseconds.

    Frames are 25 ms, so the rounding loses nothing; it keeps sums such as
    0.05 + 0.025 from printing as ``0.07500000000000001``.
    """

    word: str
    start: float
    end: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", round(float(self.start), 3))
        object.__setattr__(self, "end", round(float(self.end), 3))


def word_timestamps(
    spans: Sequence[WordSpan],
    phonemes: str,
    durations: np.ndarray,
    vocab: Mapping[str, int],
    offset: float = 0.0,
) -> list[WordTimestamp]:
    """Timestamps of ``spans`` (character spans in ``phonemes``) given the chunk's ``durations``.

    ``offset`` (seconds) is added to every time: the start of this chunk in a
    longer synthesis. Words with no phoneme in the vocab are left out.
    """
    token_of_char = np.cumsum([c in vocab for c in phonemes], dtype=np.int64)
    kept = np.array([c in vocab for c in phonemes], dtype=bool)
    if len(durations) != int(token_of_char[-1] if len(phonemes) else 0) + 2:
        raise ValueError(
            f"{len(durations)} durations for {len(phonemes)} phoneme characters: "
            "pass the durations of this chunk's synthesis"
        )
    # edges[t] is the first frame of token t; edges[t + 1] its end.
    edges = np.concatenate([[0], np.cumsum(durations)])
    result = []
    for span in spans:
        tokens = token_of_char[span.start : span.end][kept[span.start : span.end]]
        if tokens.size == 0:
            continue
        start = offset + float(edges[tokens[0]]) * FRAME_SECONDS
        end = offset + float(edges[tokens[-1] + 1]) * FRAME_SECONDS
        result.append(WordTimestamp(span.text, start, end))
    return result
