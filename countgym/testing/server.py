"""A local OpenAI-compatible chat server that answers like a counting model, with fault injection.

It exists so the litellm path (HTTP, retries, usage, cost) is exercised for real in tests, the
demo and benchmarks without keys or network. The "model" looks at the pixels: it decodes the last
image of the request, finds dark (or red, or any coloured) blobs with ``detect_blobs`` and replies
to whichever protocol prompt of ``envs/templates.py`` it recognises:

=======================  =========================================================================
prompt recognised        reply
=======================  =========================================================================
tool-loop system prompt  first turn: a short thought, then ``{"tool":"tag","points":[...]}`` with
                         every blob centre (tag-1: the first blob only; the full plan is stated in
                         the thought so later turns can read it back); later turns: the next
                         planned point (tag-1) or ``{"tool":"answer","count":<tags it placed>}``
DIRECT                   ``ANSWER: n``
COT                      a sentence of reasoning, then ``ANSWER: n``
LIST                     ``{"points": [...]}`` then ``ANSWER: n``
TILE                     a count sentence, ``{"points": [...]}`` in the crop's frame, ``ANSWER: k``
video PARSER, CF JUDGE   the last integer of the quoted reply, or ``NaN`` when it has none
anything else            ``ANSWER: n``
=======================  =========================================================================

CounterCount and CountVideoBench prompts get blob counts too (``ANSWER: n``, or the MCQ's words),
which are no answers to their questions: the server cannot see attribute counts or which objects
a video asks about. Such replies carry an ``X-Countgym-Blind`` header, and the first one of each
task prints one line on stderr pointing to ``--simulate`` (the stand-in that knows the truth).

With ``tools`` in the request (the native tool protocol) the same decisions come back as
``tool_calls`` (the thought stays in ``content``). ``stream: true`` is answered as server-sent
events (content and tool-call deltas, the finish reason, a usage chunk when
``stream_options.include_usage`` asks for it, then ``[DONE]``).

Faults (``429`` with ``Retry-After``, ``500``, ``503``, ``timeout``, ``malformed``, ``empty``,
``drop``, ``401``, ``400``, ``context``, ``filter``, ``trickle``: headers at once, then the body
one byte every ``trickle_interval_s``) come from an explicit per-request
``schedule`` and/or per-kind probabilities ``faults`` drawn from an RNG seeded by
``(seed, request index)``, so a run's fault sequence is reproducible.

Answer noise (``noise=SIGMA``, ``countgym testserver --noise SIGMA``): counts and points get seeded
errors whose size depends on the recognised prompt (the arm), so the arms of a keyless sweep
differ the way the papers' arms do; see ``countgym.testing.noise``.

Use ``with TestServer(latency_s=0.1) as srv: ... srv.base_url`` or ``countgym testserver``.
"""

from __future__ import annotations

import argparse
import base64
import errno
import functools
import io
import json
import math
import os
import random
import re
import string
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from PIL import Image

from countgym.agents.backends.base import decode_data_url
from countgym.agents.blobs import detect_blobs
from countgym.envs import cf_templates as CT
from countgym.envs import native_tools as NT
from countgym.envs import templates as T
from countgym.envs import video_templates as VT
from countgym.testing.noise import check_noise, noise_rng, noisy_count, noisy_points

FAULT_KINDS: tuple[str, ...] = (
    "429",
    "500",
    "503",
    "timeout",
    "malformed",
    "empty",
    "drop",
    "401",
    "400",
    "context",
    "filter",
    "trickle",
)


# --- prompt recognition -------------------------------------------------------------------------
SYSTEM_ROLES = ("system", "developer")
"""Roles that carry the system prompt (OpenAI's newer models and clients send ``developer``)."""

def _template_regex(template: str) -> re.Pattern[str]:
    """A regex matching a ``str.format`` template, capturing its named fields (first occurrence)."""
    out: list[str] = []
    seen: set[str] = set()
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(re.escape(literal))
        if field is None:
            continue
        if field in seen:
            out.append(f"(?P={field})")
        else:
            seen.add(field)
            out.append(f"(?P<{field}>.+?)")
    return re.compile("".join(out), re.DOTALL)


