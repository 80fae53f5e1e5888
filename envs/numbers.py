"""The count grammar: what it means for a reply to state a count, one definition for every task.

A reply's count is the exact whole number it states, or no answer. Used by the image
environment (JSON ``answer`` calls, native tool calls, ``ANSWER:`` lines), the video and
CounterCount environments (``countgym.envs.extract``, ``countgym.envs.cf_env``), the scripted
arms and the audit's ``--parser`` / judge results.

**A count** is a whole number from 0 to ``MAX_COUNT`` written

- in digits of **one** script: any Unicode decimal digits (``12``, ``١٢``, ``１２``, ``१२``), never
  mixed (``1٣`` is no count); thousands grouped with commas in proper 3-digit groups are read
  (``1,000``, ``12,345``); a leading ``+`` and leading zeros are allowed;
- in digits or words followed by a multiplier word (``MULTIPLIERS``), multiplied out exactly:
  ``2 thousand`` and ``2 thousands`` (2000), ``3 hundred``, ``1 million``, ``two dozen`` (24),
  ``a dozen``, ``3 score`` (60), ``a gross`` (144); a product above ``MAX_COUNT`` is out of range
  (``1 billion``, ``a googol``); ``lakh`` and ``crore`` are refused (kind ``scale``), as the
  Indian digit grouping ``1,00,000`` is; ``half a dozen`` is a fraction; bare ``dozens`` is no
  number;
- in English number words up to a million, with or without ``and``, hyphenated or not:
  ``zero`` ... ``nineteen``, ``twenty-one``, ``twenty one``, ``a hundred``,
  ``one hundred and five``, ``fifteen hundred``, ``two thousand three hundred forty-five``,
  ``a million``;
- as a written product, read as one mention of its value: ``3 x 4``, ``3 times 4``,
  ``4 rows of 3`` (12), so that a factor is never taken for the count;
- inside markdown emphasis (``**12**``, ``__12__``, ``_twelve_``); an answer span that is only
  ``none`` is 0.

**Not a count** (a number mention of another kind; the reply states no count with it):
``negative`` (``-1``, ``–1``, ``−1``, ``－1``, ``﹣1``, ``(-1)``, ``- 1`` after ``:`` ``=`` ``(`` or
alone on a line, ``minus 1``, ``negative two``); ``decimal`` (``7.5``, ``.7``, ``2 and a half``);
``negated`` (``not 12``, ``never 12``, ``not exactly 12``: set aside when the span states
another count, ``12, not 13``; no answer alone); ``scale`` (``lakh``, ``crore``);
``separator`` (ambiguous grouping: ``7,5``, ``1,00``, ``1 000``, ``1'000``, ``1.000.000``);
``exponent`` (``1e20``, ``7.e5``, ``10^2``, ``10**2``, ``10²``, ``1×10^3``); ``hex`` (``0x10``);
``fraction`` (``3/4``, ``3½``); ``percent`` (``50%``); ``bound`` (``at least 5``, ``5+``,
``over 10``, ``more than``, ``fewer than``, ``up to``, ``≥5``, ``5 or more``); ``approximate``
(``about 12``, ``around``, ``approximately``, ``roughly``, ``nearly``, ``almost``, ``circa``,
``~12``, ``≈12``, ``±``, ``12 or so``, ``12-ish``): an approximation is not the exact number,
so it is no answer, the same in every task; ``mixed_script`` (``1٣``); ``broken`` (digits with
an invisible character inside, ``1\\u200b2``); ``out_of_range`` (above ``MAX_COUNT``).
Digits glued to letters (``3D``, ``10s``, ``1st``, ``x1080``) and ordinals (``twenty-first``) are
not number mentions at all.

**An answer span** (the rest of an ``ANSWER:`` line, a JSON ``count`` string) states a count when
every number mention in it, negated ones set aside, is a count and they all have the same
value: ranges (``3-4``, ``3 to 4``), alternatives (``3 or 4``) and two numbers (``2 thousand 5``)
are no answer. A JSON ``count`` string reads as such a span does.

Every function is linear in the length of its text and never raises on a string.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal

MAX_COUNT = 1_000_000
"""The largest count any task accepts; a larger number is recorded as out of range."""
_MAX_DIGITS = len(str(MAX_COUNT))

NumberKind = Literal[
    "count", "negative", "decimal", "exponent", "hex", "out_of_range", "separator", "fraction",
    "percent", "bound", "approximate", "mixed_script", "broken", "negated", "scale",
]  # fmt: skip

INVISIBLE = (
    "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5"
    "\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f"
    "\ufeff\ufff9-\ufffb\uffa0\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f\U000e0100-\U000e01ef"
)
"""A regex class body: every format (Cf) character, variation selectors and fillers."""
MINUS_SIGNS = "-\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2796\ufe58\ufe63\uff0d\u207b\u208b\u02d7\u2e3a\u2e3b"
"""Every character a reply may write a minus sign with (hyphen, dashes, minus, full-width, small, super/subscript)."""

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fourty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90,
}  # fmt: skip
_SCALES = {"thousand": 1_000, "million": 1_000_000}
MULTIPLIERS: dict[str, int] = {
    "hundred": 100, "hundreds": 100, "thousand": 1_000, "thousands": 1_000, "million": 1_000_000,
    "millions": 1_000_000, "billion": 10**9, "billions": 10**9, "trillion": 10**12, "trillions": 10**12,
    "quadrillion": 10**15, "quintillion": 10**18, "googol": 10**100, "googols": 10**100,
    "dozen": 12, "dozens": 12, "score": 20, "gross": 144,
}  # fmt: skip
"""Words that multiply the number before them out exactly (``two dozen`` 24, ``3 score`` 60,
``2 thousands`` 2000); a product above ``MAX_COUNT`` is out of range (``1 billion``, ``a googol``)."""
REFUSED_SCALES = frozenset({"lakh", "lakhs", "lac", "lacs", "crore", "crores"})
"""Scale words of the Indian numbering system, refused (no answer, kind ``scale``) as its digit
grouping (``1,00,000``) is: the grammar reads one numbering system."""
_MULTIPLIER_WORDS = "|".join(sorted([*MULTIPLIERS, *REFUSED_SCALES], key=len, reverse=True))
_ORDINAL_WORDS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
    "thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|"
    "thirtieth|fortieth|fiftieth|sixtieth|seventieth|eightieth|ninetieth|hundredth|thousandth|millionth"
)
_NUMBER_WORDS = sorted({*_UNITS, *_TENS, *MULTIPLIERS, *REFUSED_SCALES}, key=len, reverse=True)
_NW = "|".join(_NUMBER_WORDS)
_SEP = r"(?:[ \t]*-[ \t]*|[ \t]+)"

# One scanner for digit mentions: a hex literal, or a run of digits (any script, invisible
# characters inside kept for classification) with its grouping/decimal separators.
_DIGITS = re.compile(
    r"(?P<hex>0[xX][0-9a-fA-F]+(?!\w))"
    rf"|(?P<body>\d(?:[{INVISIBLE}]*(?:\d|(?:[,.'\u2019\u066b\u066c]|[ \u00a0\u2009\u202f](?=\d{{3}}(?!\d)))[{INVISIBLE}]*\d))*)"
)
# Number-word runs: words and "and"/"a" joined by spaces or hyphens (split into numbers later).
_WORDS = re.compile(
    rf"\b(?:(?:{_NW})|a(?={_SEP}(?:hundred|thousand|million|dozen|gross|googol)\b))\b(?:{_SEP}(?:{_NW}|and|a)\b)*",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"[A-Za-z]+")
_SEPARATORS = re.compile(r"[,.'\u2019\u066b\u066c \u00a0\u2009\u202f]")
_INVISIBLE_RE = re.compile(rf"[{INVISIBLE}]")
_TRAIL_INVISIBLE = re.compile(rf"[{INVISIBLE}]+$")


def _expand(cls: str) -> frozenset[str]:
    out: set[str] = set()
    i = 0
    while i < len(cls):
        if i + 2 < len(cls) and cls[i + 1] == "-":
            out.update(chr(c) for c in range(ord(cls[i]), ord(cls[i + 2]) + 1))
            i += 3
        else:
            out.add(cls[i])
            i += 1
    return frozenset(out)


_INVISIBLE_SET = _expand(INVISIBLE)
_SUP = "\u00b2\u00b3\u00b9\u2070\u2074-\u2079\u207a\u207b"

# What may follow a digit run (tried in this order at its end).
_DIGITS_AFTER = re.compile(
    rf"(?P<exponent>\.?[eE][-+\u2212]?\d+|(?:\^|\*\*)[ \t]*[-+\u2212]?\d+|[{_SUP}]+"
    rf"|[ \t]*[xX\u00d7*\u00b7\u22c5][ \t]*10(?:(?:\^|\*\*)[ \t]*[-+\u2212]?\d+|[{_SUP}]+))"
    r"|(?P<glued>[^\W\d])"
    r"|(?P<fraction>[/\u2044\u2215][ \t]*\d+|[\u00bc-\u00be\u2150-\u215e])"
    r"|(?P<percent>[ \t]?[%\u066a\u2030\u2031\uff05])"
    rf"|(?P<scale>[ \t]+(?:{_MULTIPLIER_WORDS})\b)",
    re.IGNORECASE,
)
_DIGITS_AFTER_START = frozenset(
    " \t.^*/\u2044\u2215%\u066a\u2030\u2031\uff05\u00d7\u00b7\u22c5_\u00b2\u00b3\u00b9\u2070\u2074\u2075\u2076\u2077"
    "\u2078\u2079\u207a\u207b\u00bc\u00bd\u00be" + "".join(chr(c) for c in range(0x2150, 0x215F))
)
"""Characters a match of ``_DIGITS_AFTER`` can start with, besides letters (a cheap pre-test)."""
# What may follow any number and make it no count.
_AFTER = re.compile(
    r"(?P<decimal>[ \t]+and[ \t]+(?:a|one)[ \t]+half\b)"
    r"|(?P<plus>[+\uff0b](?![ \t]*\d))"
    r"|[ \t]*(?:\([ \t]*)?(?:(?P<approximate>approximately|approx\b\.?|roughly|give[ \t]+or[ \t]+take|or[ \t]+so\b|"
    r"or[ \t]+thereabouts|\+/-|\u00b1|-[ \t]*ish\b|ish\b)"
    r"|(?P<bound>(?:or|and)[ \t]+(?:more|fewer|less|over|above|up|upwards|greater|higher|lower|under|below)\b|"
    r"at[ \t]+(?:least|most)\b|plus\b(?![ \t]*\d)|max(?:imum)?\b|min(?:imum)?\b))",
    re.IGNORECASE,
)
_AFTER_START = frozenset(" \t(+\uff0b-\u00b1")
"""Characters a match of ``_AFTER`` can start with, besides letters (a cheap pre-test)."""
# What may stand right before a number and make it no count; matched over the whole text in
# one pass, keyed by where the marker (and the spaces after it) end.
_BEFORE = re.compile(
    r"(?:(?P<negative>\b(?:minus|negative))"
    r"|(?P<negated>\b(?:not|never)(?:[ \t]+(?:exactly|quite|even|just|only|precisely))?|n['\u2019]t)"
    r"|(?P<fraction>\bhalf)"
    r"|(?P<approximate>\b(?:about|around|approximately|approx\b\.?|roughly|nearly|almost|circa|ca\.|"
    r"close[ \t]+to|estimated|in[ \t]+the[ \t]+region[ \t]+of)|[~\u2248\u223c\u2243\u00b1\uff5e])"
    r"|(?P<bound>\b(?:at[ \t]+least|at[ \t]+most|(?:more|less|fewer|greater|higher|lower)[ \t]+than|over|under|"
    r"above|below|up[ \t]+to|upwards[ \t]+of|in[ \t]+excess[ \t]+of|beyond|exceeding|minimum(?:[ \t]+of)?|"
    r"maximum(?:[ \t]+of)?|max|min)\b|(?<![\w\-=\"'/])[<>]=?|[\u2264\u2265\u2a7d\u2a7e\u2266\u2267\u226a\u226b\uff1c\uff1e]))"
    r"[ \t]*(?:[:=][ \t]*)?",
    re.IGNORECASE,
)
_ORDINAL_AFTER = re.compile(rf"[ \t]*-[ \t]*(?:{_ORDINAL_WORDS})\b", re.IGNORECASE)
_PRONOUN_ONE = re.compile(
    r"\b(?:each|every|no|any|the|this|that|which|some|another)\s+(one)\b|\b(one)\s+(?:of|another|by|after)\b",
    re.IGNORECASE,
)
_WINDOW = 40
_TIMES = re.compile(r"[ \t]*(?:[xX\u00d7*\u22c5\u00b7]|times|by|multiplied[ \t]+by)[ \t]*", re.IGNORECASE)
_GROUPS_OF = re.compile(
    r"[ \t]+(?:rows?|columns?|groups?|sets?|stacks?|layers?|piles?|clusters?|lines?|towers?|batches?|"
    r"packs?)[ \t]+(?:of|with|containing|each[ \t]+(?:of|with|containing))[ \t]+",
    re.IGNORECASE,
)
_EMPHASIS = re.compile(r"(?<!\w)_{1,3}(?=[^\W_])|(?<=[^\W_])_{1,3}(?!\w)")
"""Markdown emphasis with underscores (``__12__``, ``_twelve_``), not an identifier's (``x_12``)."""
NONE_SPAN = re.compile(r"[\W_]*none(?:[ \t]+at[ \t]+all)?[\W_]*", re.IGNORECASE)
"""An answer span that is only ``none``: the count 0 (``ANSWER: none``, ``"count": "none"``)."""
_NOT_GROSS = re.compile(r"[ \t]*-?[ \t]*(?!of\b)[A-Za-z]")


