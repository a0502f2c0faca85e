"""The corpus of ``scripts/bench_traffic.py``: English text phonemised and chunked as the API
chunks text (or read pre-phonemised, ``--write-phonemes``), and the pieces drawn from its chunks:
word prefixes, consecutive chunks joined, and pieces of distinct token counts."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kokoro_gpu.text.chunking import MAX_PHONEMES, piece_chunks, speakable, split_paragraphs

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "traffic_corpus.txt"
PHONEMES = ROOT / "tests" / "data" / "traffic_phonemes.json"  # CORPUS phonemised (--write-phonemes)


def phonemize_corpus(text: str, lang: str = "a") -> list[str]:
    """The corpus's chunks' phonemes: each line chunked as KokoroTTS chunks a piece of text."""
    from kokoro_gpu.text.g2p import front_end

    g2p = front_end(lang)
    return [c.phonemes for line in split_paragraphs(text) for c in piece_chunks(line, g2p, MAX_PHONEMES)]


def load_phonemes(path: Path) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    chunks = data["chunks"] if isinstance(data, dict) else data
    if not chunks or not all(isinstance(c, str) and c.strip() for c in chunks):
        raise SystemExit(f"{path}: expected a JSON object with 'chunks', a list of phoneme strings")
    return chunks


def joined_pairs(chunks: Sequence[str], limit: int) -> list[str]:
    """Consecutive chunks joined (a two-sentence paragraph is one chunk) where they fit `limit`."""
    pairs = (f"{a} {b}" for a, b in itertools.pairwise(chunks))
    return [p for p in pairs if len(p) <= limit]


def word_prefixes(chunks: Sequence[str]) -> list[str]:
    """Each chunk's word prefixes (ending in '.' where the prefix ends mid-sentence): more real shapes."""
    pieces = []
    for chunk in chunks:
        words = chunk.split()
        for k in range(1, len(words)):
            prefix = " ".join(words[:k])
            pieces.append(prefix if prefix[-1] in ".!?,;:" else prefix + ".")
    return [p for p in pieces if speakable(p)]


def pick_distinct_lengths(
    pieces: Sequence[str], used: set[int], count: int, rng: np.random.Generator
) -> list[str]:
    """`count` pieces in random order, token counts (len + 2) not in `used` and distinct where possible."""
    order = rng.permutation(len(pieces))
    fresh, repeats, seen = [], [], set(used)
    for i in order:
        n = len(pieces[i]) + 2
        (repeats if n in seen else fresh).append(pieces[i])
        seen.add(n)
    return (fresh + repeats)[:count]
