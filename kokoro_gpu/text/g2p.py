"""Text to phonemes, one front end per language.

English (``a`` US, ``b`` GB) goes through misaki's G2P and lexicons, with
espeak-ng (the library bundled by ``espeakng-loader``) for words outside the
lexicon. misaki's own constructor downloads spaCy's ``en_core_web_sm`` when it
is missing; that model is not on PyPI, so without it we build the G2P on
spaCy's blank English tokenizer and tag, by rule, exactly what misaki's lexicon
consults: punctuation, numbers and currency symbols, articles, ``to``, ``in``,
``I`` and the heteronyms of the gold lexicon.

English text is normalised first (``normalize.py``: URLs, e-mail addresses,
phone numbers, times, fractions, units, abbreviations) unless the caller turns
that off.

Spanish, French, Hindi, Italian and Brazilian Portuguese use misaki's espeak-ng
G2P; Japanese and Mandarin use misaki's extras when they are installed.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from .normalize import ALL, NONE, Normalization, normalize_text

logger = logging.getLogger("kokoro_gpu")

LANG_NAMES = {
    "a": "American English",
    "b": "British English",
    "e": "Spanish",
    "f": "French",
    "h": "Hindi",
    "i": "Italian",
    "p": "Brazilian Portuguese",
    "j": "Japanese",
    "z": "Mandarin Chinese",
}
ESPEAK_LANGUAGES = {"e": "es", "f": "fr-fr", "h": "hi", "i": "it", "p": "pt-br"}
LANG_ALIASES = {
    "en": "a",
    "en-us": "a",
    "en-gb": "b",
    "es": "e",
    "fr": "f",
    "fr-fr": "f",
    "hi": "h",
    "it": "i",
    "pt": "p",
    "pt-br": "p",
    "ja": "j",
    "zh": "z",
}
SPACY_MODEL = "en_core_web_sm"


def resolve_lang(lang: str) -> str:
    """A language code (``a``) or alias (``en-us``, ``en_US``) -> the one-letter code."""
    if not isinstance(lang, str):
        raise InputError(f"lang must be a str, got {type(lang).__name__}")
    key = lang.strip().lower().replace("_", "-")
    code = LANG_ALIASES.get(key, key)
    if code not in LANG_NAMES:
        known = ", ".join(f"{c} ({n})" for c, n in LANG_NAMES.items())
        raise InputError(f"unknown language {lang!r}; use one of {known} or an alias like en-us")
    return code


@dataclass(frozen=True)
class Word:
    """One token of phonemised text.

    ``text`` is what was written, ``phonemes`` what is spoken ('' for silent
    tokens such as a currency sign), ``space`` whether a space follows it in
    the phoneme string.
    """

    text: str
    phonemes: str
    space: bool = True


FrontEnd = Callable[[str], list[Word]]

# Words whose tag misaki's special cases read directly.
_DETERMINERS_ALWAYS = frozenset({"an", "the"})
# Context for the heteronym rules (lower case; the blank tokenizer splits
# "can't" into "ca" + "n't" and "we'll" into "we" + "'ll").
_NOUN_CONTEXT = frozenset(
    "a an the this that these those my your his her its our their some any no every each another "
    "one own whose of on for with from into about at without under over after before during".split()
)
_VERB_CONTEXT = frozenset(
    "to will would can could shall should may might must do does did please n't 'll 'd ca wo "
    # Adverbs that stand before a verb: "then record.", "always present it".
    "then also always never often sometimes usually just first finally".split()
)
_SUBJECTS = frozenset("i you we they he she it who".split())
_BE_HAVE = frozenset("have has had having 've been was were is are be being am 're 'm get got gets".split())
_PRONOUNS_BEFORE_IS = frozenset("it he she that there what who here".split())
_OBJECT_START = frozenset(
    "the a an this that these those my your his her its our their it them him me us some all".split()
)
_SENTENCE_PUNCT = frozenset(".!?;:")
_CLOSING_PUNCT = frozenset(".!?,;:")
_CURRENCY_SIGNS = frozenset("$\u00a3\u20ac")
_DOUBLE_HYPHEN = re.compile(r"(?<!-)--(?!-)")
_NUMBER = re.compile(r"^-?[\d,.]*\d(?:st|nd|rd|th|s|'s)?$")
_PUNCT_TAGS = {
    ".": ".",
    "!": ".",
    "?": ".",
    "...": ".",
    "\u2026": ".",
    ",": ",",
    ";": ":",
    ":": ":",
    "\u2014": ":",
    "\u2013": ":",
    "(": "-LRB-",
    "[": "-LRB-",
    "{": "-LRB-",
    ")": "-RRB-",
    "]": "-RRB-",
    "}": "-RRB-",
    "\u201c": "``",
    "\u201d": "''",
}


class RuleTagger:
    """Penn Treebank tags for what misaki's lexicon reads, decided from neighbouring words.

    ``heteronyms`` is the set of lower-case words whose gold lexicon entry
    depends on the tag; ``past_forms`` those among them with a past-tense (VBD)
    reading.
    """

    def __init__(self, heteronyms: frozenset[str], past_forms: frozenset[str]) -> None:
        self.heteronyms = heteronyms
        self.past_forms = past_forms

    def tags(self, texts: list[str], spaces: list[bool]) -> list[str]:
        tags = []
        quote_open = False
        for i, text in enumerate(texts):
            prev = texts[i - 1] if i > 0 else None
            nxt = texts[i + 1] if i + 1 < len(texts) else None
            if text == '"':
                # Straight quotes alternate: opening, closing, opening...
                quote_open = not quote_open
                tags.append("``" if quote_open else "''")
            else:
                tags.append(self._tag(text, prev, nxt, spaces[i] or (i > 0 and spaces[i - 1])))
        return tags

    def _tag(self, text: str, prev: str | None, nxt: str | None, spaced: bool) -> str:
        lower = text.lower()
        if text in _PUNCT_TAGS:
            return _PUNCT_TAGS[text]
        if text == "-" and spaced:
            return ":"  # a free-standing hyphen is a dash; inside "well-known" it is not
        if text in _CURRENCY_SIGNS:
            return "$"
        if _NUMBER.match(text):
            return "CD"
        if text in ("a", "A"):
            # The article before a word; the letter name ("plan A.") otherwise.
            return "DT" if _is_word(nxt) else "NN"
        if lower in _DETERMINERS_ALWAYS:
            return "DT"
        if lower == "to":
            return "TO"
        if lower == "in":
            return "IN" if _is_word(nxt) else "RP"
        if text == "I":
            return "PRP"
        if lower == "used":
            return "VBD"
        if lower in ("vs", "vs."):
            return "IN"
        if lower in self.heteronyms:
            return self._heteronym_tag(lower, prev, nxt)
        return ""

    def _heteronym_tag(self, lower: str, prev: str | None, nxt: str | None) -> str:
        before = prev.lower() if prev is not None else None
        if before == "'s":
            return "NN"  # possessive; "'s" meaning "is" arrives here rewritten as "is"
        if before in _BE_HAVE:
            return "VBN" if lower in self.past_forms else "JJ"
        if before in _NOUN_CONTEXT:
            return "NN"
        if before in _VERB_CONTEXT:
            return "VB"
        if before in _SUBJECTS:
            return "VBD" if lower in self.past_forms else "VBP"
        starts_sentence = before is None or before in _SENTENCE_PUNCT
        if starts_sentence and nxt is not None and nxt.lower() in _OBJECT_START:
            return "VB"  # an imperative: "Record the show."
        return ""


def _is_word(text: str | None) -> bool:
    return text is not None and text[:1].isalnum()


class _TaggedBlankEnglish:
    """Stands in for a spaCy pipeline: the blank English tokenizer plus RuleTagger."""

    def __init__(self, tagger: RuleTagger) -> None:
        import spacy

        self._nlp = spacy.blank("en")
        self._tagger = tagger

    def __call__(self, text: str) -> Any:
        doc = self._nlp(text)
        texts = [t.text for t in doc]
        # "'s" after a pronoun is "is": let the heteronym rules see it as such.
        texts_for_tags = [
            "is" if t == "'s" and i > 0 and texts[i - 1].lower() in _PRONOUNS_BEFORE_IS else t
            for i, t in enumerate(texts)
        ]
        tags = self._tagger.tags(texts_for_tags, [bool(t.whitespace_) for t in doc])
        for token, tag in zip(doc, tags, strict=True):
            token.tag_ = tag
        return doc


def _espeak_fallback(british: bool) -> Any:
    try:
        from misaki.espeak import EspeakFallback

        return EspeakFallback(british=british)
    except Exception as e:  # the bundled library failing to load must not stop English
        logger.warning("espeak-ng fallback unavailable (%s); words outside the lexicon are skipped", e)
        return None


def _offline_g2p(british: bool, fallback: Any) -> Any:
    """misaki's English G2P on the blank tokenizer, built without its downloading constructor."""
    from misaki import en

    lexicon = en.Lexicon(british)
    entries = {k.lower(): v for k, v in lexicon.golds.items() if isinstance(v, dict)}
    tagger = RuleTagger(
        heteronyms=frozenset(entries),
        past_forms=frozenset(k for k, v in entries.items() if "VBD" in v),
    )
    g2p = en.G2P.__new__(en.G2P)
    # The attributes misaki's G2P.__init__ sets (misaki 0.9.4), nlp aside.
    g2p.version = None
    g2p.british = british
    g2p.nlp = _TaggedBlankEnglish(tagger)
    g2p.lexicon = lexicon
    g2p.fallback = fallback
    g2p.unk = ""
    return g2p