_SYSTEM_RE = _template_regex(T.SYSTEM)
_NATIVE_SYSTEM_RE = _template_regex(NT.NATIVE_SYSTEM)
_DIRECT_RE = _template_regex(T.DIRECT)
_COT_RE = _template_regex(T.COT)
_LIST_RE = _template_regex(T.LIST)
_TILE_RE = _template_regex(T.TILE)
_PARSER_RE = _template_regex(VT.PARSER)
_JUDGE_RE = _template_regex(CT.JUDGE)
_KIND_RES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("parser", _PARSER_RE),
    ("parser", _JUDGE_RE),
    ("tile", _TILE_RE),
    ("list", _LIST_RE),
    ("cot", _COT_RE),
    ("direct", _DIRECT_RE),
    # The CounterCount formats share their question; the tail after {options} / {name} differs.
    ("cf-mcq", re.compile(re.escape(CT.MCQ.split("{options}", 1)[1]))),
    ("cf-oe", re.compile(re.escape(CT.OE.split("{name}", 1)[1].split("{name}", 1)[0]))),
    *((f"video-{k}", _template_regex(v)) for k, v in VT.PROMPTS.items()),
)
_ONE_POINT_MARK = T.ONE_POINT.split("{", 1)[0]  # "Tag exactly ONE "
_BUDGET_MARK = T.BUDGET_EXHAUSTED.split("{", 1)[0]
_JSON_LINE_RE = re.compile(r"\{.*\}")
_PLAN_RE = re.compile(r"PLAN (\[\[.*?\]\]|\[\])")


def _target_for(obj: str) -> str:
    """Which pixels count as objects, from the object name in the prompt."""
    low = obj.lower()
    if "red" in low:
        return "red"
    if "shape" in low or "object" in low:
        return "any"
    return "dark"


def _text_of(msg: dict[str, Any]) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def _images_of(msg: dict[str, Any]) -> list[str]:
    content = msg.get("content")
    if not isinstance(content, list):
        return []
    urls = []
    for p in content:
        if p.get("type") == "image_url":
            iu = p.get("image_url")
            urls.append(iu.get("url", "") if isinstance(iu, dict) else str(iu))
    return urls


def _normalised_blobs(url: str | None, target: str) -> tuple[list[list[int]], tuple[int, int]]:
    """Blob centres of an image data URL in the normalised [0,1000] frame, and (w, h)."""
    if not url:
        return [], (0, 0)
    pts, size = _blobs_of(url, target)
    return [list(p) for p in pts], size


# Clients re-send the same views (a stimulus's first view, the previous turn's image), so the
# analysis is cached by the exact payload: a hit costs a hash and a compare, not a decode and a
# blob search (about 6 ms a request), and the server stops capping clients on a few cores.
@functools.lru_cache(maxsize=128)
def _blobs_of(url: str, target: str) -> tuple[tuple[tuple[int, int], ...], tuple[int, int]]:
    img = decode_data_url(url)
    h, w = img.shape[:2]
    pts = detect_blobs(img, target=target)
    return tuple((round(x / w * 1000), round(y / h * 1000)) for x, y in pts), (w, h)


def _placed_tags(messages: Sequence[dict[str, Any]]) -> int:
    """Tags this 'model' placed so far, read back from its own assistant turns."""
    n = 0
    for m in messages:
        if m.get("role") != "assistant":
            continue
        lines = [ln for ln in _text_of(m).strip().splitlines() if ln.strip()]
        if not lines:
            continue
        try:
            action = json.loads(lines[-1])
        except ValueError:
            continue
        if isinstance(action, dict) and action.get("tool") == "tag":
            pts = action.get("points") or []
            n = len(pts) if action.get("mode") == "replace" else n + len(pts)
    return n


def _plan(messages: Sequence[dict[str, Any]]) -> list[list[int]] | None:
    """The point plan stated in the first assistant turn (tag-1 mode)."""
    for m in messages:
        if m.get("role") == "assistant":
            hit = _PLAN_RE.search(_text_of(m))
            return json.loads(hit.group(1)) if hit else None
    return None


def prompt_kind(messages: Sequence[dict[str, Any]]) -> str:
    """Which protocol prompt a request carries: ``tool``, ``tile``, ``list``, ``cot``,
    ``direct``, ``cf-mcq``, ``cf-oe``, ``video-P1``/``P2``/``P3``, ``parser`` or ``other``."""
    system = "\n".join(_text_of(m) for m in messages if m.get("role") in SYSTEM_ROLES)
    if _SYSTEM_RE.search(system) or _NATIVE_SYSTEM_RE.search(system):
        return "tool"
    users = [m for m in messages if m.get("role") == "user"]
    last_user = _text_of(users[-1]) if users else ""
    for kind, pattern in _KIND_RES:
        if pattern.search(last_user):
            return kind
    return "other"


