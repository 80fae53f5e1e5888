"""The baseline arms of *Give the Model a Finger* (Section 3, Appendix B) as policies.

Every arm is a policy over a ``ChatModel`` plus the environment options it needs:

=========  ======================  ======  ======  =====  =======  ======================================
arm        tools                   budget  verify  tag-1  prompt   policy
=========  ======================  ======  ======  =====  =======  ======================================
direct     answer                  1       no      no     direct   ``ChatPolicy`` (one call)
cot        answer                  1       no      no     cot      ``ChatPolicy`` (one call)
list       tag, answer             2       no      no     list     ``ListPolicy``: points -> Tag, Answer
tag        tag, answer             6       yes     no     tools    ``ChatPolicy`` (tool loop)
tag+crop   tag, crop, answer       6       yes     no     tools    ``ChatPolicy``
full       tag, crop, erase, grid  6       yes     no     tools    ``ChatPolicy``
tiles      tag, answer             2       no      no     tiles    ``TilesPolicy``: 4 tile calls -> Tag
tag-1      tag (one point)         80      yes     yes    tools    ``ChatPolicy``
=========  ======================  ======  ======  =====  =======  ======================================

``direct``/``cot`` get a budget of 1 only so an invalid reply is re-asked rather than ending on
budget exhaustion; they have no tools to spend it on. ``list``/``tiles`` make exactly one tag call,
submitted by the policy; the spare call keeps their answer step off the budget-exhausted path (an
unparseable ``list`` reply must end ``invalid``, not be scored as its number of points).

Ablations (``arm_env_options``): ``verify=False``, ``numbered=False``, ``extra_tools=("grid",)``,
``budget=T``, ``order="reading"|"reverse"``, ``perturb="remove"|"add"`` apply to the tool-loop
arms; ``thinking=False`` goes to the backend (``arm_backend_options``).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from PIL import Image

from countgym.agents.backends.base import (
    ChatModel,
    EncodedImage,
    Message,
    encoded_image,
    image_part,
    message,
    sum_cost,
    sum_usage,
    text_part,
)
from countgym.agents.backends.factory import make_backend
from countgym.agents.base import ArmFamily, Task
from countgym.agents.context import KEEP_IMAGES, apply_context_policy
from countgym.bounded_cache import BoundedCache
from countgym.envs import native_tools as NT
from countgym.envs import templates as T
from countgym.envs.actions import Answer, Reply, Tag
from countgym.envs.numbers import read_count
from countgym.envs.originals import view_key
from countgym.errors import UserError

PolicyKind = Literal["chat", "list", "tiles"]
EXTRA_TOOLS: tuple[str, ...] = ("crop", "erase", "grid")
TOOL_ORDER: tuple[str, ...] = ("tag", "crop", "erase", "grid")


@dataclass(frozen=True)
class ArmDef:
    """One baseline arm: which policy runs it and the environment options it needs."""

    name: str
    kind: PolicyKind
    """``chat`` (model replies go to the env), ``list`` or ``tiles`` (the policy submits actions)."""
    tools: tuple[str, ...]
    """Enabled tools besides ``answer`` (always available)."""
    budget: int
    """Tool-call budget T."""
    verify: bool
    """Verification prompt after tag calls."""
    prompt: str
    """First-message protocol: ``tools``, ``direct``, ``cot``, ``list`` or ``tiles``."""
    one_point_per_call: bool = False
    """tag-1: one point per tag call."""
    description: str = ""

    @property
    def tool_loop(self) -> bool:
        """True for the arms whose model sees the tool loop (ablations apply to these)."""
        return self.prompt == "tools"

    def env_options(self) -> dict[str, Any]:
        """The arm's full environment option dict (defaults of the ablations included)."""
        return {
            "tools": self.tools,
            "budget": self.budget,
            "verify": self.verify,
            "numbered": True,
            "one_point_per_call": self.one_point_per_call,
            "order": None,
            "perturb": None,
            "prompt": self.prompt,
        }