def spacy_model_installed() -> bool:
    import spacy

    return bool(spacy.util.is_package(SPACY_MODEL))


class EnglishFrontEnd:
    """misaki English G2P; ``offline=None`` picks the spaCy tagger when its model is installed."""

    def __init__(self, british: bool, offline: bool | None = None) -> None:
        from misaki import en

        if offline is None:
            offline = not spacy_model_installed()
        fallback = _espeak_fallback(british)
        variant = "British" if british else "American"
        if offline:
            self._g2p = _offline_g2p(british, fallback)
            logger.info(
                "%s English G2P: offline mode (spaCy blank tokenizer + rule tagger); "
                "install %s for spaCy's statistical tagger",
                variant,
                SPACY_MODEL,
            )
        else:
            self._g2p = en.G2P(british=british, fallback=fallback, unk="")
            logger.info("%s English G2P: spaCy %s tagger", variant, SPACY_MODEL)
        self.offline = offline

    def __call__(self, text: str) -> list[Word]:
        # misaki keeps only the punctuation in its own set, which has the em dash but not "--".
        _, tokens = self._g2p(_DOUBLE_HYPHEN.sub("\u2014", text))
        words = [Word(t.text, t.phonemes or "", bool(t.whitespace)) for t in tokens]
        # No pause before a full stop or comma: the normaliser writes "a.m. ." so that misaki
        # keeps the sentence's period apart from the abbreviation's.
        for i in range(1, len(words)):
            if words[i].text in _CLOSING_PUNCT and words[i - 1].space:
                words[i - 1] = Word(words[i - 1].text, words[i - 1].phonemes, space=False)
        return words


