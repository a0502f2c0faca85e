"""Splitting phonemised text into chunks the model accepts (at most 510 phonemes).

Lines are synthesised separately (a line break is a pause), except that a line
continuing a sentence in lower case is joined to the one before: hard-wrapped
prose reads as prose. Within a line, words are packed greedily; when the next
word would overflow a chunk, the chunk is cut after its last sentence end, or
failing that its last clause end (``:;``), then phrase end (``,`` and dash),
then between words, taking the strongest cut that leaves the rest room to fit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from .g2p import Word

MAX_PHONEMES = 510
# Cut levels, strongest first: what the last phoneme of a word ends with.
_CUT_LEVELS = (".!?\u2026", ":;", ",\u2014")
# Closing marks that stay with the sentence they close.
_CLOSERS = ")\"\u201d"
_LINE_END_PUNCT = ".!?:;\u2026\u3002\uff01\uff1f"
# Phoneme characters that make no sound of their own.
_SILENT = frozenset(";:,.!?\u00a1\u00bf\u2014\u2026\"\u00ab\u00bb\u201c\u201d()")
# Longest piece of a line handed to the front end at once: far below spaCy's
# one-million-character document limit, and memory stays in proportion to it.
MAX_LINE_CHARS = 5000
# Where a long line may be split, strongest first: after a sentence end, a clause
# or phrase mark, any space (each followed by whitespace).
_LINE_CUTS = (re.compile(r"[.!?\u2026\u3002\uff01\uff1f][\"')\]\u201d]*\s"), re.compile(r"[;:,]\s"),
              re.compile(r"\s"))


@dataclass(frozen=True)
class WordSpan:
    """A spoken word and its character span ``[start, end)`` in its chunk's phoneme string."""

    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Chunk:
    """One model call's worth of text: its graphemes, phonemes and word spans."""

    text: str
    phonemes: str
    words: tuple[WordSpan, ...]


def split_paragraphs(text: str) -> list[str]:
    """Text -> lines to synthesise separately; blank lines dropped, wrapped sentences rejoined."""
    lines: list[str] = []
    continues = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continues = False
            continue
        if continues and line[0].islower():
            lines[-1] = f"{lines[-1]} {line}"
        else:
            lines.append(line)
        continues = lines[-1][-1] not in _LINE_END_PUNCT
    return lines


# The first sentence: up to the first sentence end followed by a space (closing quotes stay with it).
_FIRST_SENTENCE = re.compile(r".+?[.!?\u2026]+[\"')\]\u201d]*(?=\s)", re.S)


def text_pieces(text: str) -> list[str]:
    """Text -> pieces phonemised and chunked separately: the first sentence alone, the rest of its line,
    then each further line (``split_paragraphs``).

    The first sentence alone makes the first chunk short, so a stream's first audio waits for one
    sentence rather than for a chunk of up to 510 phonemes.
    """
    lines = split_paragraphs(text)
    if not lines:
        return []
    m = _FIRST_SENTENCE.match(lines[0])
    if m is None or not lines[0][m.end() :].strip():
        return lines
    return [m.group().strip(), lines[0][m.end() :].strip(), *lines[1:]]


def piece_chunks(
    piece: str, g2p: Callable[[str], Sequence[Word]], limit: int = MAX_PHONEMES
) -> Iterator[Chunk]:
    """One piece of ``text_pieces`` -> its chunks with something to say, part by part.

    A long line reaches the front end in parts (``split_long_line``): its tagger's cost grows with
    the part. Chunks of punctuation alone are dropped.
    """
    for part in split_long_line(piece):
        yield from (c for c in chunk_words(g2p(part), limit) if speakable(c.phonemes))


def split_long_line(line: str, limit: int = MAX_LINE_CHARS) -> Iterator[str]:
    """A line in pieces of at most ``limit`` characters, cut at the strongest boundary in each."""
    rest = line
    while len(rest) > limit:
        window = rest[: limit + 1]
        cut = limit
        for pattern in _LINE_CUTS:
            ends = [m.end() for m in pattern.finditer(window)]
            if ends and ends[-1] > 1:
                cut = ends[-1]
                break
        piece, rest = rest[:cut].strip(), rest[cut:].lstrip()
        if piece:
            yield piece
    if rest.strip():
        yield rest.strip()


def speakable(phonemes: str) -> bool:
    """Whether a phoneme string has anything to say besides punctuation and spaces."""
    return any(not c.isspace() and c not in _SILENT for c in phonemes)


def _phoneme_string(words: Sequence[Word]) -> str:
    return "".join(w.phonemes + (" " if w.space else "") for w in words).strip()


def _cut_level(word: Word) -> int | None:
    end = word.phonemes.rstrip(_CLOSERS)[-1:]
    return next((i for i, marks in enumerate(_CUT_LEVELS) if end and end in marks), None)


def _cut(words: Sequence[Word], incoming: Word, limit: int) -> int:
    """Where to end the chunk ``words`` so that the rest plus ``incoming`` fits in ``limit``."""
    for level in range(len(_CUT_LEVELS)):
        ends = [i for i, w in enumerate(words) if _cut_level(w) is not None and _cut_level(w) <= level]
        if not ends:
            continue
        z = ends[-1] + 1
        while z < len(words) and words[z].phonemes and not words[z].phonemes.strip(_CLOSERS):
            z += 1  # a lone closing bracket or quote belongs to the sentence before it
        if len(_phoneme_string([*words[z:], incoming])) <= limit:
            return z
    return len(words)


def _fit(word: Word, limit: int) -> list[Word]:
    """A word longer than ``limit`` (a run of digits, a pasted hash) in pieces that fit."""
    if len(word.phonemes) <= limit:
        return [word]
    pieces = [word.phonemes[i : i + limit] for i in range(0, len(word.phonemes), limit)]
    last = len(pieces) - 1
    return [Word(word.text, p, space=word.space and i == last) for i, p in enumerate(pieces)]


def _make_chunk(words: Sequence[Word]) -> Chunk:
    spans = []
    pos = 0
    prefix = ""
    raw = "".join(w.phonemes + (" " if w.space else "") for w in words)
    lead = len(raw) - len(raw.lstrip())
    for w in words:
        if w.phonemes and any(c.isalnum() for c in w.text):
            spans.append(WordSpan(prefix + w.text, pos - lead, pos - lead + len(w.phonemes)))
            prefix = ""
        elif not w.phonemes and not w.space:
            prefix += w.text  # a silent sign glued to the next word: "$" of "$5"
        pos += len(w.phonemes) + (1 if w.space else 0)
    text = "".join(w.text + (" " if w.space else "") for w in words).strip()
    return Chunk(text=text, phonemes=raw.strip(), words=tuple(spans))


def chunk_words(words: Sequence[Word], limit: int = MAX_PHONEMES) -> list[Chunk]:
    """Pack words into chunks of at most ``limit`` phonemes, cutting at the strongest boundary."""
    chunks = []
    current: list[Word] = []
    for word in (piece for w in words for piece in _fit(w, limit)):
        if current and len(_phoneme_string([*current, word])) > limit:
            z = _cut(current, word, limit)
            chunks.append(_make_chunk(current[:z]))
            current = current[z:]
        current.append(word)
    if current:
        chunks.append(_make_chunk(current))
    return [c for c in chunks if c.phonemes]