@dataclass(frozen=True)
class Number:
    """One number mention: where it is, its value when it is a count, and its kind."""

    start: int
    end: int
    value: int | None
    """The count (None unless ``kind == "count"``)."""
    kind: NumberKind
    word: bool = False
    """Written in words."""
    product: bool = False
    """A written product (``3 x 4``), its value the product's."""


# =========================================================================== scanning
def scan_numbers(text: str) -> list[Number]:
    """Every number mention in ``text``, in order, each classified (see the module). Linear time."""
    if "_" in text:
        text = _EMPHASIS.sub(lambda m: " " * len(m.group()), text)  # same length: offsets hold
    marks = {m.end(): m.lastgroup for m in _BEFORE.finditer(text)}
    found = _digit_mentions(text, marks)
    words = _word_mentions(text, marks)
    if not words:
        kept = found
    elif not found:
        kept = words
    else:
        # A word mention inside a digit mention ("2 thousand") is part of it.
        kept = []
        reach = -1
        for n in sorted(found + words, key=lambda n: n.start):
            if n.start < reach:
                continue
            kept.append(n)
            reach = max(reach, n.end)
    return _products(text, kept) if len(kept) > 1 else kept


def _products(text: str, found: list[Number]) -> list[Number]:
    """Products written out (``3 x 4``, ``3 times 4``, ``4 rows of 3``) as one mention of their
    value: the count they state, exactly, never one of their factors."""
    out = [found[0]]
    for n in found[1:]:
        a = out[-1]
        gap = text[a.end : n.start] if n.start - a.end <= 40 else ""
        if not gap.strip(" \t") or not (_TIMES.fullmatch(gap) or _GROUPS_OF.fullmatch(gap)):
            out.append(n)
            continue
        kind: NumberKind = a.kind if a.kind != "count" else n.kind
        value = a.value * n.value if kind == "count" and a.value is not None and n.value is not None else None
        if value is not None and value > MAX_COUNT:
            value, kind = None, "out_of_range"
        out[-1] = Number(a.start, n.end, value, kind, a.word or n.word, product=True)
    return out


