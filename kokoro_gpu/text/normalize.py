"""English text normalisation: what misaki's G2P misreads, rewritten as the words a reader says.

misaki already reads plain and decimal numbers, ordinals (``21st``), years
(``1984``), percentages and currency amounts (``$5.50``, ``\u00a33``), so
those are left to it. This module rewrites, before G2P, the forms it reads
badly:

- e-mail addresses and URLs: ``john.doe@example.org`` -> "john dot doe at
  example dot org", ``https://example.com/docs`` -> "example dot com slash docs";
- phone numbers, digit by digit in their groups: ``555-1234`` -> "five five
  five, one two three four";
- clock times: ``10:30 a.m.`` -> "ten thirty a.m.", ``7:05`` -> "seven oh five",
  ``9:00`` -> "nine o'clock";
- fractions: ``3/4`` -> "three quarters", ``1 1/2`` -> "one and a half";
- units after a number: ``5 km`` -> "5 kilometers", ``1 kg`` -> "1 kilogram";
- abbreviations: ``Ave.``, ``St.`` (Street after a name, Saint before one),
  ``etc.``, ``e.g.``, ``Prof.``, ``No. 5`` ...

An abbreviation's period that also ends the sentence (``... at 10 a.m.`` at
the end, or before a capital letter) is kept as a sentence period, so the
sentence still ends with its falling intonation and pause.

Inline pronunciations (``[Kokoro](/k\u02c8Ok\u0259\u0279O/)``) are left untouched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Normalization:
    """Which rewrites :func:`normalize_text` applies (all on by default)."""

    urls: bool = True
    emails: bool = True
    phone_numbers: bool = True
    times: bool = True
    fractions: bool = True
    units: bool = True
    abbreviations: bool = True


ALL = Normalization()
NONE = Normalization(False, False, False, False, False, False, False)

# misaki's inline pronunciation: [word](/phonemes/).
_OVERRIDE = re.compile(r"\[[^\]\n]*\]\(/[^)\n]*/\)")
# What follows an abbreviation whose period also ends the sentence.
_SENTENCE_FOLLOWS = r"(?=\s*$|\s+[\"'\u201c(]?[A-Z])"
# A period kept as the sentence's own; the space keeps misaki from gluing it onto
# the abbreviation ("a.m.." is one token), and the front end drops that space again.
_SENTENCE_PERIOD = " ."


def _words(n: int, ordinal: bool = False) -> str:
    """A number in words, without num2words' hyphens and commas ("forty five")."""
    from num2words import num2words  # here, so that importing the package needs no front end

    text = num2words(n, to="ordinal") if ordinal else num2words(n)
    return text.replace("-", " ").replace(",", "")


_DIGIT_NAMES = "zero one two three four five six seven eight nine".split()


def _digits(text: str) -> str:
    return " ".join(_DIGIT_NAMES[int(c)] for c in text if c.isdigit())


# ------------------------------------------------------------ e-mail and URLs