ARMS: dict[str, ArmDef] = {
    a.name: a
    for a in (
        ArmDef(
            "direct", "chat", (), 1, False, "direct", description="answer-only prompt, one call"
        ),
        ArmDef("cot", "chat", (), 1, False, "cot", description="think step by step, then ANSWER"),
        ArmDef(
            "list", "list", ("tag",), 2, False, "list", description="blind pointing in one call"
        ),
        ArmDef("tag", "chat", ("tag",), 6, True, "tools", description="tag loop with verification"),
        ArmDef(
            "tag+crop", "chat", ("tag", "crop"), 6, True, "tools", description="tag loop plus crop"
        ),
        ArmDef("full", "chat", TOOL_ORDER, 6, True, "tools", description="tag, crop, erase, grid"),
        ArmDef("tiles", "tiles", ("tag",), 2, False, "tiles", description="scripted 2x2 partition"),
        ArmDef(
            "tag-1", "chat", ("tag",), 80, True, "tools", True, "one point per tag call, T = 80"
        ),
    )
}


def _arm(arm: str) -> ArmDef:
    if arm not in ARMS:
        raise UserError(f"unknown arm {arm!r}: use one of {', '.join(ARMS)}")
    return ARMS[arm]


def arm_env_options(
    arm: str,
    *,
    verify: bool | None = None,
    numbered: bool | None = None,
    extra_tools: Sequence[str] = (),
    budget: int | None = None,
    order: str | None = None,
    perturb: str | None = None,
    thinking: bool | None = None,
    protocol: str | None = None,
) -> dict[str, Any]:
    """The environment options of ``arm`` with ablations applied.

    ``protocol="native"`` runs the tool loop over native tool calls (``json``, the paper's
    protocol, is the default and is not written into the options).

    Tool-loop ablations on an arm whose model never sees the tool loop (direct, cot, list,
    tiles) are a configuration mistake and raise ``UserError``. ``thinking`` is accepted so one
    ablation dict can feed both this and ``arm_backend_options``; it changes no env option.
    """
    a = _arm(arm)
    opts = a.env_options()
    changes: dict[str, Any] = {}
    if verify is not None and verify != a.verify:
        changes["verify"] = bool(verify)
    if numbered is not None and not numbered:
        changes["numbered"] = False
    if extra_tools:
        bad = [t for t in extra_tools if t not in EXTRA_TOOLS]
        if bad:
            raise UserError(f"unknown extra tool(s) {bad}: use {', '.join(EXTRA_TOOLS)}")
        merged = set(a.tools) | set(extra_tools)
        if merged != set(a.tools):
            changes["tools"] = tuple(t for t in TOOL_ORDER if t in merged)
    if budget is not None and budget != a.budget:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise UserError(f"budget must be an integer >= 1, got {budget!r}")
        changes["budget"] = budget
    if order is not None:
        if order not in T.ORDER:
            raise UserError(f"order must be one of {', '.join(T.ORDER)}, got {order!r}")
        changes["order"] = order
    if perturb is not None:
        if perturb not in ("remove", "add"):
            raise UserError(f"perturb must be 'remove' or 'add', got {perturb!r}")
        changes["perturb"] = perturb
    if protocol is not None:
        if protocol not in ("json", "native"):
            raise UserError(f"protocol must be 'json' or 'native', got {protocol!r}")
        if protocol == "native":
            changes["protocol"] = "native"
    if changes and not a.tool_loop:
        loop_arms = ", ".join(n for n, d in ARMS.items() if d.tool_loop)
        raise UserError(
            f"ablation(s) {', '.join(sorted(changes))} do not apply to arm {arm!r}: "
            f"its model never sees the tool loop (use one of {loop_arms})"
        )
    opts.update(changes)
    return opts