BLIND_NOTICE = {
    "countercount": "CounterCount prompts are answered with blob counts of the image, not attribute counts: "
    "this server cannot see CounterCount ground truth, so its scores there mean nothing. For a stand-in "
    "that knows the truth, run with --simulate (countgym run/sweep ... --simulate).",
    "video": "CountVideoBench prompts are answered with blob counts of the last frame, whatever object the "
    "question names: this server cannot see video ground truth, so its scores there mean nothing. For a "
    "stand-in that knows the truth, run with --simulate (countgym run/sweep ... --simulate).",
}
"""The one line the server prints the first time it is asked a task whose truth it cannot see."""
BLIND_HEADER = {
    "countercount": "countercount; blob counts, not attribute counts; use --simulate",
    "video": "video; blob counts of the last frame; use --simulate",
}
"""The ``X-Countgym-Blind`` response header of such a request."""


def blind_task(kind: str) -> str | None:
    """``countercount`` or ``video`` for a prompt kind whose ground truth the blob detector
    cannot see (``prompt_kind``), else None."""
    if kind.startswith("cf-"):
        return "countercount"
    if kind.startswith("video-"):
        return "video"
    return None


def model_reply(messages: Sequence[dict[str, Any]], *, noise: float = 0.0, seed: int = 0) -> str:
    """What the blob-detecting 'model' answers to a chat request (OpenAI wire format).

    ``noise`` > 0 perturbs counts and points by the prompt kind's amount, seeded by ``seed``
    and the request (``countgym.testing.noise``)."""
    kind = prompt_kind(messages)
    rng = noise_rng(seed, kind, messages) if noise > 0 else None

    def count(n: int) -> int:
        return noisy_count(n, noise, kind, rng) if rng is not None else n

    def points(pts: list[list[int]]) -> list[list[int]]:
        return noisy_points(pts, noise, kind, rng) if rng is not None else pts

    system = "\n".join(_text_of(m) for m in messages if m.get("role") in SYSTEM_ROLES)
    users = [m for m in messages if m.get("role") == "user"]
    last_user = _text_of(users[-1]) if users else ""
    all_user = "\n".join(_text_of(m) for m in users)
    images = [u for m in messages for u in _images_of(m)]
    last_image = images[-1] if images else None

    if hit := (_SYSTEM_RE.search(system) or _NATIVE_SYSTEM_RE.search(system)):
        target = _target_for(hit.group("obj"))
        has_turns = any(m.get("role") == "assistant" for m in messages)
        placed = _placed_tags(messages)
        answer = json.dumps({"tool": "answer", "count": placed}, separators=(",", ":"))
        if not has_turns:
            pts = points(_normalised_blobs(last_image, target)[0])
            if _ONE_POINT_MARK in all_user:
                if not pts:
                    return 'I see none.\n{"tool":"answer","count":0}'
                plan = json.dumps(pts, separators=(",", ":"))
                tag = json.dumps({"tool": "tag", "points": pts[:1]}, separators=(",", ":"))
                return f"I see {len(pts)}; I will tag them one by one. PLAN {plan}\n{tag}"
            if not pts:
                return 'I see none.\n{"tool":"answer","count":0}'
            tag = json.dumps({"tool": "tag", "points": pts}, separators=(",", ":"))
            return f"I can see {len(pts)} of them. Tagging each at its centre.\n{tag}"
        if _BUDGET_MARK in last_user:
            return answer
        planned = _plan(messages) if _ONE_POINT_MARK in all_user else None
        if planned is not None and placed < len(planned):
            tag = json.dumps({"tool": "tag", "points": [planned[placed]]}, separators=(",", ":"))
            return f"Tag {placed} looks right. Next one.\n{tag}"
        return f"Every object carries exactly one tag.\n{answer}"

    # The answer parser and the judge: this "model" reads the last integer of the quoted reply.
    if (hit := _PARSER_RE.search(last_user)) or (hit := _JUDGE_RE.search(last_user)):
        numbers = re.findall(r"(?<!\d)\d+(?!\d)", hit.group("response"))
        return numbers[-1] if numbers else "NaN"
    if hit := _TILE_RE.search(last_user):
        pts = points(_normalised_blobs(last_image, _target_for(hit.group("obj")))[0])
        line = json.dumps({"points": pts}, separators=(",", ":"))
        return f"{len(pts)} have their center inside this crop.\n{line}\nANSWER: {len(pts)}"
    if hit := _LIST_RE.search(last_user):
        pts = points(_normalised_blobs(last_image, _target_for(hit.group("obj")))[0])
        line = json.dumps({"points": pts}, separators=(",", ":"))
        return f"{line}\nANSWER: {len(pts)}"
    if hit := _COT_RE.search(last_user):
        n = count(len(_normalised_blobs(last_image, _target_for(hit.group("obj")))[0]))
        return f"Counting region by region, I find {n} in total.\nANSWER: {n}"
    hit = _DIRECT_RE.search(last_user)
    # Video objects are coloured solids on a light floor: any non-background colour.
    target = _target_for(hit.group("obj")) if hit else ("any" if kind.startswith("video-") else "dark")
    return f"ANSWER: {count(len(_normalised_blobs(last_image, target)[0]))}"


