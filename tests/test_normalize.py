"""Text normalisation: each form rewritten as the words a reader says (expected texts written by hand)."""

from __future__ import annotations

import pytest

from kokoro_gpu.text.normalize import ALL, NONE, Normalization, normalize_text


@pytest.mark.parametrize(("text", "spoken"), [
    ("Take 3/4 cup.", "Take three quarters cup."),
    ("Add 1/2, 2/3 and 5/8.", "Add one half, two thirds and five eighths."),
    ("It took 1 1/2 hours.", "It took one and a half hours."),
    ("Pour 2 3/4 liters.", "Pour two and three quarters liters."),
    # Dates and improper ratios are left to misaki.
    ("On 12/25/2024 and 12/25, 50/50.", "On 12/25/2024 and 12/25, 50/50."),
])
def test_fractions(text: str, spoken: str) -> None:
    assert normalize_text(text) == spoken


@pytest.mark.parametrize(("text", "spoken"), [
    ("Call 555-1234.", "Call five five five, one two three four."),
    ("Call (555) 123-4567 now.", "Call five five five, one two three, four five six seven now."),
    ("Call +1 555-123-4567.", "Call plus one, five five five, one two three, four five six seven."),
    ("Fax 555.123.4567", "Fax five five five, one two three, four five six seven"),
    ("Call 800-555-0100.", "Call eight zero zero, five five five, zero one zero zero."),
    # Ranges and plain numbers are not phone numbers.
    ("In 1990-1995 we sold 100-200 units.", "In 1990-1995 we sold 100-200 units."),
])
def test_phone_numbers(text: str, spoken: str) -> None:
    assert normalize_text(text) == spoken


@pytest.mark.parametrize(("text", "spoken"), [
    ("At 10:30 a.m. we left.", "At ten thirty a.m. we left."),
    # The abbreviation's period also ends the sentence: it is kept as the sentence's own.
    ("We left at 10:30 a.m.", "We left at ten thirty a.m. ."),
    ("We left at 10 AM. Then we ate.", "We left at ten a.m. . Then we ate."),
    ("Meet at 7:05 pm, not 7:50pm.", "Meet at seven oh five p.m., not seven fifty p.m. ."),
    ("Open at 9:00, close at 23:00.", "Open at nine o'clock, close at twenty three hundred."),
    ("Lunch at 12:00 PM!", "Lunch at twelve p.m.!"),
    # A ratio or score with one-digit minutes is not a time.
    ("The ratio is 16:9.", "The ratio is 16:9."),
])
def test_times(text: str, spoken: str) -> None:
    assert normalize_text(text) == spoken


@pytest.mark.parametrize(("text", "spoken"), [
    ("Walk 5 km, then 1 km.", "Walk 5 kilometers, then 1 kilometer."),
    ("It weighs 3 kg or 3kg.", "It weighs 3 kilograms or 3 kilograms."),
    ("A 2.5 GHz CPU with 512 MB and 1,000 GB.",
     "A 2.5 gigahertz CPU with 512 megabytes and 1,000 gigabytes."),
    ("Drive at 60 mph or 100 km/h.", "Drive at 60 miles per hour or 100 kilometers per hour."),
    ("It is 20 \u00b0C, 5 ft tall and 12 oz.", "It is 20 degrees Celsius, 5 feet tall and 12 ounces."),
    # Money and words that only look like units are left alone.
    ("It made $5m in 5 minutes; I am 5.", "It made $5m in 5 minutes; I am 5."),
])
def test_units(text: str, spoken: str) -> None:
    assert normalize_text(text) == spoken


@pytest.mark.parametrize(("text", "spoken"), [
    ("Visit https://example.com/docs now.", "Visit example dot com slash docs now."),
    ("See www.kokoro.io.", "See w w w dot kokoro dot I O."),
    ("Go to http://localhost.dev:8080/a_b?x=1.", "Go to localhost dot D E V colon 8080 slash a underscore b "
     "question mark x equals 1."),
    ("Read github.com/remsky/Kokoro-FastAPI, please.",
     "Read github dot com slash remsky slash Kokoro dash FastAPI, please."),
    ("Mail john.doe@example.org please.", "Mail john dot doe at example dot org please."),
    ("Write to a_b+tts@mail.example.co.uk.",
     "Write to a underscore b plus tts at mail dot example dot co dot U K."),
])
def test_urls_and_emails(text: str, spoken: str) -> None:
    assert normalize_text(text) == spoken


@pytest.mark.parametrize(("text", "spoken"), [
    ("Go to Fifth Ave. now.", "Go to Fifth Avenue now."),
    ("She lives on Elm St. now.", "She lives on Elm Street now."),
    ("She lives on 5th St.", "She lives on 5th Street ."),
    ("Visit St. Louis. Then St. Mary's.", "Visit Saint Louis. Then Saint Mary's."),
    ("Apples, pears, etc. Done.", "Apples, pears, et cetera . Done."),
    ("Apples etc. and pears", "Apples et cetera and pears"),
    ("Prof. Plum, i.e. the host, e.g. not me.", "Professor Plum, that is the host, for example not me."),
    ("Room No. 5 or #6.", "Room number 5 or number 6."),
    ("Smith Jr. spoke.", "Smith Junior spoke."),
])
def test_abbreviations(text: str, spoken: str) -> None:
    assert normalize_text(text) == spoken


def test_inline_pronunciations_are_kept() -> None:
    text = "[3/4](/\u03b8\u0279\u02c8i f\u02c8\u0254\u0279/) at 3/4."
    assert normalize_text(text) == "[3/4](/\u03b8\u0279\u02c8i f\u02c8\u0254\u0279/) at three quarters."


def test_options_turn_each_rewrite_off() -> None:
    text = "Call 555-1234 at 10:30 about 3/4 of 5 km on Elm St. or mail a@b.com or see b.org."
    assert normalize_text(text, NONE) == text
    assert normalize_text(text, ALL) == (
        "Call five five five, one two three four at ten thirty about three quarters of 5 kilometers on "
        "Elm Street or mail a at b dot com or see b dot org."
    )
    no_phones = normalize_text(text, Normalization(phone_numbers=False))
    assert no_phones.startswith("Call 555-1234 at ten thirty")
    only_units = Normalization(False, False, False, False, False, True, False)
    assert normalize_text(text, only_units) == text.replace("5 km", "5 kilometers")


def test_numbers_misaki_reads_are_left_alone() -> None:
    text = "The 21st time, 20% up, $5.50, \u00a33 and 3.14 in 1984."
    assert normalize_text(text) == text