def _digit_mentions(text: str, marks: dict[int, str | None]) -> list[Number]:
    out: list[Number] = []
    for m in _DIGITS.finditer(text):
        s, e = m.span()
        if out and s < out[-1].end:
            continue  # the exponent or denominator of the previous mention
        if s > 0 and _is_word_char(text[s - 1]):
            continue  # "x1080", "abc123": glued to a word
        if m.group("hex"):
            out.append(Number(s, e, None, "hex"))
            continue
        value, kind = _classify_digits(m.group("body"))
        if s > 0 and text[s - 1] in ".,\u066b" and (s < 2 or text[s - 2] not in ".\u2026"):
            kind, value = "decimal", None  # ".7", ",7": a decimal fraction without its zero
        nxt = text[e : e + 1]
        after = _DIGITS_AFTER.match(text, e) if nxt and (nxt.isalpha() or nxt in _DIGITS_AFTER_START) else None
        if after is not None:
            what = after.lastgroup
            if what == "glued":
                continue  # "3D", "10s", "1st", "12ish": not a number mention
            if what == "scale":
                if kind == "count":
                    value, kind = _multiply(value, after.group().strip().lower())  # type: ignore[arg-type]
                    e = after.end()
            else:
                out.append(Number(s, after.end(), None, what))  # type: ignore[arg-type]
                continue
        out.append(_context(text, marks, s, e, value, kind, word=False))
    return out


