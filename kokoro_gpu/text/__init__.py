"""Text front end: phonemizers per language, chunking to the model's limit, word timestamps."""

from .chunking import MAX_PHONEMES, Chunk, WordSpan, chunk_words, split_paragraphs, text_pieces
from .g2p import LANG_NAMES, Word, front_end, phonemize, resolve_lang
from .normalize import Normalization, normalize_text
from .timestamps import WordTimestamp, word_timestamps

__all__ = [
    "LANG_NAMES",
    "MAX_PHONEMES",
    "Chunk",
    "Normalization",
    "Word",
    "WordSpan",
    "WordTimestamp",
    "chunk_words",
    "front_end",
    "normalize_text",
    "phonemize",
    "resolve_lang",
    "split_paragraphs",
    "text_pieces",
    "word_timestamps",
]
