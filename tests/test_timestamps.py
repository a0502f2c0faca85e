"""Word timestamps from durations: token i is phoneme character i - 1, a frame is 0.025 s."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kokoro_gpu.text.chunking import WordSpan
from kokoro_gpu.text.timestamps import FRAME_SECONDS, WordTimestamp, word_timestamps

VOCAB = {c: i for i, c in enumerate("abcdefg .,", start=1)}


def test_frame_is_600_samples():
    assert FRAME_SECONDS == pytest.approx(600 / 24000)


def test_words_span_their_tokens():
    phonemes = "ab cde."
    # boundary, a, b, ' ', c, d, e, '.', boundary
    durations = np.array([3, 2, 4, 1, 5, 1, 2, 6, 7])
    spans = [WordSpan("ab", 0, 2), WordSpan("cde", 3, 6)]
    (ab, cde) = word_timestamps(spans, phonemes, durations, VOCAB)
    assert (ab.word, ab.start, ab.end) == ("ab", pytest.approx(3 * 0.025), pytest.approx(9 * 0.025))
    assert (cde.start, cde.end) == (pytest.approx(10 * 0.025), pytest.approx(18 * 0.025))


def test_dropped_characters_take_no_time():
    # "X" is not in the vocab: the model never sees it, so "b" is token 2, not 3.
    phonemes = "aXb c"
    durations = np.array([1, 2, 3, 4, 5, 6])  # boundary, a, b, ' ', c, boundary
    spans = [WordSpan("aXb", 0, 3), WordSpan("c", 4, 5), WordSpan("X", 1, 2)]
    with_x = word_timestamps(spans, phonemes, durations, VOCAB)
    assert [w.word for w in with_x] == ["aXb", "c"]  # a word of dropped characters only is left out
    assert (with_x[0].start, with_x[0].end) == (pytest.approx(0.025), pytest.approx(6 * 0.025))
    assert (with_x[1].start, with_x[1].end) == (pytest.approx(10 * 0.025), pytest.approx(15 * 0.025))


def test_offset_is_added():
    durations = np.array([1, 2, 1])
    (w,) = word_timestamps([WordSpan("a", 0, 1)], "a", durations, VOCAB, offset=10.0)
    assert (w.start, w.end) == (pytest.approx(10.025), pytest.approx(10.075))


def test_monotonic_and_within_audio():
    rng = np.random.default_rng(0)
    phonemes = " ".join("abc"[: rng.integers(1, 4)] for _ in range(40))
    spans, pos = [], 0
    for word in phonemes.split(" "):
        spans.append(WordSpan(word, pos, pos + len(word)))
        pos += len(word) + 1
    durations = rng.integers(1, 9, size=len(phonemes) + 2)
    stamps = word_timestamps(spans, phonemes, durations, VOCAB)
    assert len(stamps) == 40
    assert all(w.start < w.end for w in stamps)
    assert all(a.end <= b.start for a, b in itertools.pairwise(stamps))
    assert stamps[0].start >= durations[0] * 0.025
    assert stamps[-1].end <= (durations.sum() - durations[-1]) * 0.025 + 1e-9


def test_durations_must_match_the_phonemes():
    with pytest.raises(ValueError, match="durations"):
        word_timestamps([WordSpan("a", 0, 1)], "ab", np.array([1, 1, 1]), VOCAB)


def test_times_are_whole_milliseconds() -> None:
    # 8 frames after an offset of 0.1 s: 0.1 + 0.2 is 0.30000000000000004 in floating point.
    durations = np.array([8, 1, 1])
    (w,) = word_timestamps([WordSpan("a", 0, 1)], "a", durations, VOCAB, offset=0.1)
    assert (repr(w.start), repr(w.end)) == ("0.3", "0.325")
    stamp = WordTimestamp("x", 0.05 + 0.025, 0.07500000000000001)
    assert (repr(stamp.start), repr(stamp.end)) == ("0.075", "0.075")