def arm_backend_options(
    arm: str | None = None, *, thinking: bool | None = None, **_: Any
) -> dict[str, Any]:
    """Backend options an ablation dict implies (``thinking=False``: reasoning disabled)."""
    if arm is not None:
        _arm(arm)
    return {} if thinking is None or thinking else {"thinking": False}


def make_arm_policy(arm: str, model: ChatModel | str, **backend_options: Any) -> Any:
    """A fresh policy for one episode of ``arm`` (share one ``ChatModel`` across episodes)."""
    a = _arm(arm)
    cls = {"chat": ChatPolicy, "list": ListPolicy, "tiles": TilesPolicy}[a.kind]
    return cls(model, **backend_options)


def _backend(model: ChatModel | str, options: dict[str, Any]) -> ChatModel:
    if isinstance(model, str):
        return make_backend(model, **options)
    if options:
        raise TypeError(
            "backend options are for a model id; configure a ChatModel instance directly"
        )
    return model


# --- the chat (tool-loop and single-call) policy ---------------------------------------------------
class ChatPolicy:
    """Sends the conversation to the model and returns its raw reply for the env to parse.

    The system prompt (from the first observation) opens the conversation; every observation
    becomes a user turn (its image, then its text) and every reply an assistant turn. Requests
    follow the context policy (the two most recent images kept).

    With the native tool protocol (``task.options["protocol"] == "native"``) the request carries
    the tool schema, the model's ``tool_calls`` stay on its assistant turn, and each observation
    is the result of the call it answers: a ``tool`` message with the message text and the
    re-rendered image (other calls of the same reply get a not-executed note).
    """

    def __init__(
        self, model: ChatModel | str, *, keep_images: int = KEEP_IMAGES, **backend_options: Any
    ) -> None:
        self.model = _backend(model, backend_options)
        self.keep_images = keep_images
        self.history: list[Message] = []
        self.task: Task | None = None
        self.tools: list[dict[str, Any]] | None = None

    @property
    def native(self) -> bool:
        """True when this episode uses native tool calling."""
        return self.tools is not None

    def reset(self, first_observation: dict[str, Any], task: Task) -> None:
        """Start a conversation; the first observation itself arrives again with ``act``."""
        self.task = task
        system = first_observation.get("system") or ""
        self.history = [message("system", text_part(system))] if system else []
        self.tools = None
        if (task.options or {}).get("protocol") == "native":
            if not supports_tools(self.model):
                raise UserError(
                    f"the native tool protocol needs a backend with tool calling (litellm); "
                    f"{type(self.model).__name__} has none: use the JSON protocol"
                )
            self.tools = NT.tool_schema(task.tools, task.obj, task.obj_sing)

    def act(self, observation: dict[str, Any]) -> Reply:
        """One model call on the conversation so far plus this observation."""
        request = self.request(observation)
        # The request holds the image (encoded, for a data-URL backend): the observation's
        # pixels can go while the model thinks (memory per episode in flight).
        del observation
        if self.native:
            return self.record(self.model.complete(request, tools=self.tools))  # type: ignore[call-arg]
        return self.record(self.model.complete(request))

    def request(self, observation: dict[str, Any]) -> list[Message]:
        """Append the observation as a user turn (or as tool results, native protocol); the
        messages to send (context policy applied)."""
        parts = []
        if observation.get("image") is not None:
            image = observation["image"]
            # A backend that sends PNG data URLs gets the image encoded now, and the history
            # keeps those bytes, not the pixels.
            parts.append(image_part(encoded_image(image) if getattr(self.model, "sends_data_urls", False) else image))
        parts.append(text_part(str(observation.get("text", ""))))
        calls = self.history[-1].get("tool_calls") if self.history else None
        if self.native and calls:
            for k, call in enumerate(calls):
                content = parts if k == 0 else [text_part(NT.NATIVE_EXTRA_CALL)]
                self.history.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": content})
        else:
            self.history.append(message("user", *parts))
        # Prune the history itself, not just the request: an image that left the window is never
        # sent again, and a tag-1 episode (80 turns) would otherwise hold 80 images in memory.
        self.history = apply_context_policy(self.history, keep_images=self.keep_images)
        return list(self.history)

    def record(self, reply: Reply) -> Reply:
        """Append the model's reply as an assistant turn and pass it on."""
        turn = message("assistant", text_part(reply.text))
        if self.native and reply.tool_calls:
            turn["tool_calls"] = [dict(c) for c in reply.tool_calls]
        self.history.append(turn)
        return reply


