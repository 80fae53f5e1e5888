"""The action parser: model reply text (or JSON, or a typed action) -> one validated action.

Model output is untrusted: ``parse_action`` never raises on any string. Rules (Appendix C):
the last JSON action in the reply wins; code fences are tolerated; a truncated tag/erase call is
salvaged by extracting its ``[x, y]`` pairs; points outside [-5, 1005] are dropped and the rest
clipped to [0, 1000]; non-numeric, NaN and infinite coordinates are dropped; a final
``ANSWER: <count>`` line counts as an answer when no JSON action is present: the rest of the last
such line must state exactly one count (``ANSWER: one hundred and five`` is 105; ``3 or 4``,
``3-4``, ``at least 5``, ``1 000``, ``-1`` are invalid). Counts follow the count grammar of
``countgym.envs.numbers`` (a JSON ``count`` is an integer from 0 to ``MAX_COUNT`` or a string
that is exactly one count; floats, booleans and everything else are invalid). Parsing is linear
in the reply's length.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from countgym.envs.actions import ACTION_ADAPTER, TOOLS, Answer, Crop, Erase, Grid, Reply, Tag
from countgym.envs.numbers import MAX_COUNT, parse_count, read_count

COORD_MIN, COORD_MAX = -5.0, 1005.0
MAX_REPLY_CHARS = 200_000
_DECODE_WORK = 4

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*")
_PAIR = re.compile(r"\[\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*,\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*\]")
_TOOL_TAG = re.compile(r'"tool"\s*:\s*"(tag|erase)"')
_REPLACE = re.compile(r'"mode"\s*:\s*"replace"')
_ANSWER = re.compile(r"ANSWER\s*[:=][\s*]*", re.IGNORECASE)
_BRACE = re.compile(r"[{}]")
_TOOL_KEY = re.compile(r'"tool"')


@dataclass(frozen=True)
class ParseResult:
    """What the parser made of one reply."""

    action: Tag | Crop | Erase | Grid | Answer | None
    error: str | None = None
    dropped_range: int = 0
    """Points dropped because they lay outside [-5, 1005]."""
    dropped_invalid: int = 0
    """Points dropped because they were not two finite numbers."""
    salvaged: bool = False
    """True when the action was rebuilt from truncated JSON."""


def parse_action(reply: Any, *, tools: tuple[str, ...] = TOOLS) -> ParseResult:
    """Parse one reply into an action enabled in ``tools`` (``answer`` is always enabled)."""
    try:
        return _parse(reply, tools)
    except Exception as e:  # noqa: BLE001 - model output must never crash the env
        return ParseResult(None, f"unparseable reply ({type(e).__name__})")


def _parse(reply: Any, tools: tuple[str, ...]) -> ParseResult:
    if isinstance(reply, Reply):
        if reply.action is not None:
            return _validate_typed(reply.action, tools)
        reply = reply.text
    if isinstance(reply, Tag | Crop | Erase | Grid | Answer):
        return _validate_typed(reply, tools)
    if isinstance(reply, dict):
        return _from_obj(reply, tools, salvaged=False)
    if not isinstance(reply, str):
        return ParseResult(None, f"unsupported action type {type(reply).__name__}")
    text = reply[-MAX_REPLY_CHARS:]
    text = _FENCE.sub("", text)
    obj = _last_json_action(text)
    if obj is not None:
        return _from_obj(obj, tools, salvaged=False)
    salvaged = _salvage(text)
    if salvaged is not None:
        return _from_obj(salvaged, tools, salvaged=True)
    tail = deque(_ANSWER.finditer(text), maxlen=1)
    if tail:
        last = tail[0]
        # The rest of the last ANSWER line is the answer span: it must state exactly one count.
        end = text.find("\n", last.end())
        value, why = read_count(text, last.end(), end if end >= 0 else len(text))
        if value is None:
            return ParseResult(None, f"answer count must be a whole number from 0 to {MAX_COUNT} ({why})")
        return ParseResult(Answer(count=value))
    return ParseResult(None, "no JSON action found")


def _last_json_action(text: str) -> dict[str, Any] | None:
    """The last decodable JSON object with a ``tool`` key (the outermost one where such objects
    nest), in time linear in the text.

    One pass pairs every ``{`` with its ``}``; only paired openings whose span holds a
    ``"tool"`` key are decoded, from the last one back, so stray braces (any number of them)
    cost nothing. Decoding stops once it has read ``_DECODE_WORK`` times the text's length
    (only deeply nested objects that each hold a ``"tool"`` key get there)."""
    if "tool" not in text:
        return None
    closing: dict[int, int] = {}
    parent: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE.finditer(text):
        if m.group() == "{":
            if stack:
                parent[m.start()] = stack[-1]
            stack.append(m.start())
        elif stack:
            closing[stack.pop()] = m.start()
    if not closing:
        return None
    keys = [m.start() for m in _TOOL_KEY.finditer(text)]
    if not keys:
        return None
    decoder = json.JSONDecoder()
    budget = [_DECODE_WORK * len(text) + 4096]

    def decode(start: int) -> dict[str, Any] | None:
        end = closing[start]
        i = bisect.bisect_right(keys, start)
        if i >= len(keys) or keys[i] > end:
            return None  # no "tool" key inside this object
        budget[0] -= end - start + 1
        if budget[0] < 0:
            raise _OutOfBudget
        try:
            obj, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            return None
        return obj if isinstance(obj, dict) and "tool" in obj else None

    try:
        for start in sorted(closing, reverse=True):
            found = decode(start)
            if found is None:
                continue
            # An action nested inside an enclosing action (a "note" or "previous" field) does
            # not win over it: the outermost enclosing object that is an action is the action.
            outer = parent.get(start)
            while outer is not None:
                if outer in closing:
                    enclosing = decode(outer)
                    if enclosing is not None:
                        found = enclosing
                outer = parent.get(outer)
            return found
    except _OutOfBudget:
        return None
    return None


class _OutOfBudget(Exception):
    """Decoding has read ``_DECODE_WORK`` times the text's length."""