_URL_SYMBOLS = {
    "/": "slash",
    "-": "dash",
    "_": "underscore",
    "?": "question mark",
    "=": "equals",
    "&": "and",
    "#": "hash",
    "%": "percent",
    ":": "colon",
    "~": "tilde",
    "+": "plus",
    "@": "at",
    ".": "dot",
}
# Top-level domains said as a word; others are spelled out ("I O").
_SPOKEN_TLDS = frozenset({"com", "org", "net", "gov"})
_TLDS = "com|org|net|edu|gov|io|dev|ai|app|co|uk|us|de|fr|eu|info|biz|me|tv|ca|au|jp"
_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9][\w.+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_URL = re.compile(
    r"(?<![\w@./-])(?:https?://[^\s<>\"]+|www\.[^\s<>\"]+"
    rf"|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.(?:{_TLDS})\b(?:[/?#][^\s<>\"]*)?)",
    re.IGNORECASE,
)
_URL_TRAILING = ".,;:!?)]}'\""


def _read_address(text: str) -> str:
    """Letters and digits as they are, each separator as its name."""
    parts = re.split(r"([^A-Za-z0-9])", text)
    spoken = []
    for i, part in enumerate(parts):
        if not part:
            continue
        if i % 2:
            spoken.append(_URL_SYMBOLS.get(part, ""))
        else:
            spoken.append(part)
    return " ".join(p for p in spoken if p)


def _read_host(host: str) -> str:
    labels = host.split(".")
    tld = labels[-1]
    if len(labels) > 1 and tld.lower() not in _SPOKEN_TLDS:
        labels[-1] = " ".join(tld.upper())
    return " dot ".join(_read_address(label) if label.lower() != "www" else "w w w" for label in labels)


def _email(m: re.Match[str]) -> str:
    user, host = m.group().split("@", 1)
    return f"{_read_address(user)} at {_read_host(host)}"


def _url(m: re.Match[str]) -> str:
    url = m.group()
    stripped = url.rstrip(_URL_TRAILING)
    trailing = url[len(stripped) :]
    rest = re.sub(r"^https?://", "", stripped, flags=re.IGNORECASE)
    host, path = re.fullmatch(r"([^/?#]*)(.*)", rest, flags=re.DOTALL).groups()
    host, _, port = host.partition(":")
    spoken = _read_host(host)
    if port:
        spoken += f" colon {port}"
    if path:
        spoken += " " + _read_address(path)
    return spoken + trailing


# ------------------------------------------------------------- phone numbers

_PHONE = re.compile(
    r"(?<![\w+/.-])(?:(\+\d{1,3})[\s.-]?)?"
    r"(?:(\(\d{3}\))\s?|(\d{3})[\s.-])?(\d{3})-(\d{4})(?![\w/-]|\.\d)"
    r"|(?<![\w+/.-])(?:(\+\d{1,3})[\s.-]?)?(?:(\(\d{3}\))\s?|(\d{3})[\s.])(\d{3})[\s.](\d{4})(?![\w/-]|\.\d)"
)


def _phone(m: re.Match[str]) -> str:
    groups = [g for g in m.groups() if g]
    spoken = []
    for g in groups:
        prefix = "plus " if g.startswith("+") else ""
        spoken.append(prefix + _digits(g))
    return ", ".join(spoken)


# ------------------------------------------------------------------ clock times

_AM_PM = r"(?P<ampm>(?P<half>[aApP])\.?\s?[mM]\b\.?)"
_TIME = re.compile(
    r"(?<![\d:.])(?P<hour>[01]?\d|2[0-3]):(?P<minute>[0-5]\d)(?![\d:])"
    rf"(?:\s?{_AM_PM}(?P<end>{_SENTENCE_FOLLOWS})?)?"
)
_HOUR_AM_PM = re.compile(
    rf"(?<![\d:.])(?P<hour>1[0-2]|0?[1-9])\s?{_AM_PM}(?P<end>{_SENTENCE_FOLLOWS})?"
)


def _am_pm(m: re.Match[str]) -> str:
    if not m.group("ampm"):
        return ""
    spoken = " a.m." if m.group("half").lower() == "a" else " p.m."
    # The period that ends the sentence, written or folded into "a.m.".
    if m.group("ampm").endswith(".") and m.group("end") is not None:
        spoken += _SENTENCE_PERIOD
    return spoken


def _time(m: re.Match[str]) -> str:
    hour, minute = int(m.group("hour")), int(m.group("minute"))
    spoken = _words(hour)
    if minute == 0 and not m.group("ampm"):
        spoken += " o'clock" if 1 <= hour <= 12 else " hundred"
    elif 0 < minute < 10:
        spoken += f" oh {_words(minute)}"
    elif minute >= 10:
        spoken += f" {_words(minute)}"
    return spoken + _am_pm(m)


def _hour_am_pm(m: re.Match[str]) -> str:
    return _words(int(m.group("hour"))) + _am_pm(m)


# -------------------------------------------------------------------- fractions

# Denominators read as fractions; others (12/25: a date) are left alone.
_FRACTION_DENOMINATORS = frozenset({2, 3, 4, 5, 6, 8, 10, 16, 32, 64, 100})
_FRACTION = re.compile(r"(?<![\w/.,])(?:(\d+)\s+)?(\d+)/(\d+)(?![\w/]|[.,]\d)")


def _fraction_words(numerator: int, denominator: int) -> str:
    if denominator == 2:
        name = "half" if numerator == 1 else "halves"
    elif denominator == 4:
        name = "quarter" if numerator == 1 else "quarters"
    else:
        name = _words(denominator, ordinal=True) + ("" if numerator == 1 else "s")
    return f"{_words(numerator)} {name}"


def _fraction(m: re.Match[str]) -> str:
    whole, numerator, denominator = m.group(1), int(m.group(2)), int(m.group(3))
    if denominator not in _FRACTION_DENOMINATORS or not 0 < numerator < denominator:
        return m.group()
    if whole is None:
        return _fraction_words(numerator, denominator)
    part = "a half" if (numerator, denominator) == (1, 2) else _fraction_words(numerator, denominator)
    return f"{_words(int(whole))} and {part}"


# ------------------------------------------------------------------------ units

# Symbol -> (singular, plural). Case matters: "MB" is megabytes, "mb" is not read.
_UNITS = {
    "mm": ("millimeter", "millimeters"),
    "cm": ("centimeter", "centimeters"),
    "m": ("meter", "meters"),
    "km": ("kilometer", "kilometers"),
    "ft": ("foot", "feet"),
    "mi": ("mile", "miles"),
    "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "m/s": ("meter per second", "meters per second"),
    "mg": ("milligram", "milligrams"),
    "g": ("gram", "grams"),
    "kg": ("kilogram", "kilograms"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"),
    "L": ("liter", "liters"),
    "ms": ("millisecond", "milliseconds"),
    "sec": ("second", "seconds"),
    "min": ("minute", "minutes"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"),
    "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"),
    "Mbps": ("megabit per second", "megabits per second"),
    "Gbps": ("gigabit per second", "gigabits per second"),
    "kW": ("kilowatt", "kilowatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "\u00b0C": ("degree Celsius", "degrees Celsius"),
    "\u00b0F": ("degree Fahrenheit", "degrees Fahrenheit"),
}
_UNIT = re.compile(
    r"(?<![\w$\u00a3\u20ac.,])(\d+(?:,\d{3})*(?:\.\d+)?)\s?("
    + "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
    + r")(?![\w/])"
)


def _unit(m: re.Match[str]) -> str:
    number, unit = m.group(1), m.group(2)
    singular, plural = _UNITS[unit]
    return f"{number} {singular if number == '1' else plural}"


# ---------------------------------------------------------------- abbreviations

# Abbreviation (its period included) -> expansion. These may end a sentence.
_ABBREVIATIONS = {
    "etc.": "et cetera",
    "e.g.": "for example",
    "i.e.": "that is",
    "vs.": "versus",
    "approx.": "approximately",
    "Ave.": "Avenue",
    "Blvd.": "Boulevard",
    "Rd.": "Road",
    "Ln.": "Lane",
    "Jr.": "Junior",
    "Sr.": "Senior",
    "Inc.": "Incorporated",
    "Ltd.": "Limited",
    "Dept.": "Department",
    "Fig.": "Figure",
}
# Titles come before a name, so their period never ends a sentence.
_TITLES = {"Prof.": "Professor", "Mt.": "Mount", "Gen.": "General", "Capt.": "Captain", "Sgt.": "Sergeant"}
_ABBREVIATION = re.compile(
    r"(?<![\w.])(" + "|".join(re.escape(a) for a in _ABBREVIATIONS) + rf")(?P<end>{_SENTENCE_FOLLOWS})?"
)
_TITLE = re.compile(r"(?<![\w.])(" + "|".join(re.escape(t) for t in _TITLES) + r")(?=\s+[A-Z])")
# "St." is Saint before a name ("St. Louis"), Street after one ("Elm St.", "5th St.").
_ST = re.compile(rf"(?<![\w.])St\.(?P<end>{_SENTENCE_FOLLOWS})?")
_NAME_BEFORE = re.compile(r"(?:^|[^.!?\s]\s*?)\s(?:[A-Z][a-z]+|\d+(?:st|nd|rd|th)?)\s+$")
_NUMBER_SIGN = re.compile(r"(?<![\w.])(?:No\.|#)\s?(?=\d)")


def _expand(expansion: str, m: re.Match[str]) -> str:
    return expansion + (_SENTENCE_PERIOD if m.group("end") is not None else "")


def _abbreviation(m: re.Match[str]) -> str:
    return _expand(_ABBREVIATIONS[m.group(1)], m)


def _saint_or_street(text: str) -> str:
    def expand(m: re.Match[str]) -> str:
        # A capitalised word or a number before "St." that does not itself start the sentence names a street.
        after_name = _NAME_BEFORE.search(text[: m.start()]) is not None
        before_name = m.group("end") is not None and text[m.end() :].lstrip()[:1].isupper()
        if before_name and not after_name:
            return "Saint"
        return _expand("Street", m)

    return _ST.sub(expand, text)


# ------------------------------------------------------------------------ driver

_Pass = Callable[[str], str]


def _passes(options: Normalization) -> list[_Pass]:
    passes: list[_Pass] = []
    if options.emails:
        passes.append(lambda t: _EMAIL.sub(_email, t))
    if options.urls:
        passes.append(lambda t: _URL.sub(_url, t))
    if options.phone_numbers:
        passes.append(lambda t: _PHONE.sub(_phone, t))
    if options.times:
        passes.append(lambda t: _HOUR_AM_PM.sub(_hour_am_pm, _TIME.sub(_time, t)))
    if options.fractions:
        passes.append(lambda t: _FRACTION.sub(_fraction, t))
    if options.units:
        passes.append(lambda t: _UNIT.sub(_unit, t))
    if options.abbreviations:
        passes.append(lambda t: _NUMBER_SIGN.sub("number ", t))
        passes.append(lambda t: _TITLE.sub(lambda m: _TITLES[m.group(1)], t))
        passes.append(_saint_or_street)
        passes.append(lambda t: _ABBREVIATION.sub(_abbreviation, t))
    return passes


def normalize_text(text: str, options: Normalization = ALL) -> str:
    """``text`` with the forms of the module docstring written out as words (inline pronunciations kept)."""
    passes = _passes(options)
    if not passes:
        return text
    pieces = []
    last = 0
    for override in _OVERRIDE.finditer(text):
        pieces.append(_apply(passes, text[last : override.start()]))
        pieces.append(override.group())
        last = override.end()
    pieces.append(_apply(passes, text[last:]))
    return "".join(pieces)


def _apply(passes: list[_Pass], text: str) -> str:
    for rewrite in passes:
        text = rewrite(text)
    return text
