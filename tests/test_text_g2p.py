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


def test_mode_log_shows_once_under_a_logging_config():
    # What a program (or ``kokoro-speak -v``) sees with logging at INFO: one line, however often
    # the front end is asked for.
    import subprocess
    import sys

    code = (
        "import logging; logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')\n"
        "from kokoro_gpu.text import front_end\n"
        "front_end('a')('One.'); front_end('en-us', normalize=False)('Two.')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if "English G2P" in line]
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("INFO American English G2P: ")


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


# Normalisation, checked on phonemes: the written form must sound exactly like the words a
# reader says, which are written out by hand here and read with normalisation off.
@pytest.mark.parametrize(("written", "spoken"), [
    ("Take 3/4 cup.", "Take three quarters cup."),
    ("Call 555-1234.", "Call five five five, one two three four."),
    ("At 10:30 a.m. we left.", "At ten thirty a.m. we left."),
    ("Walk 5 km with 3 kg.", "Walk 5 kilometers with 3 kilograms."),
    ("Visit https://example.com/docs now.", "Visit example dot com slash docs now."),
    ("Mail john.doe@example.org now.", "Mail john dot doe at example dot org now."),
    ("Go to Fifth Ave. now.", "Go to Fifth Avenue now."),
    ("Apples, pears, etc. Done.", "Apples, pears, et cetera. Done."),
])
def test_normalised_text_sounds_like_its_words(written: str, spoken: str) -> None:
    assert phonemize(written) == phonemize(spoken, normalize=False)


def _v1(phonemes: str) -> str:
    return phonemes.replace("\u027e", "T")  # version-1 output writes the flap as "T"


def test_normalisation_keeps_the_sentence_period_after_am(gold):
    said = phonemize("We left at 10:30 a.m.")
    assert said.endswith(_v1(f"{gold['ten']} {gold['thirty']} \u02ccA\u02c8\u025bm."))
    # Without normalisation misaki reads "10:30" with a colon inside and loses the period.
    assert not phonemize("We left at 10:30 a.m.", normalize=False).endswith(".")


def test_normalisation_reads_what_misaki_misreads(gold, silver):
    assert phonemize("3/4") == _v1(f"{gold['three']} {silver['quarters']}")
    assert phonemize("3/4", normalize=False) != phonemize("3/4")
    assert phonemize("555-1234") == ", ".join(
        [" ".join([gold["five"]] * 3), " ".join(gold[w] for w in ("one", "two", "three", "four"))]
    )
    assert gold["avenue"] in phonemize("Fifth Ave. now")


def test_numbers_misaki_reads_keep_their_reading(gold, silver):
    # Ordinals, percentages, currency and years go to misaki as written.
    assert phonemize("the 21st") == f"\u00f0\u0259 {gold['twenty']} {gold['first']}"
    assert phonemize("Up 20%.") == phonemize("Up 20%.", normalize=False)
    assert phonemize("Pay \u00a33.") == f"{gold['pay']} {gold['three']} {silver['pounds']}."


def test_front_end_normalize_option():
    from kokoro_gpu.text.normalize import Normalization

    assert phonemize("Call 555-1234.", normalize=Normalization(phone_numbers=False)) == phonemize(
        "Call 555-1234.", normalize=False
    )
    with pytest.raises(InputError, match="normalize must be"):
        front_end("a", normalize="yes")  # type: ignore[arg-type]
    # Other languages read their text as written.
    assert front_end("e") is front_end("e", normalize=True)


def test_then_record_is_a_verb(offline, gold):
    record = gold["record"]
    assert _say(offline, "Then record.") == f"{gold['then']} {record['VERB']}."
    assert _say(offline, "We always record the show.").split()[2] == record["VERB"]
    assert _say(offline, "The record is good.").split()[1] == record["DEFAULT"]
