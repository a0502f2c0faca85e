"""The phonemizer front end, checked against misaki's lexicon entries.

Expected phonemes are assembled from misaki's own data files (us_gold.json,
us_silver.json, gb_gold.json) and the rules misaki documents in en.py (the
article "a" is "\u0250", "I" as a pronoun is secondary-stressed, "the" before a
consonant is "\u00f0\u0259", numbers read through num2words, version-1 output
writes the flap "\u027e" as "T"); none of them is copied from our output.
"""

from __future__ import annotations

import importlib.resources
import json
import logging

import pytest

from kokoro_gpu.errors import InputError
from kokoro_gpu.text.g2p import (
    EnglishFrontEnd,
    EspeakFrontEnd,
    RuleTagger,
    front_end,
    phonemize,
    resolve_lang,
)


def _lexicon(name: str) -> dict:
    import misaki.data

    return json.loads(importlib.resources.files(misaki.data).joinpath(name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def gold() -> dict:
    return _lexicon("us_gold.json")


@pytest.fixture(scope="module")
def silver() -> dict:
    return _lexicon("us_silver.json")


@pytest.fixture(scope="module")
def offline() -> EnglishFrontEnd:
    return EnglishFrontEnd(british=False, offline=True)


def _say(g2p: EnglishFrontEnd, text: str) -> str:
    return "".join(w.phonemes + (" " if w.space else "") for w in g2p(text)).strip()


def test_punctuation_is_kept(offline, gold):
    # A blank tokenizer without tags drops both the comma and the final period.
    assert _say(offline, "Hello, world.") == f"{gold['hello']}, {gold['world']}."
    assert _say(offline, "Hello; world!") == f"{gold['hello']}; {gold['world']}!"


def test_currency_reads_units(offline, gold, silver):
    expected = " ".join(
        [gold["pay"], gold["five"], silver["dollars"], gold["and"], gold["fifty"], silver["cents"]]
    )
    assert _say(offline, "Pay $5.50.") == expected + "."


def test_article_a_is_reduced(offline, gold):
    # "a" before a word is the article \u0250, not the stressed letter name.
    assert _say(offline, "I saw a cat.") == f"\u02ccI {gold['saw']} \u0250 {gold['cat']}."


def test_letter_a_keeps_its_name(offline, gold):
    assert _say(offline, "plan a, then b") == f"{gold['plan']} {gold['A']}, {gold['then']} {gold['B']}"


def test_year(offline, gold):
    year = " ".join([gold["nineteen"], gold["eighty"].replace("\u027e", "T"), gold["four"]])
    assert _say(offline, "the year 1984.") == f"\u00f0\u0259 {gold['year']} {year}."


def test_heteronyms_follow_context(offline, gold):
    record = gold["record"]
    assert _say(offline, "Record the record.") == f"{record['VERB']} \u00f0\u0259 {record['DEFAULT']}."
    # "live" after a subject is the verb; "read" after "have" the participle.
    said = _say(offline, "I live here, I have read it.")
    assert said == (
        f"\u02ccI {gold['live']['VERB']} {gold['here']}, \u02ccI {gold['have']['DEFAULT']} "
        f"{gold['read']['VBN']} {gold['it']}."
    )
    assert _say(offline, "the live music") == f"\u00f0\u0259 {gold['live']['DEFAULT']} {gold['music']}"


def test_to_before_vowel_and_consonant(offline, gold):
    # misaki's rule: "to" is t\u028a before a vowel, t\u0259 before a consonant.
    assert _say(offline, "to eat to go") == f"t\u028a {gold['eat']} t\u0259 {gold['go']}"


def test_double_hyphen_is_a_dash(offline, gold):
    assert _say(offline, "hello -- world") == f"{gold['hello']} \u2014 {gold['world']}"


def test_out_of_lexicon_word_uses_espeak(offline, gold, silver):
    from misaki.espeak import EspeakFallback
    from misaki.token import MToken

    word = "Zorblax"
    assert word.lower() not in gold and word.lower() not in silver
    spoken = _say(offline, word)
    direct, _ = EspeakFallback(british=False)(MToken(text=word, tag="NNP", whitespace=""))
    assert spoken == direct
    assert spoken and "\u02c8" in spoken


def test_inline_pronunciation_override(offline, gold):
    # misaki's link syntax: [word](/phonemes/) replaces the word's phonemes.
    said = _say(offline, "[Kokoro](/k\u02c8Ok\u0259\u0279O/) speaks.")
    assert said == f"k\u02c8Ok\u0259\u0279O {gold['speak']}s."


def test_words_keep_their_text(offline):
    words = offline("Pay $5.50, now.")
    assert [w.text for w in words] == ["Pay", "$", "5.50", ",", "now", "."]
    assert words[1].phonemes == ""  # the sign is read with the number


def test_british_lexicon():
    gb = _lexicon("gb_gold.json")
    g2p = EnglishFrontEnd(british=True, offline=True)
    assert _say(g2p, "Hello, world.") == f"{gb['hello']}, {gb['world']}."


def test_offline_mode_is_logged(caplog):
    with caplog.at_level(logging.INFO, logger="kokoro_gpu"):
        EnglishFrontEnd(british=False, offline=True)
    assert any("offline mode" in r.getMessage() for r in caplog.records)


def test_rule_tagger_tags():
    tagger = RuleTagger(heteronyms=frozenset({"record"}), past_forms=frozenset())
    texts = ["Give", "a", "record", "to", "me", ",", "plan", "a", "."]
    tags = tagger.tags(texts, [True] * len(texts))
    assert tags[1] == "DT" and tags[7] == "NN"  # article vs letter
    assert tags[2] == "NN" and tags[3] == "TO" and tags[5] == "," and tags[8] == "."
    assert tagger.tags(['"', "hi", '"'], [False, False, False]) == ["``", "", "''"]
    assert tagger.tags(["$", "5"], [False, False]) == ["$", "CD"]


@pytest.mark.parametrize(
    ("alias", "code"),
    [("a", "a"), ("en-us", "a"), ("EN_US", "a"), ("en-gb", "b"), ("es", "e"), ("fr-fr", "f"), ("hi", "h"),
     ("it", "i"), ("pt-br", "p"), ("ja", "j"), ("zh", "z")],
)
def test_resolve_lang(alias, code):
    assert resolve_lang(alias) == code


def test_unknown_lang():
    with pytest.raises(InputError, match="unknown language"):
        resolve_lang("klingon")


def test_espeak_language_keeps_words():
    from misaki.espeak import EspeakG2P

    words = EspeakFrontEnd("es")("hola mundo")
    expected, _ = EspeakG2P(language="es")("hola mundo")
    assert [w.text for w in words] == ["hola", "mundo"]
    assert " ".join(w.phonemes for w in words) == expected


def test_phonemize_espeak_language():
    from misaki.espeak import EspeakG2P

    assert phonemize("bonjour", "fr") == EspeakG2P(language="fr-fr")("bonjour")[0]


@pytest.mark.parametrize(("lang", "extra"), [("ja", "ja"), ("zh", "zh")])
def test_cjk_without_extras_says_how_to_install(lang, extra):
    try:
        front_end(lang)
    except InputError as e:
        assert f"misaki[{extra}]" in str(e)
    else:
        pytest.skip(f"misaki[{extra}] is installed")