def supports_tools(model: Any) -> bool:
    """Whether ``model.complete`` takes a ``tools=`` argument (native tool calling)."""
    import inspect

    try:
        return "tools" in inspect.signature(model.complete).parameters
    except (TypeError, ValueError):
        return False


def act_many(policies: Sequence[Any], observations: Sequence[dict[str, Any]]) -> list[Any]:
    """Act for several episodes at once: ``ChatPolicy`` requests that share a model instance go
    out as one ``complete_batch`` (batched generation for local models); others act singly."""
    if len(policies) != len(observations):
        raise ValueError("policies and observations differ in length")
    out: list[Any] = [None] * len(policies)
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(policies):
        if type(p) is ChatPolicy and not p.native:
            groups.setdefault(id(p.model), []).append(i)
        else:
            out[i] = p.act(observations[i])
    for idx in groups.values():
        model = policies[idx[0]].model
        replies = model.complete_batch([policies[i].request(observations[i]) for i in idx])
        for i, r in zip(idx, replies, strict=True):
            out[i] = policies[i].record(r)
    return out


# --- reply parsing for the policy-driven arms -----------------------------------------------------
_ANSWER_RE = re.compile(r"ANSWER\s*:[\s*]*", re.IGNORECASE)
_PAIR_RE = re.compile(r"\[\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\]")


def parse_announced(text: str) -> int | None:
    """The count of the last ``ANSWER: n`` line in a reply (the count grammar of
    ``countgym.envs.numbers``: ``3 or 4``, ``-2``, ``at least 5`` are no count), or None."""
    text = text if isinstance(text, str) else ""
    tail = deque(_ANSWER_RE.finditer(text), maxlen=1)
    if not tail:
        return None
    last = tail[0]
    end = text.find("\n", last.end())
    return read_count(text, last.end(), end if end >= 0 else len(text))[0]


def parse_points(text: str) -> list[tuple[float, float]] | None:
    """Points of the last ``{"points": ...}`` in a reply (None when there is none).

    Truncated JSON is salvaged by taking the ``[x, y]`` pairs after the last ``"points"`` key;
    non-finite values are dropped (range checks are the environment's job, so drops are logged).
    """
    text = text or ""
    key = text.rfind('"points"')
    if key < 0:
        return None
    start = text.rfind("{", 0, key)
    raw: Any = None
    if start >= 0:
        try:
            raw, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:
            raw = None
    pairs: list[tuple[float, float]] = []
    if isinstance(raw, dict) and isinstance(raw.get("points"), list):
        for p in raw["points"]:
            xy = _xy(p)
            if xy is not None:
                pairs.append(xy)
        return pairs
    for xs, ys in _PAIR_RE.findall(text[key:]):
        xy = _xy([float(xs), float(ys)])
        if xy is not None:
            pairs.append(xy)
    return pairs


def _xy(p: Any) -> tuple[float, float] | None:
    if isinstance(p, dict):
        p = [p.get("x"), p.get("y")]
    if not isinstance(p, (list, tuple)) or len(p) != 2:
        return None
    try:
        x, y = float(p[0]), float(p[1])
    except (TypeError, ValueError):
        return None
    return (x, y) if math.isfinite(x) and math.isfinite(y) else None