class NormalizedFrontEnd:
    """A front end that normalises its text first (English only)."""

    def __init__(self, front_end: FrontEnd, options: Normalization) -> None:
        self.front_end = front_end
        self.options = options

    def __call__(self, text: str) -> list[Word]:
        return self.front_end(normalize_text(text, self.options))


_CLAUSE_END = re.compile(r"(?<=[.!?;:,\u2026\u3002\uff01\uff1f])\s+")
_EDGE_PUNCT = ".,;:!?\u00a1\u00bf\"'()[]\u00ab\u00bb\u201c\u201d\u2014\u2026-"


class EspeakFrontEnd:
    """misaki's espeak-ng G2P, run clause by clause so that words keep their phonemes when they can."""

    def __init__(self, language: str) -> None:
        from misaki.espeak import EspeakG2P

        self._g2p = EspeakG2P(language=language)

    def __call__(self, text: str) -> list[Word]:
        words: list[Word] = []
        for clause in _CLAUSE_END.split(text.strip()):
            phonemes, _ = self._g2p(clause)
            if not phonemes:
                continue
            written, spoken = clause.split(), phonemes.split()
            if len(written) == len(spoken):
                words.extend(Word(w.strip(_EDGE_PUNCT) or w, p) for w, p in zip(written, spoken, strict=True))
            else:
                # Numbers and abbreviations expand to several words: time the clause as one.
                words.append(Word(clause, phonemes))
        return _no_final_space(words)