def _multiply(value: int, word: str) -> tuple[int | None, NumberKind]:
    """``value`` times a multiplier word, exactly, or why it is no count."""
    if word in REFUSED_SCALES:
        return None, "scale"
    value *= MULTIPLIERS[word]
    return (value, "count") if value <= MAX_COUNT else (None, "out_of_range")


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _classify_digits(body: str) -> tuple[int | None, NumberKind]:
    if body.isascii() and body.isdigit():
        if len(body.lstrip("0")) > _MAX_DIGITS:
            return None, "out_of_range"
        value = int(body)
        return (value, "count") if value <= MAX_COUNT else (None, "out_of_range")
    if not body.isascii():
        if _INVISIBLE_RE.search(body):
            return None, "broken"
        zeros = {ord(c) - unicodedata.decimal(c, 0) for c in body if c.isdecimal()}
        if len(zeros) > 1:
            return None, "mixed_script"
    seps = _SEPARATORS.findall(body)
    groups = _SEPARATORS.split(body)
    if seps:
        if any(c in ".\u066b" for c in seps):
            return None, "decimal" if len(seps) == 1 else "separator"
        if not (
            all(c == "," for c in seps)
            and 1 <= len(groups[0]) <= 3
            and not (groups[0][0] == "0" and len(groups[0]) == 1)
            and all(len(g) == 3 for g in groups[1:])
        ):
            return None, "separator"
    digits = "".join(groups)
    if len(digits.lstrip("0")) > _MAX_DIGITS:
        return None, "out_of_range"  # the length test first: int() of a huge string is slow
    value = int(digits)
    if value > MAX_COUNT:
        return None, "out_of_range"
    return value, "count"


