"""Reading one count out of a free-text reply: the count grammar of every task, and the rules
of the single-step video environment (*CountVideoBench*, Section 5.1).

**The count grammar** is ``countgym.envs.numbers`` (re-exported here: ``scan_numbers``,
``parse_count``, ``MAX_COUNT``): a count is the exact whole number a reply states, in digits of
one script or in English number words up to a million; negatives in any notation, decimals,
exponents, ambiguous thousands separators, fractions, percentages, bounds, approximations,
mixed-script digits and digits broken by invisible characters are no count.

**The video rules.** CountVideoBench extracts "the integer when one can be unambiguously
identified and NaN otherwise" (Section 5.1), with a model parser for the free-form replies. The
rules here take every reply whose count can be read without a model; the rest (``value=None``)
can go to the optional model parser at audit time (``countgym audit --parser MODEL``).

1. Reasoning blocks (``<think>...</think>``) and markdown emphasis are removed, and an echo of
   the question is cut out.
2. Numbers that are not counts of the queried object are set aside: frame, row, step and time
   indices (``frame 3``, ``frames 1-10``, ``0:05``), quantities with a unit (``10 frames``,
   ``2.5 seconds``, ``3 of the 10 frames``, ``50%``), ordinals (``3rd``, ``third``), list markers
   at a line start (``1. ...``), ``one`` as a pronoun (``one of``, ``each one``) and, when the
   queried object is known, counts of another object (``3 blue spheres`` when asked for red
   cubes).
3. ``ANSWER:`` lines (also ``Final answer:``) win; the last one decides: exactly one count in it.
4. Otherwise the last count in a total or final phrase (``in total there are 23``, ``a total of
   23``, ``the answer is 23``, ``23 ... altogether``) decides; so does a conclusion that ends the
   reply, after arithmetic or a tally (``..., so 24.``, ``therefore 24``, ``10 + 14 = 24``).
5. Otherwise the counts bound to the queried object (``23 red cubes``, ``no red cubes``; a bare
   ``None.`` is 0) decide when they agree, together with per-frame tallies that leave the noun
   out (``Frame 2 shows 11, frame 9 shows 13 red cubes``): tallies that disagree are no answer.
6. Otherwise the remaining numbers decide when they agree (``23.``); several incompatible values,
   a bound (``more than 20``, ``20+``) or a number that is not a count (``7.5``) is no answer.
7. With ``options`` (MCQ), a run of three or more options in a row is an echo of the option list
   and is ignored, and a count that is not one of the options is no answer.

The result always says why (``reason``). Every step is linear in the length of the text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from countgym.envs.numbers import (
    MAX_COUNT,
    NONE_SPAN,
    Number,
    NumberKind,
    parse_count,
    pronoun_ones,
    scan_numbers,
)

__all__ = [
    "MAX_COUNT", "ExtractResult", "Number", "NumberKind", "Target", "extract_count", "parse_count",
    "scan_numbers", "strip_reasoning", "target_from_question",
]


# =========================================================================== the video rules
@dataclass(frozen=True)
class ExtractResult:
    """The extracted count (None = no answer), why, and which rule decided."""

    value: int | None
    reason: str


@dataclass(frozen=True)
class Target:
    """The queried object: its noun (singular) and optional colour, e.g. ``Target("cube", "red")``."""

    noun: str
    color: str | None = None

    @property
    def nouns(self) -> tuple[str, ...]:
        n = self.noun.lower()
        plural = n[:-1] + "ies" if n.endswith("y") else n + ("es" if n.endswith(("s", "x", "ch", "sh")) else "s")
        return (n, plural)


_COLOR_WORDS = frozenset(
    "red blue green yellow purple orange pink brown black white gray grey cyan magenta violet "
    "golden silver teal".split()
)
_ADJECTIVES = frozenset(
    "small large big tiny little visible distinct different separate individual unique total "
    "identical solid shiny matte metallic rubber bright dark light other more additional "
    "moving rotating static stationary full complete whole 3d clearly".split()
)
_LINK_WORDS = frozenset("of which are is were them these those that being".split())
_GENERIC_NOUNS = frozenset("objects object items item things thing shapes shape ones instances pieces".split())
_SHAPE_NOUNS = frozenset(
    "cube cubes sphere spheres ball balls cylinder cylinders cone cones pyramid pyramids torus "
    "tori box boxes block blocks prism prisms disc discs disk disks ring rings star stars".split()
)
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.IGNORECASE | re.DOTALL)
_ANSWER_LINE = re.compile(r"\b(?:final\s+)?answer\b[ \t]*(?:is[ \t]*)?[:=][ \t]*([^\n]*)", re.IGNORECASE)
_LIST_MARKER = re.compile(r"^[ \t]*\d+[.)][ \t]+\S", re.MULTILINE)
_WINDOW = 48
_EMPHASIS = re.compile(r"(?<!\d)\*\*|\*\*(?!\d)")  # markdown bold, not "10**2"
_UNIT_AFTER = re.compile(
    r"[ \t]*(?:-[ \t]*)?(?:sampled[ \t]+|video[ \t]+|different[ \t]+|key[ \t]*)?(?:frames?|seconds?|secs?|s\b|minutes?|mins?|"
    r"ms\b|fps|hz|%|percent|per[ \t]?cent|degrees?|\u00b0|times|x\b|px|pixels?|rows?|columns?|"
    r"cols?|cm|mm|m\b|meters?|metres?|inch(?:es)?|fold|steps?|images?|views?|clips?)"
    r"|[ \t]+of[ \t]+(?:the[ \t]+|all[ \t]+)?(?:\d+|[a-z]+)[ \t]+(?:sampled[ \t]+)?frames\b"
    r"|:\d",
    re.IGNORECASE,
)
_INDEX_BEFORE = re.compile(
    r"(?:\bframes?|\brows?|\bcolumns?|\bcols?|\bsteps?|\bimages?|\bclips?|\bviews?|#|\bno\.|"
    r"\bt[ \t]*=|\bseconds?|\bminutes?|\bpart|\bphase|\bstage)[ \t]*$|\d:$",
    re.IGNORECASE,
)
_HEDGE_JOIN = re.compile(r"[ \t]*(?:-|\u2013|to|or|and|,|,[ \t]*or)[ \t]*", re.IGNORECASE)
_RANGE_JOIN = re.compile(r"[ \t]*(?:-|\u2013|to|through)[ \t]*$", re.IGNORECASE)
_BOUND_BEFORE = re.compile(
    r"(?:(?:more|fewer|less|greater)[ \t]+than|at[ \t]+least|at[ \t]+most|over|under|up[ \t]+to|above|below)[ \t]*$",
    re.IGNORECASE,
)
_TOTAL_BEFORE = re.compile(
    r"(?:\btotal(?:[ \t]+(?:of|count|number|is|was|comes[ \t]+to))*|\bin[ \t]+total|\baltogether|\bin[ \t]+all|"
    r"\boverall|\bfinal[ \t]+(?:count|answer|tally|number)(?:[ \t]+(?:is|was))?|\banswer[ \t]+(?:is|would[ \t]+be)|"
    r"\bcount[ \t]+(?:is|was)|\bsum[ \t]+(?:is|of)|(?:\bnumber|\bcount)[ \t]+of[ \t]+[a-z \t-]{1,40}?[ \t]+(?:is|was))"
    r"[ \t]*[:=,]?[ \t]*(?:there[ \t]+(?:are|is|were)[ \t]+)?(?:exactly[ \t]+|only[ \t]+)?$",
    re.IGNORECASE,
)
_TOTAL_AFTER = re.compile(
    r"(?:[ \t]+[a-z-]+){0,4}?[ \t]*,?[ \t]*(?:in[ \t]+total|altogether|in[ \t]+all|overall|total)\b",
    re.IGNORECASE,
)
_TALLY_BEFORE = re.compile(
    r"\bframes?[ \t]*(?:#|no\.)?[ \t]*\d+[ \t]*[:,\-\u2013]?[ \t]*(?:(?:it[ \t]+|i[ \t]+)?(?:shows?|has|have|contains?|"
    r"displays?|reveals?|includes?|see|count)|there[ \t]+(?:are|is|were))?[ \t]*(?:only[ \t]+|exactly[ \t]+)?$",
    re.IGNORECASE,
)
_CONCLUSION_BEFORE = re.compile(
    r"(?:\b(?:so|therefore|thus|hence|which[ \t]+(?:makes|gives|is)|that[ \t]+(?:makes|gives|is)|making|giving)"
    r"|(?<![<>!=])=)[ \t]*,?[ \t]*(?:there[ \t]+(?:are|is|were)[ \t]+)?(?:exactly[ \t]+|only[ \t]+)?$",
    re.IGNORECASE,
)
_CONCLUSION_WORDS = ("so", "therefore", "thus", "hence", "makes", "gives", "making", "giving", "which is", "that is", "=")
_BOUND_WORDS = ("than", "least", "most", "over", "under", "up", "above", "below")
_TOTAL_WORDS = ("total", "all", "overall", "answer", "count", "sum", "number", "tally")
_QUESTION_OBJECT = re.compile(
    r"\b(?:how\s+many|count\s+the|total\s+number\s+of)\s+(?:([a-z]+)\s+)?([a-z]+)s\b", re.IGNORECASE
)
_NONE_REPLY = re.compile(r"\W*(?:there\s+are\s+|i\s+see\s+)?none(?:\s+at\s+all)?\W*", re.IGNORECASE)
_LABEL_ENDS = frozenset(":=-\u2013\u2014")
_EQUALS = re.compile(r"[ \t]*(?:=|equals|is)[ \t]*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.,;!?\n]")
_LABEL_BEFORE = re.compile(
    r"((?:[A-Za-z]+[ \t]+){0,2}[A-Za-z]+)[ \t]*(?:[:=\u2013\u2014]|[ \t]-)[ \t]*$"
)
"""A label that names what the number after it counts (``Red cubes: 12``, ``count of red cubes = 12``)."""
_SEPARATOR = re.compile(r"^\s*(?:,|/|or|and|,\s*or|,\s*and)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class _Mention:
    number: Number
    ignored: bool = False
    bound: bool = False
    """A bound (``more than 20``), not a count."""
    noun: str = "none"
    """``target``, ``other``, ``generic`` or ``none``: the noun the number counts."""
    total: bool = False
    tally: bool = False
    """A per-frame tally with the noun left out (``frame 2 shows 11``)."""
    conclusion: bool = False
    """After a conclusion word or an equals sign (``..., so 24``, ``10 + 14 = 24``)."""

    @property
    def value(self) -> int | None:
        return self.number.value


def extract_count(
    text: Any,
    *,
    options: Sequence[int] | None = None,
    question: str | None = None,
    target: Target | None = None,
) -> ExtractResult:
    """The one count a reply commits to, or ``None`` with the reason (see the module rules).

    ``target`` names the queried object, so counts of other objects are set aside; without
    it, the object is read from ``question`` when it has the CountVideoBench form."""
    if text is None:
        return ExtractResult(None, "empty reply")
    if not isinstance(text, str):
        return ExtractResult(None, f"not a text reply ({type(text).__name__})")
    if not text.strip():
        return ExtractResult(None, "empty reply")
    if target is None and question:
        target = target_from_question(question)
    body = _clean(text, question)
    if _NONE_REPLY.fullmatch(body):
        return ExtractResult(0, "the reply is 'none'")
    lines = [m for m in _ANSWER_LINE.finditer(body)]
    if lines:
        line = lines[-1]
        mentions = _mentions(body, options, target, span=line.span(1))
        if not mentions and NONE_SPAN.fullmatch(body, *line.span(1)):
            return _decide_plain([_Mention(Number(*line.span(1), 0, "count", True))], options,
                                 where="answer line", empty="")
        return _decide_plain(mentions, options, where="answer line", empty="answer line without a number")
    mentions = _mentions(body, options, target)
    live = [m for m in mentions if not m.ignored]
    totals = [m for m in live if m.total and m.noun in ("target", "none")]
    if live and live[-1].conclusion and live[-1].noun in ("target", "none"):
        totals.append(live[-1])  # the reply ends on a conclusion: "..., so 24."
    if totals:
        last = totals[-1]
        i = next(k for k, m in enumerate(live) if m is last)
        left = live[i - 1].number if i > 0 else None
        if (
            left is not None and left.product and left.value != last.value
            and _EQUALS.fullmatch(body, left.end, last.number.start)
        ):
            return ExtractResult(None, f"a product ({left.value}) and its stated result ({last.value}) disagree")
        return _decide_plain([last], options, where="total phrase", empty="")
    bound = [m for m in live if m.noun == "target"]
    if bound:
        # Per-frame tallies that leave the noun out count the same object.
        bound = [m for m in live if m.noun == "target" or (m.tally and m.noun == "none")]
        return _decide_plain(bound, options, where="counts of the queried object", empty="")
    rest = [m for m in live if m.noun != "other"]
    if not rest and any(m.noun == "other" for m in live):
        return ExtractResult(None, "only counts of other objects in the reply")
    return _decide_plain(rest, options, where="reply", empty="no number in the reply")


def target_from_question(question: str) -> Target | None:
    """The queried object of a CountVideoBench-style question ("How many red cubes ...",
    "Count the red cubes ...", "... total number of red cubes ..."), or None."""
    m = _QUESTION_OBJECT.search(question[:500])
    if m is None:
        return None
    first, noun = (m.group(1) or "").lower(), m.group(2).lower()
    return Target(noun, first if first in _COLOR_WORDS else None)


def strip_reasoning(text: str) -> str:
    """The reply without reasoning blocks; a block opened by the chat template (only a
    closing ``</think>``) keeps what follows it."""
    body = _THINK.sub(" ", text)
    low = body.lower()
    if "</think>" in low:
        body = body[low.rfind("</think>") + len("</think>") :]
    return body


def _clean(text: str, question: str | None) -> str:
    body = strip_reasoning(text)
    body = _EMPHASIS.sub("", body).replace("__", "").replace("`", "")
    if question:
        words = [re.escape(w) for w in question.split()]
        if words:
            body = re.sub(r"\s+".join(words), " ", body, flags=re.IGNORECASE)
    return body


def _mentions(
    text: str, options: Sequence[int] | None, target: Target | None, span: tuple[int, int] | None = None
) -> list[_Mention]:
    pronoun = pronoun_ones(text)
    markers = {m.start() + len(m.group(0)) - len(m.group(0).lstrip()) for m in _LIST_MARKER.finditer(text)}
    out: list[_Mention] = []
    prev_index_end = -1
    for n in scan_numbers(text):
        if span is not None and not (span[0] <= n.start < span[1]):
            continue
        if n.word and n.start in pronoun and text[n.start : n.end].lower() == "one":
            continue
        if n.start in markers:
            continue  # "1. ..." at a line start
        before = text[max(0, n.start - _WINDOW) : n.start]
        after = text[n.end : n.end + _WINDOW]
        noun = _noun_of(_SENTENCE_END.split(after, 1)[0], target)
        if noun == "none" and before.rstrip(" \t")[-1:] in _LABEL_ENDS:
            label = _LABEL_BEFORE.search(before)
            if label is not None:  # "Red cubes: 12", "blue spheres - 3"
                noun = _noun_of(label.group(1), target)
        tail = before.rstrip(" \t")[-1:]
        ignored = bool(
            (tail.isalpha() or tail in ("#", "=", ".", ":")) and tail != "" and _INDEX_BEFORE.search(before[-16:])
            or _UNIT_AFTER.match(after)
            or (
                noun != "target"
                and prev_index_end >= 0
                and _RANGE_JOIN.fullmatch(text[prev_index_end : n.start])
            )
        )
        if ignored:
            prev_index_end = n.end
            out.append(_Mention(n, ignored=True))
            continue
        prev_index_end = -1
        if after.startswith("+"):
            out.append(_Mention(n, bound=True))
            continue
        # Cheap substring tests first: most mentions need none of the context patterns.
        low, low_after = before.lower(), after.lower()
        total = bool(
            (any(k in low for k in _TOTAL_WORDS) and _TOTAL_BEFORE.search(before))
            or (("total" in low_after or "all" in low_after) and _TOTAL_AFTER.match(after))
        )
        bound = any(k in low for k in _BOUND_WORDS) and bool(_BOUND_BEFORE.search(before[-22:]))
        near = low[-32:]
        tally = noun == "none" and "frame" in low and bool(_TALLY_BEFORE.search(before[-40:]))
        conclusion = any(k in near for k in _CONCLUSION_WORDS) and bool(_CONCLUSION_BEFORE.search(before[-32:]))
        out.append(_Mention(n, bound=bound, noun=noun, total=total, tally=tally, conclusion=conclusion))
    # "20-25 red cubes", "4 or 5 red cubes": a range or hedge counts the noun after its last number.
    for i in range(len(out) - 2, -1, -1):
        a, b = out[i], out[i + 1]
        if (
            a.noun == "none" and b.noun != "none" and not a.ignored and not b.ignored
            and _HEDGE_JOIN.fullmatch(text[a.number.end : b.number.start])
        ):
            out[i] = _Mention(a.number, bound=a.bound, noun=b.noun, total=a.total, conclusion=a.conclusion)
    if target is not None and span is None:
        out.extend(_no_target(text, target))
        out.sort(key=lambda m: m.number.start)
    if options:
        out = _drop_option_echo(text, out, set(options))
    return out


def _noun_of(after: str, target: Target | None) -> str:
    """What the number counts, from the words right after it."""
    words = re.findall(r"[a-z0-9]+", after.lower())[:6]
    colors: list[str] = []
    for w in words:
        if w in _COLOR_WORDS:
            colors.append(w)
            continue
        if w in _ADJECTIVES or w in _LINK_WORDS:
            continue
        if target is not None and w in target.nouns:
            if target.color and any(c != target.color.lower() for c in colors):
                return "other"
            return "target"
        if w in _GENERIC_NOUNS:
            return "generic"
        if target is not None and (w in _SHAPE_NOUNS or colors):
            return "other"
        return "none"
    return "none"


def _no_target(text: str, target: Target) -> list[_Mention]:
    """``no red cubes`` / ``zero cubes`` style statements: a count of 0 bound to the target."""
    nouns = "|".join(re.escape(n) for n in target.nouns)
    color = rf"(?:{re.escape(target.color)}[ \t]+)?" if target.color else ""
    out = []
    for m in re.finditer(rf"\bno[ \t]+{color}(?:{nouns})\b", text, re.IGNORECASE):
        out.append(_Mention(Number(m.start(), m.start() + 2, 0, "count", True), noun="target"))
    return out


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
            and _SEPARATOR.match(text[mentions[j].number.end : mentions[j + 1].number.start])
        ):
            j += 1
        if j - i + 1 >= 3:
            for k in range(i, j + 1):
                keep[k] = False
        i = j + 1
    return [m for m, k in zip(mentions, keep, strict=True) if k]


def _decide_plain(
    mentions: list[_Mention], options: Sequence[int] | None, *, where: str, empty: str
) -> ExtractResult:
    live = [m for m in mentions if not m.ignored]
    if not live:
        return ExtractResult(None, empty or f"no number in the {where}")
    # A negated number ("12 red cubes, not 13") is never the answer.
    stated = [m for m in live if m.number.kind != "negated"]
    if not stated:
        return ExtractResult(None, f"not a count in the {where} (negated)")
    live = stated
    bad = [m.number.kind for m in live if m.number.kind != "count"]
    if bad:
        return ExtractResult(None, f"not a count in the {where} ({bad[0].replace('_', ' ')})")
    values = sorted({m.value for m in live if m.value is not None})
    if len(values) > 1:
        shown = ", ".join(str(v) for v in values[:6])
        return ExtractResult(None, f"several incompatible numbers in the {where} ({shown})")
    if all(m.bound for m in live):
        return ExtractResult(None, f"a bound, not a count, in the {where}")
    value = values[0]
    if options is not None and value not in set(options):
        return ExtractResult(None, f"{value} is not one of the options")
    return ExtractResult(value, f"one number in the {where}")