_CJK_SENTENCE_END = re.compile(r"(?<=[\u3002\uff01\uff1f!?])")


class CJKFrontEnd:
    """misaki's Japanese or Mandarin G2P, one timed unit per sentence."""

    def __init__(self, lang: str) -> None:
        try:
            if lang == "j":
                from misaki import ja

                self._g2p = ja.JAG2P()
            else:
                from misaki import zh

                # v1.0 of the model predates misaki's 1.1 Mandarin phoneme set.
                self._g2p = zh.ZHG2P(version=None)
        except ImportError as e:
            extra = "ja" if lang == "j" else "zh"
            raise InputError(
                f"{LANG_NAMES[lang]} needs misaki's extras ({e.name} is missing); "
                f"install them with: pip install 'misaki[{extra}]==0.9.4'"
            ) from None

    def __call__(self, text: str) -> list[Word]:
        words = []
        for sentence in _CJK_SENTENCE_END.split(text.strip()):
            if sentence.strip():
                phonemes, _ = self._g2p(sentence.strip())
                if phonemes:
                    words.append(Word(sentence.strip(), phonemes, space=False))
        return words


def _no_final_space(words: list[Word]) -> list[Word]:
    if words and words[-1].space:
        words[-1] = Word(words[-1].text, words[-1].phonemes, space=False)
    return words


def front_end(lang: str, normalize: bool | Normalization = True) -> FrontEnd:
    """The front end for a language code or alias (the G2P is built once per language).

    ``normalize`` (English only): True rewrites URLs, e-mail addresses, phone
    numbers, times, fractions, units and abbreviations as words before G2P
    (:mod:`kokoro_gpu.text.normalize`); False reads the text as written; a
    :class:`Normalization` picks the rewrites.
    """
    code = resolve_lang(lang)
    if isinstance(normalize, bool):
        options = ALL if normalize else NONE
    elif isinstance(normalize, Normalization):
        options = normalize
    else:
        raise InputError(f"normalize must be a bool or a Normalization, got {type(normalize).__name__}")
    g2p = _front_end(code)
    if code not in "ab" or options == NONE:
        return g2p
    return NormalizedFrontEnd(g2p, options)


@functools.cache
def _front_end(code: str) -> FrontEnd:
    if code in "ab":
        return EnglishFrontEnd(british=code == "b")
    if code in ESPEAK_LANGUAGES:
        return EspeakFrontEnd(ESPEAK_LANGUAGES[code])
    return CJKFrontEnd(code)


def phonemize(text: str, lang: str = "a", normalize: bool | Normalization = True) -> str:
    """Text -> one phoneme string (words joined as the synthesis pipeline joins them)."""
    words = front_end(lang, normalize)(text)
    return "".join(w.phonemes + (" " if w.space else "") for w in words).strip()
