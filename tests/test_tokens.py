"""Phoneme strings to token ids, and the bad inputs a caller can give (issue: foundation)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kokoro_gpu.api import check_speed
from kokoro_gpu.config import ModelConfig
from kokoro_gpu.errors import InputError
from kokoro_gpu.tokens import phonemes_to_ids

CONFIG = ModelConfig.load()
VOCAB = CONFIG.vocab


def test_ids_follow_the_vocab_with_boundary_tokens() -> None:
    # "h\u0259l\u02c8O" (hel-LO): ids written out from config.json's vocab.
    ids = phonemes_to_ids("h\u0259l\u02c8O", VOCAB, CONFIG.max_phonemes)
    assert ids.dtype == np.int64
    assert ids.tolist() == [0, 50, 83, 54, 156, 31, 0]


def test_unknown_characters_are_dropped_with_a_warning() -> None:
    with pytest.warns(UserWarning, match=r"dropped 2 .*'#'.*U\+00A7"):
        ids = phonemes_to_ids("a#b\u00a7", VOCAB, CONFIG.max_phonemes)
    assert ids.tolist() == [0, VOCAB["a"], VOCAB["b"], 0]


@pytest.mark.parametrize("phonemes", ["", "   ", "\n"])
def test_empty_phonemes_are_an_input_error(phonemes: str) -> None:
    with pytest.raises(InputError, match="empty"):
        phonemes_to_ids(phonemes, VOCAB, CONFIG.max_phonemes)


def test_phonemes_all_outside_the_vocab_are_an_input_error() -> None:
    with pytest.warns(UserWarning), pytest.raises(InputError, match="none of the phoneme"):
        phonemes_to_ids("###", VOCAB, CONFIG.max_phonemes)


def test_non_string_phonemes_are_an_input_error() -> None:
    with pytest.raises(InputError, match="must be a str"):
        phonemes_to_ids(["a"], VOCAB, CONFIG.max_phonemes)  # type: ignore[arg-type]


def test_the_510_phoneme_limit() -> None:
    assert len(phonemes_to_ids("a" * 510, VOCAB, CONFIG.max_phonemes)) == 512
    with pytest.raises(InputError, match="511 phonemes exceed the model's limit of 510"):
        phonemes_to_ids("a" * 511, VOCAB, CONFIG.max_phonemes)


@pytest.mark.parametrize("speed", [0, -1.0, math.nan, math.inf, -math.inf, "fast", None])
def test_bad_speeds_are_input_errors(speed: object) -> None:
    with pytest.raises(InputError, match="speed"):
        check_speed(speed)  # type: ignore[arg-type]


def test_good_speed_passes_through() -> None:
    assert check_speed(1.3) == 1.3
    assert check_speed(2) == 2.0
