"""Strict extraction of one count from a free-text reply (single-step environments).

Shared by the video and counterfactual environments. The rules, in order:

1. Reasoning blocks (``<think>...</think>``) and markdown emphasis are removed; an echo of the
   question (``question=``, matched case- and whitespace-insensitively) is cut out.
2. If the reply has ``ANSWER:`` parts (also ``Final answer:``, ``answer =``), the last one decides
   (the rest of its line): exactly one distinct number in it is the count; none or several is no
   answer. This matches the image environment, where the last ``ANSWER:`` wins.
3. Otherwise every number mention counts: digits (``12``, ``1,000``), number words (zero to
   nineteen, the tens, compounds such as ``twenty-one``/``twenty one``, ``a hundred``/``one hundred``
   and ``... hundred and five``). Not counted: ordinals (``1st``, ``third``), list markers at a
   line start (``1. ...``), ``one`` as a pronoun (``one of``, ``each one``, ``no one``).
4. One distinct value is the count; several incompatible values (ranges, hedges, per-frame
   tallies) are no answer; a decimal, a bound (``more than 20``, ``20+``) or no number at all is
   no answer.
5. With ``options`` (MCQ), a run of three or more options in a row is taken as an echo of the
   option list and ignored, and a count that is not one of the options is no answer.

The result always says why (``reason``), so the episode log records how the count was read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

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
_ORDINAL_WORDS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
    "thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|"
    "thirtieth|fortieth|fiftieth|hundredth"
)
_UNIT_RE = "|".join(sorted(_UNITS, key=len, reverse=True))
_TENS_RE = "|".join(sorted(_TENS, key=len, reverse=True))
# A number word phrase: [unit|tens[-unit]] [hundred [and] [tens[-unit]|unit]] or tens[-unit].
_BELOW_100 = rf"(?:(?:{_TENS_RE})(?:[\s-]+(?:{_UNIT_RE}))?|(?:{_UNIT_RE}))"
_WORD_NUM = re.compile(
    rf"\b(?:(?:a|one|{_UNIT_RE})[\s-]+hundred(?:[\s-]+(?:and[\s-]+)?{_BELOW_100})?|{_BELOW_100})\b",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:(st|nd|rd|th)\b)?")
_ANSWER_LINE = re.compile(r"\b(?:final\s+)?answer\s*(?:is\s*)?[:=]\s*([^\n]*)", re.IGNORECASE)
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.IGNORECASE | re.DOTALL)
_LIST_MARKER = re.compile(r"^\s*\d+[.)]\s+\S", re.MULTILINE)
_PRONOUN_ONE = re.compile(
    r"\b(?:each|every|no|any|the|this|that|which|some|another)\s+one\b|\bone\s+(?:of|another|by)\b",
    re.IGNORECASE,
)
_BOUND_BEFORE = re.compile(
    r"(?:more|fewer|less|greater)\s+than\s*$|(?:at\s+least|at\s+most|over|under|up\s+to|above|below)\s*$",
    re.IGNORECASE,
)
_SEPARATOR = re.compile(r"^\s*(?:,|/|or|and|,\s*or|,\s*and)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class ExtractResult:
    """The extracted count (None = no answer) and why."""

    value: int | None
    reason: str


@dataclass(frozen=True)
class _Mention:
    start: int
    end: int
    value: int | None
    """None for a mention that cannot be a count (a decimal)."""
    bound: bool = False


def extract_count(
    text: str | None,
    *,
    options: Sequence[int] | None = None,
    question: str | None = None,
) -> ExtractResult:
    """The one count a reply commits to, or ``None`` with the reason (see the module rules)."""
    if text is None or not text.strip():
        return ExtractResult(None, "empty reply")
    body = _clean(text, question)
    lines = _ANSWER_LINE.findall(body)
    if lines:
        mentions = _mentions(lines[-1], options)
        return _decide(mentions, options, where="answer line", empty="answer line without a number")
    return _decide(_mentions(body, options), options, where="reply", empty="no number in the reply")


def _clean(text: str, question: str | None) -> str:
    body = _THINK.sub(" ", text)
    body = body.replace("**", "").replace("__", "").replace("`", "")
    if question:
        words = [re.escape(w) for w in question.split()]
        if words:
            body = re.sub(r"\s+".join(words), " ", body, flags=re.IGNORECASE)
    return body


def _mentions(text: str, options: Sequence[int] | None) -> list[_Mention]:
    out: list[_Mention] = []
    taken = [False] * (len(text) + 1)
    skip_spans = [m.span() for m in _PRONOUN_ONE.finditer(text)]
    markers = {
        m.start() + len(m.group(0)) - len(m.group(0).lstrip()) for m in _LIST_MARKER.finditer(text)
    }
    for m in _WORD_NUM.finditer(text):
        if any(a <= m.start() < b for a, b in skip_spans) and m.group(0).lower() == "one":
            continue
        out.append(
            _Mention(m.start(), m.end(), _word_value(m.group(0)), _is_bound(text, m.start()))
        )
        for i in range(m.start(), m.end()):
            taken[i] = True
    for m in _DIGITS.finditer(text):
        if taken[m.start()] or m.group(3):  # inside a word number, or an ordinal (1st, 2nd)
            continue
        if m.start() in markers:
            continue  # "1. ..." at a line start is a list marker
        if text[m.end() : m.end() + 1] == "+":
            out.append(_Mention(m.start(), m.end() + 1, int(m.group(1).replace(",", "")), True))
            continue
        value = None if m.group(2) else int(m.group(1).replace(",", ""))
        out.append(_Mention(m.start(), m.end(), value, _is_bound(text, m.start())))
    out.sort(key=lambda x: x.start)
    if options:
        out = _drop_option_echo(text, out, set(options))
    return out


def _word_value(phrase: str) -> int:
    words = [w for w in re.split(r"[\s-]+", phrase.lower()) if w and w != "and"]
    total, current = 0, 0
    for w in words:
        if w == "hundred":
            total += max(current, 1) * 100
            current = 0
        elif w == "a":
            current = 1
        elif w in _TENS:
            current += _TENS[w]
        else:
            current += _UNITS[w]
    return total + current


def _is_bound(text: str, start: int) -> bool:
    return bool(_BOUND_BEFORE.search(text[max(0, start - 20) : start]))


def _drop_option_echo(text: str, mentions: list[_Mention], options: set[int]) -> list[_Mention]:
    """Remove runs of >= 3 option values separated only by commas / 'or' / 'and'."""
    keep = [True] * len(mentions)
    i = 0
    while i < len(mentions):
        j = i
        while (
            j + 1 < len(mentions)
            and mentions[j].value in options
            and mentions[j + 1].value in options
            and _SEPARATOR.match(text[mentions[j].end : mentions[j + 1].start])
        ):
            j += 1
        if j - i + 1 >= 3:
            for k in range(i, j + 1):
                keep[k] = False
        i = j + 1
    return [m for m, k in zip(mentions, keep, strict=True) if k]


def _decide(
    mentions: list[_Mention], options: Sequence[int] | None, *, where: str, empty: str
) -> ExtractResult:
    if not mentions:
        return ExtractResult(None, empty)
    if any(m.value is None for m in mentions):
        return ExtractResult(None, f"non-integer number in the {where}")
    values = sorted({m.value for m in mentions if m.value is not None})
    if len(values) > 1:
        shown = ", ".join(str(v) for v in values[:6])
        return ExtractResult(None, f"several incompatible numbers in the {where} ({shown})")
    if all(m.bound for m in mentions):
        return ExtractResult(None, f"a bound, not a count, in the {where}")
    value = values[0]
    if options is not None and value not in set(options):
        return ExtractResult(None, f"{value} is not one of the options")
    return ExtractResult(value, f"one number in the {where}")