# --- list: blind pointing --------------------------------------------------------------------------
class ListPolicy:
    """``list``: one call emits points and a count; the points are submitted as one tag action
    (so the audit sees them) and then the model's announced count as the answer."""

    def __init__(self, model: ChatModel | str, **backend_options: Any) -> None:
        self.model = _backend(model, backend_options)
        self._reply: Reply | None = None

    def reset(self, first_observation: dict[str, Any], task: Task) -> None:
        self._reply = None

    def act(self, observation: dict[str, Any]) -> Reply:
        if self._reply is None:
            msg = message(
                "user",
                image_part(observation["image"]),
                text_part(str(observation.get("text", ""))),
            )
            reply = self.model.complete([msg])
            self._reply = reply
            if reply.error is not None:
                return reply
            points = parse_points(reply.text)
            if points is None:
                # No points line: the env parses the text itself (an ANSWER line still answers).
                return reply
            return reply.model_copy(update={"action": Tag(points=points)})
        # The answer step carries no usage: the model was called once, on the first step.
        count = parse_announced(self._reply.text)
        action = Answer(count=count) if count is not None else None
        return Reply(text=self._reply.text, action=action)


# --- tiles: the scripted 2x2 partition ----------------------------------------------------------------
TILE_OVERLAP = 0.10
"""Overlap of neighbouring tiles as a fraction of the image side: each tile spans 55 % of the side.

10 % of a 768-px side is 77 px, wider than the largest DotArrays disc (28 px) and most FSC-147
objects at that scale, so an object cut by one tile's border lies whole inside its neighbour;
wider overlaps put more objects into two tiles (more work for de-duplication, more double counts
when it fails), narrower ones leave objects cut in every tile."""

DEDUP_RADIUS = 0.025
"""Points from different tiles closer than this fraction of the shorter image side are one object.

2.5 % of 768 px is 19 px: above the few-px scatter of two looks at the same object (and the ~6 px
shift of a half-visible disc's centre) and below the 36-px centre spacing of the closest DotArrays
discs, so distinct neighbours are not merged."""

TILE_MIN_SHORT = 768
TILE_MAX_LONG = 1024


def tile_boxes(
    width: int, height: int, overlap: float = TILE_OVERLAP
) -> list[tuple[int, int, int, int]]:
    """Pixel boxes (x0, y0, x1, y1) of the 2x2 overlapping partition, in reading order."""
    if not 0.0 <= overlap < 1.0:
        raise ValueError(f"overlap must be in [0, 1), got {overlap}")
    tw = min(width, max(1, round(width * (1 + overlap) / 2)))
    th = min(height, max(1, round(height * (1 + overlap) / 2)))
    xs = [(0, tw), (width - tw, width)]
    ys = [(0, th), (height - th, height)]
    return [(x0, y0, x1, y1) for y0, y1 in ys for x0, x1 in xs]


def upscale(image: np.ndarray) -> np.ndarray:
    """Resize like the env's crop view: shorter side >= 768 px unless that would push the longer
    side past 1024 px (the longer-side cap wins for elongated crops)."""
    h, w = image.shape[:2]
    scale = max(TILE_MIN_SHORT / min(w, h), 1.0)
    scale = min(scale, TILE_MAX_LONG / max(w, h))
    if abs(scale - 1.0) < 1e-9:
        return image
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BICUBIC))


TILE_URL_CHARS = 64 * 2**20
"""Data URLs of upscaled tiles kept per process, in characters: every model's ``tiles`` episode
on a stimulus sends the same four tiles, and a bicubic upscale of a 422 px tile to 768 px costs
about 10 ms, encoding it a few more."""
_TILE_URLS: BoundedCache[tuple[Any, ...], EncodedImage] = BoundedCache(2**62, TILE_URL_CHARS, lambda t: len(t.url))


