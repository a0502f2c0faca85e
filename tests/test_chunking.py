"""Chunking phonemised text to the model's 510-phoneme limit."""

from __future__ import annotations

import pytest

from kokoro_gpu.text.chunking import MAX_PHONEMES, chunk_words, split_paragraphs
from kokoro_gpu.text.g2p import Word, front_end


def _words(spec: str) -> list[Word]:
    """'aa bb, cc.' -> words whose phonemes equal their text (punctuation attached)."""
    return [Word(w, w) for w in spec.split()]


def test_short_input_is_one_chunk():
    chunks = chunk_words(_words("aa bb, cc."))
    assert len(chunks) == 1
    assert chunks[0].phonemes == "aa bb, cc."
    spans = [(s.text, s.start, s.end) for s in chunks[0].words]
    assert spans == [("aa", 0, 2), ("bb,", 3, 6), ("cc.", 7, 10)]


def test_limit_is_respected_and_nothing_is_lost():
    words = _words(" ".join(f"w{i:03d}" for i in range(300)))
    chunks = chunk_words(words, limit=50)
    assert all(len(c.phonemes) <= 50 for c in chunks)
    assert " ".join(c.phonemes for c in chunks) == " ".join(w.phonemes for w in words)
    # Greedy: every chunk but the last is full up to one more word.
    assert all(len(c.phonemes) + 5 > 50 for c in chunks[:-1])


def test_cut_after_last_sentence_end():
    # 'aaaa. bbbb, cccc' + 'dddd' overflows 20: the cut goes after the sentence, not the comma.
    chunks = chunk_words(_words("aaaa. bbbb, cccc dddd"), limit=20)
    assert [c.phonemes for c in chunks] == ["aaaa.", "bbbb, cccc dddd"]


def test_clause_then_phrase_when_no_sentence_end_fits():
    assert [c.phonemes for c in chunk_words(_words("aa, bb; cc dd ee"), limit=12)] == ["aa, bb;", "cc dd ee"]
    assert [c.phonemes for c in chunk_words(_words("aa bb, cc dd ee"), limit=12)] == ["aa bb,", "cc dd ee"]


def test_sentence_cut_skipped_when_rest_would_not_fit():
    # Cutting after "a." would leave "bbbb cccc, dddd eeee" (20 > 19): fall back to the comma.
    chunks = chunk_words(_words("a. bbbb cccc, dddd eeee"), limit=19)
    assert [c.phonemes for c in chunks] == ["a. bbbb cccc,", "dddd eeee"]


def test_closing_quote_stays_with_its_sentence():
    words = [Word("aa", "aa", space=False), Word(".", ".", space=False), Word('"', "\u201d")]
    words += [Word("bb", "bb"), Word("cc", "cc")]
    chunks = chunk_words(words, limit=8)
    assert [c.phonemes for c in chunks] == ["aa.\u201d", "bb cc"]


def test_overlong_word_is_split():
    chunks = chunk_words([Word("x", "a" * 25), Word("y", "bb")], limit=10)
    assert all(len(c.phonemes) <= 10 for c in chunks)
    assert "".join(c.phonemes for c in chunks).replace(" ", "") == "a" * 25 + "bb"


def test_spans_index_the_chunk_phonemes():
    words = [Word("$", "", space=False), Word("5", "f\u02c8Iv"), Word(",", ","), Word("go", "\u0261\u02c8O")]
    (chunk,) = chunk_words(words)
    assert chunk.phonemes == "f\u02c8Iv , \u0261\u02c8O"
    # Punctuation is no word; the silent sign joins the word it is read with.
    assert [s.text for s in chunk.words] == ["$5", "go"]
    assert [chunk.phonemes[s.start : s.end] for s in chunk.words] == ["f\u02c8Iv", "\u0261\u02c8O"]


def test_leading_silent_word_does_not_shift_spans():
    (chunk,) = chunk_words([Word("\u201c", ""), Word("hi", "h\u02c8I", space=False)])
    assert chunk.phonemes == "h\u02c8I"
    assert [(s.start, s.end) for s in chunk.words] == [(0, 3)]


def test_real_text_chunks():
    g2p = front_end("a")
    sentence = "The quick brown fox jumps over the lazy dog, and then it rests; nobody minds at all. "
    words = g2p(sentence * 20)
    chunks = chunk_words(words)
    assert len(chunks) > 1
    assert all(0 < len(c.phonemes) <= MAX_PHONEMES for c in chunks)
    # Every chunk but the last ends a sentence (there is one within reach each time).
    assert all(c.phonemes.endswith(".") for c in chunks[:-1])
    assert sum(len(c.words) for c in chunks) == 20 * 17
    for c in chunks:
        for s in c.words:
            assert c.phonemes[s.start : s.end] and " " not in c.phonemes[s.start : s.end]


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("One.\nTwo.", ["One.", "Two."]),
        ("Chapter 1\nIt was dark.", ["Chapter 1", "It was dark."]),
        ("a hard-wrapped\nsentence goes on.\n\n  Next  ", ["a hard-wrapped sentence goes on.", "Next"]),
        ("\n\n", []),
    ],
)
def test_split_paragraphs(text, lines):
    assert split_paragraphs(text) == lines