def _context(
    text: str, marks: dict[int, str | None], s: int, e: int, value: int | None, kind: NumberKind, *, word: bool
) -> Number:
    """Apply what surrounds a mention: a sign, a bound or an approximation makes it no count."""
    raw = text[max(0, s - _WINDOW) : s]
    before = _TRAIL_INVISIBLE.sub("", raw) if raw and raw[-1] in _INVISIBLE_SET else raw
    adjusted = s - (len(raw) - len(before))
    sign = _sign_start(text, before, adjusted, e, s - _WINDOW <= 0)
    if sign is not None:
        return Number(sign, e, None, "negative", word)
    if kind != "count":
        return Number(s, e, value, kind, word)
    marked = marks.get(adjusted)
    if marked == "negative":
        return Number(s, e, None, "negative", word)
    nxt = text[e : e + 1]
    after = _AFTER.match(text, e) if nxt and (nxt.isalpha() or nxt in _AFTER_START) else None
    what = after.lastgroup if after is not None else None
    if what == "plus":
        return Number(s, after.end(), None, "bound", word)  # type: ignore[union-attr]
    if what is not None:
        return Number(s, e, None, what, word)  # type: ignore[arg-type]
    if marked is not None:
        return Number(s, e, None, marked, word)  # type: ignore[arg-type]
    return Number(s, e, value, kind, word)