def tile_image(image: np.ndarray, box: tuple[int, int, int, int], *, encoded: bool = False) -> Any:
    """The tile of ``image`` in ``box`` (x0, y0, x1, y1), upscaled (``upscale``). ``encoded`` (a
    backend that sends PNG data URLs): its lossless PNG (``EncodedImage``), the same bytes the
    backend would make from the array, kept per process (``TILE_URL_CHARS``) when ``image`` is a
    stimulus's unmarked view (``view_key``): equal keys are equal pixels."""
    x0, y0, x1, y1 = box
    if not encoded:
        return upscale(image[y0:y1, x0:x1])
    view = view_key(image)
    key = None if view is None else (view, tuple(image.shape), (x0, y0, x1, y1))
    if key is not None:
        hit = _TILE_URLS.get(key)
        if hit is not None:
            return hit
    tile = encoded_image(upscale(image[y0:y1, x0:x1]))
    if key is not None:
        _TILE_URLS.put(key, tile)
    return tile


def tile_points_to_image(
    points: Sequence[tuple[float, float]], box: tuple[int, int, int, int]
) -> list[tuple[float, float]]:
    """Crop-normalised points of a tile -> pixel points of the full image; points outside the
    crop's [0,1000] frame are dropped (they cannot be objects of this tile)."""
    x0, y0, x1, y1 = box
    out = []
    for u, v in points:
        if 0.0 <= u <= 1000.0 and 0.0 <= v <= 1000.0:
            out.append((x0 + u / 1000.0 * (x1 - x0), y0 + v / 1000.0 * (y1 - y0)))
    return out


def dedup_points(
    groups: Sequence[Sequence[tuple[float, float]]], radius: float
) -> list[tuple[float, float]]:
    """Union of per-tile pixel points with cross-tile duplicates merged.

    A point merges into the nearest union point within ``radius`` that no point of its own tile
    has joined yet (one-to-one across tiles: a tile's own points are always distinct objects);
    a merged point sits at the mean of its members. Otherwise it is a new object.
    """
    pts: list[list[float]] = []  # x, y, members
    tiles: list[set[int]] = []
    for t, group in enumerate(groups):
        for x, y in group:
            best, best_d = -1, radius
            for j, (px, py, _) in enumerate(pts):
                if t in tiles[j]:
                    continue
                d = math.hypot(px - x, py - y)
                if d < best_d:
                    best, best_d = j, d
            if best < 0:
                pts.append([x, y, 1.0])
                tiles.append({t})
            else:
                px, py, k = pts[best]
                pts[best] = [(px * k + x) / (k + 1), (py * k + y) / (k + 1), k + 1]
                tiles[best].add(t)
    return [(p[0], p[1]) for p in pts]


@dataclass
class _TileRun:
    boxes: list[tuple[int, int, int, int]] = field(default_factory=list)
    points: list[tuple[float, float]] = field(default_factory=list)