def native_to_text(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A native tool-calling conversation in the JSON protocol's shape: an assistant turn's
    first tool call becomes its JSON action line, a tool result a user turn (the image-only user
    turn that carries the tool's image is merged into it)."""
    out: list[dict[str, Any]] = []
    after_tool = False
    for m in messages:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            action = NT.call_to_action(m["tool_calls"][0])
            line = json.dumps(action, separators=(",", ":")) if isinstance(action, dict) else ""
            out.append({"role": "assistant", "content": f"{_text_of(m)}\n{line}".strip()})
        elif role == "tool":
            if after_tool:  # a not-executed note for a further call of the same reply
                continue
            out.append({"role": "user", "content": [{"type": "text", "text": _text_of(m)}]})
            after_tool = True
            continue
        elif role == "user" and after_tool and not _text_of(m).strip():
            out[-1] = {"role": "user", "content": [*(m.get("content") or []), *out[-1]["content"]]}
        else:
            out.append(dict(m))
        after_tool = False
    return out


def to_tool_calls(text: str, index: int) -> tuple[str, list[dict[str, Any]] | None]:
    """Split a JSON-protocol reply into (thought, native tool calls); no action line: no calls."""
    head, _, last = text.strip().rpartition("\n")
    try:
        action = json.loads(last)
    except ValueError:
        return text, None
    if not isinstance(action, dict) or not isinstance(action.get("tool"), str):
        return text, None
    name = action.pop("tool")
    call = {"id": f"call_{index}_0", "type": "function",
            "function": {"name": name, "arguments": json.dumps(action, separators=(",", ":"))}}
    return head.strip(), [call]


_URL_KEYS = (b'"url":"data:', b'"url": "data:')
_SPLICED_MIN = 4096
"""Data URLs shorter than this are left to the JSON parser."""


def loads_body(raw: bytes) -> Any:
    """A request body's JSON, with every long image data URL cut out before parsing and put back
    after (``json.loads`` reads each of a video request's 2.8 MB of base64 one character at a
    time; finding where a URL ends is one ``bytes.find``). The result equals ``json.loads(raw)``:
    only a ``"url"`` value that starts with ``data:``, holds no backslash (no escape to decode)
    and ends at the next quote is cut, and a body that still fails to parse is parsed whole."""
    pieces: list[bytes | memoryview] = []
    urls: list[str] = []
    token = b"countgym-spliced-" + os.urandom(8).hex().encode() + b"-"
    pos, view = 0, memoryview(raw)
    for key in _URL_KEYS:
        if key not in raw:
            continue
        start = raw.find(key, pos)
        while start >= 0:
            begin = start + len(key) - len(b"data:")
            end = raw.find(b'"', begin)
            if end < 0:
                break
            if end - begin >= _SPLICED_MIN and raw.find(b"\\", begin, end) < 0:
                try:
                    url = str(view[begin:end], "ascii")
                except UnicodeDecodeError:  # left to the parser, which reads it as UTF-8
                    url = ""
                if url:
                    pieces += [view[pos:begin], token, str(len(urls)).encode()]
                    urls.append(url)
                    pos = end
            start = raw.find(key, end)
        break
    if not urls:
        return json.loads(raw)
    pieces.append(view[pos:])
    try:
        body = json.loads(b"".join(pieces))
    except ValueError:
        return json.loads(raw)
    if _put_back(body, token.decode(), urls) != len(urls):
        return json.loads(raw)  # a cut value under another key: parse it as it came
    return body


def _put_back(body: Any, prefix: str, urls: list[str]) -> int:
    """Replace each ``"url"`` value ``<prefix><k>`` in the parsed body with ``urls[k]``; the
    number replaced (-1 for a value with the prefix that names no cut URL)."""
    stack, done = [body], 0
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            url = node.get("url")
            if isinstance(url, str) and url.startswith(prefix):
                k = url[len(prefix):]
                if not (k.isdigit() and int(k) < len(urls)):
                    return -1  # the token was in the body already: parse it as it came
                node["url"] = urls[int(k)]
                done += 1
            stack.extend(v for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return done


def image_size(url: str) -> tuple[int, int]:
    """(width, height) of an image data URL from its header, without decoding the pixels (a
    PNG's from its first 24 bytes: signature, then the IHDR chunk's width and height; a JPEG's
    from its first 3 kB or, failing that, 48 kB, which hold the frame header of any file without
    a large metadata segment; else from the whole file)."""
    start = url.find(",") + 1
    first = url[start : start + 32]
    head = base64.b64decode(first + "=" * (-len(first) % 4))
    if len(head) == 24 and head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
        w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        if w > 0 and h > 0:
            return w, h
    if head[:2] == b"\xff\xd8":
        for chars in _JPEG_HEADS:
            size = _jpeg_frame_size(base64.b64decode(url[start : start + chars]))
            if size is not None:
                return size
        for chars in _JPEG_HEADS:
            if len(url) - start <= chars:
                break
            try:
                with Image.open(io.BytesIO(base64.b64decode(url[start : start + chars]))) as im:
                    return im.size
            except (OSError, ValueError, SyntaxError):
                continue  # the frame header lies further in
    return _decoded_size(url[start:])


_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def _jpeg_frame_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) from the frame header among a JPEG's first bytes ``head``, walking the
    marker segments before it; None when it is not within ``head``."""
    pos = 2
    while pos + 9 <= len(head):
        if head[pos] != 0xFF:
            return None
        marker = head[pos + 1]
        if marker == 0xFF:  # a fill byte
            pos += 1
            continue
        if marker in _SOF_MARKERS:
            h, w = struct.unpack_from(">HH", head, pos + 5)
            return (w, h) if w and h else None
        if marker in (0xD9, 0xDA):  # end of image or a scan before any frame header
            return None
        pos += 2 + struct.unpack_from(">H", head, pos + 2)[0]
    return None


_JPEG_HEADS = (4096, 65536)
"""Base64 characters of a JPEG read for its size (3 kB, then 48 kB), before the whole file."""


@functools.lru_cache(maxsize=128)
def _decoded_size(payload: str) -> tuple[int, int]:
    with Image.open(io.BytesIO(base64.b64decode(payload))) as im:
        return im.size


def estimate_usage(
    messages: Sequence[dict[str, Any]], reply: str, reasoning: int
) -> dict[str, Any]:
    """Plausible token usage: ~4 characters per text token, OpenAI's tile formula per image."""
    text_chars = sum(len(_text_of(m)) for m in messages)
    image_tokens = 0
    for m in messages:
        for url in _images_of(m):
            try:
                w, h = image_size(url)
            except Exception:  # an undecodable image still costs the base amount
                h = w = 512
            image_tokens += 85 + 170 * (-(-w // 512)) * (-(-h // 512))
    prompt = text_chars // 4 + image_tokens + 3 * len(messages)
    completion = len(reply) // 4 + 1 + reasoning
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


# --- settings ------------------------------------------------------------------------------------
def _check_settings(
    port: Any, latency_s: Any, faults: dict[str, Any], retry_after: Any, timeout_sleep_s: Any
) -> None:
    """Raise ``ValueError`` (one line) for a setting the server cannot honour."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer from 0 to 65535 (0 = any free port), got {port!r}")
    for name, v in (("latency", latency_s), ("retry-after", retry_after), ("timeout sleep", timeout_sleep_s)):
        if not _finite_at_least_0(v):
            raise ValueError(f"{name} must be a finite number of seconds >= 0, got {v!r}")
    for kind, prob in faults.items():
        if not (_finite_at_least_0(prob) and prob <= 1):
            raise ValueError(f"fault probability of {kind} must be from 0 to 1, got {prob!r}")
    total = sum(faults.values())
    if total > 1 + 1e-9:
        raise ValueError(f"fault probabilities add up to {total:g}; they must add up to at most 1")


def _finite_at_least_0(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def warm_detector() -> None:
    """Import what the blob detector needs (scipy's ``ndimage``: about a second) now, so that no
    request pays for it: the first 64 requests of a benchmark arrived while one of them imported
    it, and went out up to a quarter of a second after their latency."""
    import scipy.ndimage  # noqa: F401


# --- the HTTP server ----------------------------------------------------------------------------
class TestServer:
    """A background-thread OpenAI-compatible server on 127.0.0.1 (context manager).

    Args:
        port: TCP port; 0 picks a free one (see ``base_url``).
        latency_s: simulated model latency: every answer is sent this long after its request
            arrived (the server's own work happens within it).
        faults: per-kind fault probabilities, e.g. ``{"429": 0.1, "500": 0.05}``.
        schedule: explicit faults for the first requests (``None`` or ``"ok"`` = answer normally);
            after it ends, ``faults`` applies.
        seed: seed of the fault RNG (drawn per request index, so order of arrival across threads
            does not change which request index fails).
        retry_after: value of the ``Retry-After`` header sent with 429s (seconds).
        timeout_sleep_s: how long a ``timeout`` fault stalls before answering normally.
        reasoning_tokens: reasoning tokens reported per reply (included in completion tokens);
            0 for a request that turns reasoning off (``chat_template_kwargs.enable_thinking``
            false, ``reasoning_effort`` "none", or OpenRouter's ``reasoning`` effort "none").
        trickle_interval_s: seconds between the body's bytes under a ``trickle`` fault.
        noise: SIGMA of the seeded answer noise (0 = a perfect blob counter): counts and points
            get errors whose size depends on the arm's prompt (``countgym.testing.noise``),
            drawn from ``seed`` and the request, so a keyless sweep shows differences between
            arms and reruns give the same replies.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        port: int = 0,
        *,
        latency_s: float = 0.0,
        faults: dict[str, float] | None = None,
        schedule: Sequence[str | None] | None = None,
        seed: int = 0,
        retry_after: float = 1,
        timeout_sleep_s: float = 3.0,
        reasoning_tokens: int = 16,
        trickle_interval_s: float = 2.0,
        noise: float = 0.0,
    ) -> None:
        bad = [k for k in (faults or {}) if k not in FAULT_KINDS]
        bad += [str(k) for k in (schedule or []) if k not in (None, "ok", *FAULT_KINDS)]
        if bad:
            raise ValueError(f"unknown fault kind(s) {bad}; use {', '.join(FAULT_KINDS)}")
        _check_settings(port, latency_s, faults or {}, retry_after, timeout_sleep_s)
        self.noise = check_noise(noise)
        self.port = port
        self.latency_s = latency_s
        self.faults = dict(faults or {})
        self.schedule = list(schedule or [])
        self.seed = seed
        self.retry_after = retry_after
        self.timeout_sleep_s = timeout_sleep_s
        self.reasoning_tokens = reasoning_tokens
        self.trickle_interval_s = trickle_interval_s
        self.request_count = 0
        self.fault_counts: Counter[str] = Counter()
        self.last_request: dict[str, Any] | None = None
        self.last_headers: dict[str, str] = {}
        self.blind_notices: set[str] = set()
        """The tasks whose ground truth the server cannot see that it has been asked about
        (``countercount``, ``video``); each is announced once on stderr."""
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (the ``api_base`` to give litellm)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> TestServer:
        """Bind and serve in a daemon thread, ready to answer at full speed (``warm_detector``)."""
        warm_detector()
        handler = type("Handler", (_Handler,), {"server_state": self})
        httpd = _Server(("127.0.0.1", self.port), handler)
        self.port = httpd.server_address[1]
        self._httpd = httpd
        # A short poll interval makes stop() return in ~50 ms instead of the default 0.5 s.
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="countgym-testserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> TestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def answer(self, messages: list[dict[str, Any]], body: dict[str, Any], headers: Any) -> str:
        """The reply text to a request's messages (JSON protocol; a subclass may answer from
        ``body`` and ``headers`` too); an exception is answered as a 400."""
        return model_reply(messages, noise=self.noise, seed=self.seed)

    def blind_notice(self, messages: Sequence[dict[str, Any]]) -> str | None:
        """The ``X-Countgym-Blind`` header value for a CounterCount or video prompt (the server
        counts blobs; it cannot see attribute counts or which objects a video asks for), None
        otherwise. The first such request of each task prints one line to stderr."""
        task = blind_task(prompt_kind(messages))
        if task is None:
            return None
        with self._lock:
            first = task not in self.blind_notices
            self.blind_notices.add(task)
        if first:
            sys.stderr.write(f"countgym testserver: {BLIND_NOTICE[task]}\n")
            sys.stderr.flush()
        return BLIND_HEADER[task]

    def next_fault(self) -> tuple[int, str | None]:
        """The index of the arriving request and the fault it gets (deterministic per index)."""
        with self._lock:
            i = self.request_count
            self.request_count += 1
        if i < len(self.schedule):
            fault = self.schedule[i]
            fault = None if fault == "ok" else fault
        else:
            rng = random.Random(self.seed * 1_000_003 + i)
            u = rng.random()
            fault, acc = None, 0.0
            for kind, p in self.faults.items():
                acc += p
                if u < acc:
                    fault = kind
                    break
        if fault is not None:
            with self._lock:
                self.fault_counts[fault] += 1
        return i, fault


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 resets connections when 64 clients connect at once.
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out or hang up mid-reply are part of the fault tests, not errors.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server_state: TestServer
    protocol_version = "HTTP/1.1"  # keep-alive, like a real provider, so clients pool connections
    # Headers and body go out in two writes; with Nagle on, the client's delayed ACK adds ~40 ms.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # quiet: tests and benchmarks would drown in access lines

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [{"id": "blob", "object": "model"}]})
        else:
            self._send_json(
                404, {"error": {"message": "not found", "type": "invalid_request_error"}}
            )

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        state = self.server_state
        # The latency runs from the request's arrival: the reply is worked out while the simulated
        # model "thinks", so the server's own work is not added on top of it (and 64 requests that
        # arrive together are not queued behind each other's image analysis).
        arrived = time.monotonic()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(
                404,
                {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}},
            )
            return
        try:
            body = loads_body(raw)
            messages = body["messages"]
        except (ValueError, KeyError, TypeError):
            self._send_json(
                400, {"error": {"message": "invalid JSON body", "type": "invalid_request_error"}}
            )
            return
        with state._lock:
            state.last_request = body
            state.last_headers = {k.lower(): v for k, v in self.headers.items()}
        index, fault = state.next_fault()
        if fault == "drop":
            # Close without a response: the client sees a dropped connection.
            self.close_connection = True
            return
        if fault == "timeout":
            time.sleep(state.timeout_sleep_s)
            arrived = time.monotonic()
        if fault and fault not in ("empty", "filter", "trickle"):
            self._wait(arrived)
            if self._send_fault(fault):
                return
        model = str(body.get("model", "blob"))
        if fault == "empty":
            self._wait(arrived)
            self._send_json(
                200, _envelope(index, model, None, {"prompt_tokens": 1, "completion_tokens": 0})
            )
            return
        tool_calls = None
        try:
            native = bool(body.get("tools"))
            text = state.answer(native_to_text(messages) if native else messages, body, self.headers)
            if native:
                text, tool_calls = to_tool_calls(text, index)
        except Exception as e:  # a bad image in the request is the client's fault
            self._wait(arrived)
            self._send_json(
                400,
                {
                    "error": {
                        "message": f"cannot read request: {e}",
                        "type": "invalid_request_error",
                    }
                },
            )
            return
        blind = state.blind_notice(messages)
        extra = {"X-Countgym-Blind": blind} if blind else None
        usage = estimate_usage(messages, text, 0 if _thinking_off(body) else state.reasoning_tokens)
        finish = "content_filter" if fault == "filter" else ("tool_calls" if tool_calls else "stop")
        reply = _envelope(index, model, text if fault != "filter" else "", usage, finish, tool_calls)
        self._wait(arrived)
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send_stream(_stream_chunks(reply, include_usage=include), extra)
        else:
            self._send_json(
                200, reply, extra, trickle_s=state.trickle_interval_s if fault == "trickle" else None
            )

    def _wait(self, arrived: float) -> None:
        """Sleep until the simulated latency has passed since ``arrived``."""
        left = self.server_state.latency_s - (time.monotonic() - arrived)
        if left > 0:
            time.sleep(left)

    def _send_stream(self, chunks: list[dict[str, Any]], headers: dict[str, str] | None = None) -> None:
        """Server-sent events, ending with ``data: [DONE]``."""
        payload = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
        payload += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)

    def _send_fault(self, fault: str) -> bool:
        """Send an error response for ``fault``; False when the fault is not an HTTP error."""
        errors = {
            "429": (
                429,
                "Rate limit reached for requests",
                "rate_limit_error",
                "rate_limit_exceeded",
            ),
            "500": (
                500,
                "The server had an error while processing your request",
                "server_error",
                None,
            ),
            "503": (503, "The engine is currently overloaded", "server_error", None),
            # Real providers echo (part of) the key back; the client must scrub it.
            "401": (
                401,
                f"Incorrect API key provided: {_bearer(self.headers.get('Authorization', ''))}.",
                "invalid_request_error",
                "invalid_api_key",
            ),
            "400": (400, "Invalid request: bad parameter", "invalid_request_error", None),
            "context": (
                400,
                "This model's maximum context length is 128 tokens. However, your messages resulted in 9999 tokens.",
                "invalid_request_error",
                "context_length_exceeded",
            ),
        }
        if fault == "malformed":
            payload = b'{"id": "chatcmpl-x", "choices": [{"message": {"content": "trunc'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return True
        if fault not in errors:
            return False
        status, msg, kind, code = errors[fault]
        extra = {"Retry-After": f"{self.server_state.retry_after:g}"} if status == 429 else {}
        self._send_json(
            status, {"error": {"message": msg, "type": kind, "param": None, "code": code}}, extra
        )
        return True

    def _send_json(
        self, status: int, obj: Any, headers: dict[str, str] | None = None, trickle_s: float | None = None
    ) -> None:
        payload = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if trickle_s is None:
            self.wfile.write(payload)
            return
        # A server that never stalls long enough for a read timeout, yet never finishes.
        self.close_connection = True
        for i in range(len(payload)):
            self.wfile.write(payload[i : i + 1])
            self.wfile.flush()
            time.sleep(trickle_s)


def _thinking_off(body: dict[str, Any]) -> bool:
    """True when the request turns reasoning off the way vLLM, OpenAI or OpenRouter accept."""
    template = body.get("chat_template_kwargs") or {}
    reasoning = body.get("reasoning") or {}
    return (
        (isinstance(template, dict) and template.get("enable_thinking") is False)
        or body.get("reasoning_effort") == "none"
        or (isinstance(reasoning, dict) and (reasoning.get("effort") == "none" or reasoning.get("enabled") is False))
    )


def _bearer(header: str) -> str:
    return header.split(" ", 1)[1] if " " in header else header


def _envelope(
    index: int,
    model: str,
    text: str | None,
    usage: dict[str, Any],
    finish: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    choices = [] if text is None else [{"index": 0, "message": message, "finish_reason": finish}]
    return {
        "id": f"chatcmpl-countgym-{index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def _stream_chunks(reply: dict[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """A chat completion as ``chat.completion.chunk`` objects: role, content in two pieces,
    tool calls, finish reason, and (when asked) a last chunk with the usage."""
    base = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out: list[dict[str, Any]] = []
    if reply["choices"]:
        choice = reply["choices"][0]
        msg = choice["message"]
        text = msg.get("content") or ""
        out.append(chunk({"role": "assistant", "content": ""}))
        half = len(text) // 2
        for piece in (text[:half], text[half:]):
            if piece:
                out.append(chunk({"content": piece}))
        for i, call in enumerate(msg.get("tool_calls") or []):
            out.append(chunk({"tool_calls": [{"index": i, **call}]}))
        out.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        out.append({**base, "choices": [], "usage": reply["usage"]})
    return out


# --- command line -------------------------------------------------------------------------------
def _parse_faults(spec: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        kind, sep, p = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"bad fault {item!r}: use KIND=PROB, e.g. 429=0.1")
        try:
            out[kind.strip()] = float(p)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad probability in {item!r}") from None
    return out


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a mistake as one line and exit code 2 (like ``countgym``)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"countgym testserver: error: {message} (see 'countgym testserver --help')\n")
        sys.exit(2)


def main(argv: Sequence[str] | None = None) -> int:
    """``countgym testserver``: serve until interrupted; prints the base URL first."""
    ap = _OneLineParser(prog="countgym testserver", description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
    ap.add_argument("--latency", type=float, default=0.0, help="simulated model latency in seconds, from the request's arrival to its answer")
    ap.add_argument(
        "--faults", type=_parse_faults, default={}, help="e.g. 429=0.1,500=0.05,drop=0.02"
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault schedule and of the answer noise")
    ap.add_argument(
        "--noise", type=float, default=0.0, metavar="SIGMA",
        help="seeded answer noise (default 0: exact blob counts): a count n gets an error of "
        "standard deviation SIGMA x n x the arm's scale (tool loop 0.25, list 0.6, cot 0.8, "
        "direct 1; video P1 1, P2 0.7, P3 1.4; CounterCount MCQ 0.5, OE 1), tags get the same "
        "count error plus jitter, so a keyless sweep shows differences between arms; e.g. 0.1",
    )
    ap.add_argument(
        "--retry-after", type=float, default=1, help="Retry-After seconds sent with 429s"
    )
    args = ap.parse_args(argv)
    try:
        srv = TestServer(
            args.port,
            latency_s=args.latency,
            faults=args.faults,
            seed=args.seed,
            retry_after=args.retry_after,
            noise=args.noise,
        )
        srv.start()
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            print(f"countgym testserver: error: {e}", file=sys.stderr)
        else:  # "[Errno 98] Address already in use" does not say which address, nor what to do
            print(f"countgym testserver: error: port {args.port} on 127.0.0.1 is already in use (another "
                  "test server?): pick another with --port N, or --port 0 for any free port", file=sys.stderr)
        return 2
    except (ValueError, OverflowError) as e:
        print(f"countgym testserver: error: {e}", file=sys.stderr)
        return 2
    noisy = f", answer noise {srv.noise:g} (seed {srv.seed})" if srv.noise else ""
    print(f"countgym test server at {srv.base_url} (model: openai/blob{noisy})", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