def _sign_start(text: str, before: str, s: int, e: int, at_start: bool) -> int | None:
    """Where a minus sign in front of the mention starts, or None when there is none.

    A sign glued to the number counts unless a word, digit or closing bracket precedes it (then
    it is a range or a subtraction: ``3-4``, ``x-1``). A sign followed by spaces counts after
    ``:``, ``=``, ``(`` and at the start of a line, unless it is a list bullet (``- 3 red cubes``:
    more text follows the number on that line)."""
    if not before:
        return None
    c = before[-1]
    if c in MINUS_SIGNS:
        rest = before[:-1]
        if rest and rest[-1] in _INVISIBLE_SET:
            rest = _TRAIL_INVISIBLE.sub("", rest)
        prev = rest[-1:]
        if prev and (_is_word_char(prev) or prev in ")]}"):
            return None
        return s - 1
    if c not in " \t":
        return None
    stripped = before.rstrip(" \t")
    if not stripped or stripped[-1] not in MINUS_SIGNS:
        return None
    rest = stripped[:-1].rstrip(" \t")
    prev = rest[-1:]
    if prev in (":", "=", "(", "[", "{"):
        return s - (len(before) - len(stripped)) - 1
    if prev == "\n" or (not prev and at_start):
        line_rest = text[e : e + 200].split("\n", 1)[0]
        if stripped[-1] in "-\u2013\u2014" and re.search(r"[^\W_]", line_rest):
            return None  # a list bullet
        return s - (len(before) - len(stripped)) - 1
    return None


def _word_mentions(text: str, marks: dict[int, str | None]) -> list[Number]:
    out: list[Number] = []
    for m in _WORDS.finditer(text):
        toks = [(t.group().lower(), m.start() + t.start(), m.start() + t.end()) for t in _TOKEN.finditer(m.group())]
        words = [t[0] for t in toks]
        i = 0
        while i < len(toks):
            parsed = _parse_words(words, i)
            if parsed is None:
                i += 1
                continue
            value, j = parsed
            s, e = toks[i][1], toks[j - 1][2]
            head = i
            i = j
            if _ORDINAL_AFTER.match(text, e):
                continue  # "twenty-first"
            kind: NumberKind = "count" if value <= MAX_COUNT else "out_of_range"
            if j < len(toks) and (words[j] in MULTIPLIERS or words[j] in REFUSED_SCALES) and kind == "count":
                if words[j] == "gross" and words[head] == "a" and _NOT_GROSS.match(text, toks[j][2]):
                    continue  # "a gross error": an adjective
                value, kind = _multiply(value, words[j])  # type: ignore[assignment]
                e = toks[j][2]
                i = j + 1
            out.append(_context(text, marks, s, e, value if kind == "count" else None, kind, word=True))
    return out


def _parse_words(toks: list[str], i: int) -> tuple[int, int] | None:
    """The longest number phrase starting at token ``i``: (value, index after it), or None."""
    if toks[i] == "zero":
        return 0, i + 1
    total, last_scale, j, ok = 0, 10**9, i, False
    while j < len(toks):
        group = _below_thousand(toks, j)
        if group is None:
            break
        v, k = group
        scale = _SCALES.get(toks[k]) if k < len(toks) else None
        if scale is not None and scale >= last_scale:
            break  # "one million two million": the second is a number of its own
        if scale is not None:
            total += v * scale
            last_scale, j, ok = scale, k + 1, True
            if j < len(toks) and toks[j] == "and" and j + 1 < len(toks) and _below_thousand(toks, j + 1) is not None:
                nxt = _below_thousand(toks, j + 1)
                assert nxt is not None
                after = toks[nxt[1]] if nxt[1] < len(toks) else ""
                if not (after in _SCALES and _SCALES[after] >= last_scale):
                    j += 1
            continue
        total += v
        j, ok = k, True
        break
    return (total, j) if ok else None


def _below_thousand(toks: list[str], j: int) -> tuple[int, int] | None:
    """A number below 1000 (or "a"/"one" before a scale) at token ``j``: (value, next index)."""
    t = toks[j]
    nxt = toks[j + 1] if j + 1 < len(toks) else ""
    if t == "a":
        if nxt == "hundred":
            return _after_hundred(toks, 100, j + 2)
        return (1, j + 1) if nxt in _SCALES or nxt in ("dozen", "gross", "googol") else None
    small = _below_hundred(toks, j)
    if small is None:
        return None
    v, k = small
    if k < len(toks) and toks[k] == "hundred" and not (v >= 10 and v % 10 == 0):
        return _after_hundred(toks, v * 100, k + 1)
    return v, k