def _salvage(text: str) -> dict[str, Any] | None:
    """Rebuild a truncated tag/erase call from the ``[x, y]`` pairs after its last opening."""
    matches = list(_TOOL_TAG.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    tail = text[m.start() :]
    pairs = [[float(a), float(b)] for a, b in _PAIR.findall(tail)]
    if not pairs:
        return None
    obj: dict[str, Any] = {"tool": m.group(1), "points": pairs}
    if m.group(1) == "tag" and _REPLACE.search(tail):
        obj["mode"] = "replace"
    return obj


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _clean_points(raw: Any) -> tuple[list[tuple[float, float]], int, int] | None:
    """Keep finite in-range points (clipped to [0, 1000]); count what was dropped."""
    if not isinstance(raw, list):
        return None
    kept: list[tuple[float, float]] = []
    out_range = bad = 0
    for p in raw:
        if not isinstance(p, list | tuple) or len(p) != 2:
            bad += 1
            continue
        x, y = _num(p[0]), _num(p[1])
        if x is None or y is None:
            bad += 1
            continue
        if not (COORD_MIN <= x <= COORD_MAX and COORD_MIN <= y <= COORD_MAX):
            out_range += 1
            continue
        kept.append((min(1000.0, max(0.0, x)), min(1000.0, max(0.0, y))))
    return kept, out_range, bad


def _clean_box(raw: Any) -> tuple[float, float, float, float] | None:
    if not isinstance(raw, list | tuple) or len(raw) != 4:
        return None
    vals = [_num(v) for v in raw]
    if any(v is None for v in vals):
        return None
    x1, y1, x2, y2 = (min(1000.0, max(0.0, float(v))) for v in vals)  # type: ignore[arg-type]
    x1, x2 = sorted((x1, x2))
    y1, y2 = sorted((y1, y2))
    if x2 - x1 < 1 or y2 - y1 < 1:
        return None
    return (x1, y1, x2, y2)


def _from_obj(obj: dict[str, Any], tools: tuple[str, ...], *, salvaged: bool) -> ParseResult:
    tool = obj.get("tool")
    if not isinstance(tool, str) or tool not in TOOLS:
        return ParseResult(None, f"unknown tool {str(tool)[:40]!r}")
    if tool != "answer" and tool not in tools:
        return ParseResult(None, f"tool {tool!r} is not available in this episode")
    if tool == "answer":
        value, kind = parse_count(obj.get("count"))
        if value is None:
            return ParseResult(None, f"answer count must be an integer from 0 to {MAX_COUNT} ({kind.replace('_', ' ')})")
        return ParseResult(Answer(count=value))
    if tool == "tag":
        cleaned = _clean_points(obj.get("points"))
        if cleaned is None:
            return ParseResult(None, "tag needs a list of [x,y] points")
        pts, out_range, bad = cleaned
        mode: Literal["append", "replace"] = "replace" if obj.get("mode") == "replace" else "append"
        return ParseResult(Tag(points=pts, mode=mode), None, out_range, bad, salvaged)
    if tool == "crop":
        box = _clean_box(obj.get("box"))
        if box is None:
            return ParseResult(None, "crop needs a box [x1,y1,x2,y2] with positive area")
        return ParseResult(Crop(box=box))
    if tool == "erase":
        if obj.get("box") is not None:
            box = _clean_box(obj.get("box"))
            if box is None:
                return ParseResult(None, "erase box must be [x1,y1,x2,y2] with positive area")
            return ParseResult(Erase(box=box))
        cleaned = _clean_points(obj.get("points"))
        if cleaned is None:
            return ParseResult(None, "erase needs a list of [x,y] points or a box")
        pts, out_range, bad = cleaned
        return ParseResult(Erase(points=pts), None, out_range, bad, salvaged)
    on = obj.get("on", True)
    if not isinstance(on, bool):
        return ParseResult(None, "grid needs \"on\": true or false")
    return ParseResult(Grid(on=on))


def _validate_typed(action: Any, tools: tuple[str, ...]) -> ParseResult:
    """Typed actions go through the same cleaning as parsed JSON."""
    try:
        obj = ACTION_ADAPTER.dump_python(action, mode="json")
    except (ValidationError, TypeError, ValueError) as e:
        return ParseResult(None, f"invalid typed action: {type(e).__name__}")
    return _from_obj(obj, tools, salvaged=False)