class TilesPolicy:
    """``tiles``: one TILE-prompt call per tile of a 2x2 overlapping partition; the de-duplicated
    union is submitted as one tag action and its size as the answer."""

    def __init__(
        self,
        model: ChatModel | str,
        *,
        overlap: float = TILE_OVERLAP,
        dedup_radius: float = DEDUP_RADIUS,
        **backend_options: Any,
    ) -> None:
        self.model = _backend(model, backend_options)
        self.overlap = overlap
        self.dedup_radius = dedup_radius
        self.task: Task | None = None
        self._run: _TileRun | None = None

    def reset(self, first_observation: dict[str, Any], task: Task) -> None:
        self.task = task
        self._run = None

    def act(self, observation: dict[str, Any]) -> Reply:
        if self._run is not None:
            n = len(self._run.points)
            return Reply(text=json.dumps({"tool": "answer", "count": n}), action=Answer(count=n))
        if self.task is None:
            raise RuntimeError("TilesPolicy.act before reset")
        image = observation["image"]
        if view_key(image) is None:  # a stimulus's view stays one: its tiles are kept under its key
            image = np.asarray(image)
        h, w = image.shape[:2]
        boxes = tile_boxes(w, h, self.overlap)
        prompt = T.TILE.format(obj=self.task.obj, obj_sing=self.task.obj_sing)
        encoded = bool(getattr(self.model, "sends_data_urls", False))
        requests = [
            [message("user", image_part(tile_image(image, box, encoded=encoded)), text_part(prompt))]
            for box in boxes
        ]
        start = time.perf_counter()
        replies = self.model.complete_batch(requests)
        latency = time.perf_counter() - start
        usage = sum_usage([r.usage for r in replies])
        cost = sum_cost([r.cost for r in replies])
        text = "\n\n".join(
            f"[tile {i + 1}/4 box={list(b)}]\n{r.text}"
            for i, (b, r) in enumerate(zip(boxes, replies, strict=True))
        )
        errors = [f"tile {i + 1}: {r.error}" for i, r in enumerate(replies) if r.error]
        if errors:
            return Reply(
                text=text, usage=usage, cost=cost, latency_s=latency, error="; ".join(errors)
            )
        groups = [
            tile_points_to_image(parse_points(r.text) or [], b)
            for b, r in zip(boxes, replies, strict=True)
        ]
        merged = dedup_points(groups, self.dedup_radius * min(w, h))
        self._run = _TileRun(boxes=boxes, points=merged)
        norm = [(x / w * 1000.0, y / h * 1000.0) for x, y in merged]
        return Reply(text=text, usage=usage, cost=cost, latency_s=latency, action=Tag(points=norm))


# --- the family, as the registry lists it ----------------------------------------------------------
LOOP_KEYS: frozenset[str] = frozenset(
    {"tools", "budget", "extra_tools", "verify", "numbered", "order", "perturb", "one_point_per_call", "protocol"}
)
"""Options that change only what a tool-loop arm's model sees or may do."""
ANY_ARM_KEYS: frozenset[str] = frozenset({"reward", "tool_cost", "thinking"})
"""Options that change every image arm's episodes (reward) or its backend (thinking)."""


def arm_takes(arm: str) -> frozenset[str]:
    """The option keys that change what ``arm`` sends or does: the tool-loop ablations for the
    tool-loop arms only (direct, cot, list and tiles never see the loop), the reward and
    ``thinking`` for every arm. The first-message ``prompt`` is what defines an arm: never an
    ablation of a built-in one."""
    return LOOP_KEYS | ANY_ARM_KEYS if _arm(arm).tool_loop else ANY_ARM_KEYS


def _family_env_options(
    arm: str, *, tools: Sequence[str] | None = None, budget: int | None = None, **ablations: Any
) -> dict[str, Any]:
    extra = set(ablations) - arm_takes(arm) - LOOP_KEYS
    if extra:
        raise UserError(f"ablation(s) {', '.join(sorted(extra))} do not apply to arm {arm!r} "
                        f"(it takes {', '.join(sorted(arm_takes(arm) - {'thinking'}))})")
    one_point = ablations.pop("one_point_per_call", None)
    if tools is not None and not _arm(arm).tool_loop and set(tools) - {"answer"} != set(_arm(arm).tools):
        raise UserError(f"tools do not apply to arm {arm!r}: its model never sees the tool loop")
    opts = arm_env_options(arm, budget=budget, **ablations)
    if one_point is not None and bool(one_point) != opts["one_point_per_call"]:
        if not _arm(arm).tool_loop:
            raise UserError(f"one_point_per_call does not apply to arm {arm!r}: its model never sees the tool loop")
        opts["one_point_per_call"] = bool(one_point)
    opts["tools"] = list(tools if tools is not None else opts["tools"])
    return opts


def _family_backend(arm: str, model: str, **options: Any) -> ChatModel:
    return make_backend(model, **options)


ARM_FAMILY = ArmFamily(
    tasks=("image",),
    is_arm=lambda name: name in ARMS,
    names=lambda: list(ARMS),
    env_options=_family_env_options,
    backend=_family_backend,
    policy=make_arm_policy,
    takes=arm_takes,
)
"""The baseline arms of the image tool loop."""