def _after_hundred(toks: list[str], v: int, k: int) -> tuple[int, int]:
    if k < len(toks) and toks[k] == "and" and k + 1 < len(toks):
        rest = _below_hundred(toks, k + 1)
        if rest is not None:
            return v + rest[0], rest[1]
    rest = _below_hundred(toks, k) if k < len(toks) else None
    if rest is not None:
        return v + rest[0], rest[1]
    return v, k


def _below_hundred(toks: list[str], j: int) -> tuple[int, int] | None:
    t = toks[j]
    if t in _TENS:
        if j + 1 < len(toks) and toks[j + 1] in _UNITS and toks[j + 1] != "zero" and _UNITS[toks[j + 1]] < 10:
            return _TENS[t] + _UNITS[toks[j + 1]], j + 2
        return _TENS[t], j + 1
    if t in _UNITS and t != "zero":
        return _UNITS[t], j + 1
    return None


# =========================================================================== reading answers
def pronoun_ones(text: str) -> set[int]:
    """Start offsets of ``one`` used as a pronoun (``each one``, ``one of them``)."""
    return {m.start(g) for m in _PRONOUN_ONE.finditer(text) for g in (1, 2) if m.group(g)}


def count_mentions(text: str) -> list[Number]:
    """``scan_numbers`` without ``one`` used as a pronoun."""
    found = scan_numbers(text)
    if not any(n.word for n in found):
        return found
    pronoun = pronoun_ones(text)
    return [n for n in found if not (n.word and n.start in pronoun and text[n.start : n.end].lower() == "one")]


def decide(found: list[Number]) -> tuple[int | None, str]:
    """The count stated by an answer span's mentions: ``(value, "count")`` or ``(None, why)``."""
    if not found:
        return None, "no number"
    # A negated number (``not 12``) is never the answer; what else the span says may be.
    stated = [n for n in found if n.kind != "negated"]
    if not stated:
        return None, "negated"
    found = stated
    bad = [n.kind for n in found if n.kind != "count"]
    if bad:
        return None, bad[0].replace("_", " ")
    values = sorted({n.value for n in found if n.value is not None})
    if len(values) > 1:
        return None, "several numbers (" + ", ".join(str(v) for v in values[:6]) + ")"
    return values[0], "count"


def read_count(text: str, start: int = 0, end: int | None = None) -> tuple[int | None, str]:
    """The count stated in ``text[start:end]`` (an answer span): every number mention in it a
    count, all of one value. Up to 80 characters of the span's line before ``start`` are read
    too, so a sign or a bound just before it is seen. Returns ``(value, "count")`` or ``(None, why)``."""
    if not isinstance(text, str):
        return None, f"not a text reply ({type(text).__name__})"
    end = len(text) if end is None else end
    line_start = max(text.rfind("\n", 0, start) + 1, start - 2 * _WINDOW)
    line = text[line_start:end]
    offset = start - line_start
    found = [n for n in count_mentions(line) if n.start >= offset or n.end > offset]
    if not found and NONE_SPAN.fullmatch(text, start, end):
        return 0, "count"
    return decide(found)


def parse_count(token: Any) -> tuple[int | None, str]:
    """One answer value under the count grammar: ``(value, "count")`` or ``(None, why)``.

    Accepts an ``int`` (not a bool) or a string, read as an answer span is (``read_count``), so
    a JSON or tool-call ``count`` reads as the same text after ``ANSWER:`` does: ``"12"``,
    ``"__12__"``, ``"twenty-one"``, ``"two dozen"``, ``"none"`` (0). ``why`` is the kind of the
    first mention that is no count (``"negated"``, ``"bound"``, ...) or ``"several numbers (...)"``."""
    if isinstance(token, bool) or not isinstance(token, int | str):
        return None, f"not a count ({type(token).__name__})"
    if isinstance(token, int):
        if 0 <= token <= MAX_COUNT:
            return token, "count"
        return None, "negative" if token < 0 else "out_of_range"
    found = count_mentions(token)
    if not found:
        return (0, "count") if NONE_SPAN.fullmatch(token) else (None, "not a count")
    stated = [n for n in found if n.kind != "negated"] or found
    bad = [n.kind for n in stated if n.kind != "count"]
    if bad:
        return None, bad[0]
    return decide(found)
