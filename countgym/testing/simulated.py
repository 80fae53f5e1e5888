"""A simulated model server: answers each arm's own prompt from the stimulus's ground truth,
with errors a profile sets (``countgym.testing.profiles``), so a keyless rehearsal shows that
the pipeline recovers a known effect.

The server is the test server (``countgym.testing.server``: OpenAI-compatible HTTP, usage,
streaming, native tool calls) with another "model". It knows the stimulus of a request from two
headers, never from the prompt: ``X-Countgym-Dataset`` (a token the run registered for the
dataset it loaded; sent by the cell's backend) and ``X-Countgym-Stimulus`` (the episode's
stimulus id and repeat; ``countgym.simulate_context``). The truth comes from the dataset's
manifest: the count, the points (stored-image pixels), the CounterCount canonical count.

=================  ============================================================================
prompt             reply
=================  ============================================================================
tool loop          the planned points (every object but the omitted ones, at Normal offsets of
                   ``pointing_sigma``; a second point near an object with prob. ``duplicate``;
                   phantoms away from every object), tagged over as many calls as needed (at
                   most ``MAX_POINTS_PER_CALL`` a call, one a call in tag-1 mode; the plan is
                   stated in the first reply and read back from the conversation, so the server
                   keeps no state); then ``{"tool":"answer","count":<tags placed>}``
LIST               the planned points as ``{"points": ...}``, then ``ANSWER: <their number>``
TILE               the planned points of the objects inside the crop, in the crop's frame (the
                   crop is recognised by comparing it with the stored image's four tiles)
DIRECT, COT        ``ANSWER: k``, k = round(n (1 + count_bias) + Normal(0, count_sigma n)) >= 0
video P1/P2/P3     the same k, as a sentence
CounterCount       factual image: n; counterfactual: the canonical count with probability
                   ``canonical``, else n (MCQ: the number word; open-ended: "k <parts>."); with
                   probability ``hedge`` a wrong number first ("At first glance k+1, but
                   counting again I see k."), which the audit's judge resolves
parser, judge      the last integer of the quoted reply (as the test server)
=================  ============================================================================

Draws are seeded by (server seed, model, stimulus id, repeat, prompt kind, tile), so a rerun or
a resumed run gets the same replies, and two arms of the same kind see the same behaviour.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from countgym.envs import cf_templates as CT
from countgym.matching import tau_for
from countgym.simulate_context import STIMULUS_HEADER, parse_stimulus_header
from countgym.stimulus import Dataset, Stimulus
from countgym.testing.profiles import BUILTIN, Profile, ProfileSet
from countgym.testing.server import (
    _BUDGET_MARK,
    _ONE_POINT_MARK,
    _images_of,
    _placed_tags,
    _plan,
    _text_of,
    model_reply,
    prompt_kind,
)
from countgym.testing.server import TestServer as _TestServer

DATASET_HEADER = "X-Countgym-Dataset"
"""Request header carrying the token under which the run registered its dataset."""

_PLAN_MARK = "PLAN"
_THUMB = 24


@dataclass(frozen=True)
class StimulusTruth:
    """What the simulated model knows about a stimulus (from the dataset, not the prompt)."""

    stimulus: Stimulus
    size: tuple[int, int] | None
    """(width, height) of the stored image; None for video or when it cannot be read."""
    points: list[tuple[float, float]] | None
    """Object centres in the normalised [0, 1000] frame; None for count-only stimuli."""


def simulated_count(n: int, profile: Profile, rng: random.Random) -> int:
    """round(n (1 + count_bias) + Normal(0, count_sigma n)), at least 0."""
    mean = n * (1.0 + profile.count_bias)
    noise = rng.gauss(0.0, profile.count_sigma * n) if profile.count_sigma > 0 and n > 0 else 0.0
    return max(0, round(mean + noise))


def simulated_points(
    truth: Sequence[tuple[float, float]],
    size: tuple[int, int],
    profile: Profile,
    rng: random.Random,
    region: tuple[float, float, float, float] = (0.0, 0.0, 1000.0, 1000.0),
) -> list[tuple[float, float]]:
    """Points a model with ``profile`` places for the objects whose centre lies in ``region``
    (normalised frame of the full image): omissions, offsets, duplicates and phantoms."""
    w, h = size
    short = min(w, h)
    sd = np.array([profile.pointing_sigma * short / w, profile.pointing_sigma * short / h])
    all_pts = np.asarray(truth, dtype=float).reshape(-1, 2)
    px = all_pts * np.array([w / 1000.0, h / 1000.0])
    tau_norm = tau_for(px) / max(w, h) * 1000.0
    x0, y0, x1, y1 = region
    inside = [p for p in all_pts if x0 <= p[0] < x1 and y0 <= p[1] < y1]
    out: list[tuple[float, float]] = []

    def jitter(p: np.ndarray) -> np.ndarray:
        return p + np.array([rng.gauss(0.0, sd[0]), rng.gauss(0.0, sd[1])])

    for p in inside:
        if rng.random() < profile.omission:
            continue
        out.append(tuple(jitter(p)))
        if rng.random() < profile.duplicate:
            shift = np.array([rng.choice((-1, 1)), rng.choice((-1, 1))]) * 0.2 * tau_norm
            out.append(tuple(jitter(p) + shift))
    whole = int(profile.phantom)
    n_phantoms = sum(whole + (rng.random() < profile.phantom - whole) for _ in inside)
    for _ in range(n_phantoms):
        for _try in range(200):
            c = np.array([rng.uniform(x0, x1), rng.uniform(y0, y1)])
            if not len(all_pts) or float(np.min(np.hypot(*(all_pts - c).T))) > 2.5 * tau_norm:
                out.insert(rng.randrange(len(out) + 1), tuple(c))
                break
    return [(min(1000.0, max(0.0, x)), min(1000.0, max(0.0, y))) for x, y in out]


def shown_digest(messages: Sequence[dict[str, Any]], body: dict[str, Any]) -> str:
    """A digest of what a request shows the model: every message's text, each image (its length
    and last 64 base64 characters, which differ between two encodings of different pixels) and
    the decoding parameters (a reasoning switch). CounterCount replies are drawn under it, so an
    intervention (blur, a cue, generic names, thinking) draws anew: with no injected effect its
    paired deltas are the design's noise, not exactly zero. The same request draws the same."""
    h = hashlib.sha256()
    for m in messages:
        content = m.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
        h.update(str(m.get("role")).encode())
        for p in parts:
            if not isinstance(p, dict):
                continue
            if p.get("type") == "image_url":
                iu = p.get("image_url")
                url = str(iu.get("url", "") if isinstance(iu, dict) else iu)
                h.update(f"\x00image:{len(url)}:{url[-64:]}".encode())
            else:
                h.update(f"\x00text:{p.get('text', '')}".encode("utf-8", "replace"))
    params = {k: v for k, v in body.items() if k not in ("messages", "model", "stream", "stream_options")}
    h.update(json.dumps(params, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def _rng(seed: int, *parts: Any) -> random.Random:
    h = hashlib.sha256("|".join(str(p) for p in (seed, *parts)).encode()).digest()
    return random.Random(int.from_bytes(h[:8], "little"))


def _json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _rounded(points: Sequence[tuple[float, float]]) -> list[list[float]]:
    return [[round(x, 1), round(y, 1)] for x, y in points]


def _tile_region(crop_url: str, truth: StimulusTruth, dataset: Dataset) -> tuple[float, float, float, float]:
    """The normalised box of the tile a TILE request shows: the one of the 2x2 partition whose
    crop of the stored image looks most like the request's image."""
    from countgym.agents.arms import TILE_OVERLAP, tile_boxes
    from countgym.agents.backends.base import decode_data_url

    stored = dataset.load_image(truth.stimulus)
    w, h = stored.size
    seen = _thumb(Image.fromarray(decode_data_url(crop_url)))
    best, best_d = None, math.inf
    for x0, y0, x1, y1 in tile_boxes(w, h, TILE_OVERLAP):
        d = float(np.sum((_thumb(stored.crop((x0, y0, x1, y1))) - seen) ** 2))
        if d < best_d:
            best, best_d = (x0, y0, x1, y1), d
    assert best is not None
    x0, y0, x1, y1 = best
    return (x0 / w * 1000.0, y0 / h * 1000.0, x1 / w * 1000.0, y1 / h * 1000.0)


def _thumb(im: Image.Image) -> np.ndarray:
    return np.asarray(im.convert("L").resize((_THUMB, _THUMB), Image.Resampling.BILINEAR), dtype=float)


_LAST_INT = re.compile(r"(?<!\d)\d+(?!\d)")


class SimulatedServer(_TestServer):
    """The test server answering as simulated models (``profiles``: per model name)."""

    __test__ = False

    def __init__(self, profiles: ProfileSet = BUILTIN, *, seed: int = 0, **kwargs: Any) -> None:
        # Usage as the test server reports it: reasoning tokens unless the request turns reasoning
        # off, so a rehearsed thinking-off control shows the difference in its tables.
        super().__init__(seed=seed, **kwargs)
        self.profiles = profiles
        self._datasets: dict[str, Dataset] = {}
        self._tokens: dict[tuple[str, str, str, int], str] = {}
        self._truths: OrderedDict[tuple[str, str], StimulusTruth] = OrderedDict()
        self._data_lock = threading.Lock()

    def add_dataset(self, dataset: Dataset) -> str:
        """Register a loaded dataset; the token its requests carry in ``DATASET_HEADER``."""
        key = (type(dataset).__name__, str(getattr(dataset, "root", "")), str(getattr(dataset, "name", "")), len(dataset))
        with self._data_lock:
            token = self._tokens.get(key)
            if token is None:  # one token per dataset, however many cells load it
                token = self._tokens[key] = f"d{len(self._tokens)}"
                self._datasets[token] = dataset
            return token

    def truth(self, token: str, stimulus_id: str) -> tuple[StimulusTruth, Dataset]:
        """The ground truth of a stimulus of a registered dataset (cached)."""
        with self._data_lock:
            ds = self._datasets.get(token)
            hit = self._truths.get((token, stimulus_id))
        if ds is None:
            raise ValueError(f"unknown dataset token {token!r}")
        if hit is not None:
            return hit, ds
        stim = ds[stimulus_id]
        size: tuple[int, int] | None = None
        if stim.image is not None:
            try:
                with Image.open(ds.image_path(stim)) as im:
                    size = im.size
            except OSError:
                size = None
        points = None
        if stim.points is not None and size is not None:
            sw, sh = size
            points = [(x * 1000.0 / sw, y * 1000.0 / sh) for x, y in stim.points]
        truth = StimulusTruth(stimulus=stim, size=size, points=points)
        with self._data_lock:
            self._truths[(token, stimulus_id)] = truth
            while len(self._truths) > 4096:
                self._truths.popitem(last=False)
        return truth, ds

    def answer(self, messages: list[dict[str, Any]], body: dict[str, Any], headers: Any) -> str:
        kind = prompt_kind(messages)
        if kind == "parser":  # the audit's parser and judge read replies, they know no stimulus
            return model_reply(messages)
        token = headers.get(DATASET_HEADER)
        episode = parse_stimulus_header(headers.get(STIMULUS_HEADER))
        if not token or episode is None:
            raise ValueError(
                f"the simulated model needs the {DATASET_HEADER} and {STIMULUS_HEADER} headers "
                "(run with --simulate)"
            )
        sid, repeat = episode
        truth, ds = self.truth(token, sid)
        model = str(body.get("model", ""))
        profile = self.profiles.for_model(model)
        key: tuple[Any, ...] = (model, sid, repeat)
        if kind in ("cf-mcq", "cf-oe"):
            key = (*key, shown_digest(messages, body))
        return simulated_reply(messages, kind, truth, ds, profile, seed=self.seed, key=key)

    def blind_notice(self, messages: Sequence[dict[str, Any]]) -> str | None:
        """None: the simulated model answers CounterCount and video prompts from their truth, so
        it prints no "cannot see the truth" line and sends no ``X-Countgym-Blind`` header."""
        return None


def simulated_reply(
    messages: Sequence[dict[str, Any]],
    kind: str,
    truth: StimulusTruth,
    dataset: Dataset,
    profile: Profile,
    *,
    seed: int = 0,
    key: tuple[Any, ...] = (),
) -> str:
    """The simulated model's reply to a request of prompt ``kind`` about ``truth``."""
    stim = truth.stimulus
    n = stim.n
    if kind == "tool":
        return _tool_reply(messages, truth, profile, _rng(seed, *key, kind))
    if kind == "list":
        if truth.points is None or truth.size is None:
            k = simulated_count(n, profile, _rng(seed, *key, kind))
            return f'{_json({"points": []})}\nANSWER: {k}'
        pts = simulated_points(truth.points, truth.size, profile, _rng(seed, *key, kind))
        return f'{_json({"points": _rounded(pts)})}\nANSWER: {len(pts)}'
    if kind == "tile":
        images = [u for m in messages for u in _images_of(m)]
        if truth.points is None or truth.size is None or not images:
            return f'I cannot tell.\n{_json({"points": []})}\nANSWER: 0'
        x0, y0, x1, y1 = _tile_region(images[-1], truth, dataset)
        rng = _rng(seed, *key, kind, round(x0), round(y0))
        pts = simulated_points(truth.points, truth.size, profile, rng, (x0, y0, x1, y1))
        crop = [((x - x0) / (x1 - x0) * 1000.0, (y - y0) / (y1 - y0) * 1000.0) for x, y in pts]
        crop = [(x, y) for x, y in crop if 0 <= x <= 1000 and 0 <= y <= 1000]
        line = _json({"points": _rounded(crop)})
        return f"{len(crop)} have their center inside this crop.\n{line}\nANSWER: {len(crop)}"
    if kind in ("cf-mcq", "cf-oe"):
        value = n
        canonical = stim.meta.get("canonical_count")
        if stim.meta.get("kind") == "cf" and canonical is not None:
            if _rng(seed, *key, kind).random() < profile.canonical:
                value = int(canonical)
        if _rng(seed, *key, kind, "hedge").random() < profile.hedge:
            # Several numbers: the rules leave it to the audit's judge, which reads the last one.
            return f"At first glance {value + 1}, but counting again I see {value}."
        if kind == "cf-mcq":
            return CT.number_word(value)
        return f"{value} {stim.obj}."
    k = simulated_count(n, profile, _rng(seed, *key, kind))
    if kind.startswith("video-"):
        return f"There are {k} {stim.obj} in the video."
    if kind == "cot":
        return f"Counting region by region, I find {k} in total.\nANSWER: {k}"
    return f"ANSWER: {k}"


def _tool_reply(messages: Sequence[dict[str, Any]], truth: StimulusTruth, profile: Profile, rng: random.Random) -> str:
    from countgym.envs.image_env import MAX_POINTS_PER_CALL

    users = [m for m in messages if m.get("role") == "user"]
    last_user = _text_of(users[-1]) if users else ""
    all_user = "\n".join(_text_of(m) for m in users)
    chunk = 1 if _ONE_POINT_MARK in all_user else MAX_POINTS_PER_CALL
    placed = _placed_tags(messages)
    answer = _json({"tool": "answer", "count": placed})
    if not any(m.get("role") == "assistant" for m in messages):
        if truth.points is None or truth.size is None:
            k = simulated_count(truth.stimulus.n, profile, rng)
            return f"I count {k} without tagging.\n{_json({'tool': 'answer', 'count': k})}"
        plan = _rounded(simulated_points(truth.points, truth.size, profile, rng))
        if not plan:
            return f'I see none.\n{_json({"tool": "answer", "count": 0})}'
        tag = _json({"tool": "tag", "points": plan[:chunk]})
        return f"I see {len(plan)}; I will tag them. {_PLAN_MARK} {_json(plan)}\n{tag}"
    if _BUDGET_MARK in last_user:
        return answer
    planned = _plan(messages)
    if planned is not None and placed < len(planned):
        tag = _json({"tool": "tag", "points": planned[placed : placed + chunk]})
        return f"{placed} tagged so far. Next ones.\n{tag}"
    return f"Every object I see carries one tag.\n{answer}"
