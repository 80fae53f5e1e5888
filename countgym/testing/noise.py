"""Seeded answer noise for the test server (``countgym testserver --noise SIGMA``).

Without noise the test server's "model" is a perfect blob counter, so every arm of a keyless
sweep scores the same and the report shows no differences. With noise, each reply's count and
points are perturbed by an amount that depends on the prompt it answers (the arm):

- count replies: ``answer = max(0, n + round(e))`` with ``e ~ Normal(0, SIGMA * scale * n)``
  -- the error grows with the count (a Weber-like law), so accuracy falls with n and the
  counting range R80 is finite;
- point replies (tool-loop tags, LIST, TILE): the same count error applied to the points --
  missing points are dropped (omissions), extra points are near-copies of detected ones
  (duplicates) -- and each point is jittered by ``Normal(0, SIGMA * scale * 100)`` in the
  normalised [0, 1000] frame (pointing error).

``scale`` is ``NOISE_SCALE[kind]``: small for the tool loop, larger for blind pointing and
chain of thought, largest for the direct answer; the three CountVideoBench prompts and the two
CounterCount formats get different scales too, so prompt arms differ. The scales are chosen to
exercise the tables, contrasts and figures with visible, CI-solid differences; they model no
paper's results (the papers' arm effects depend on the model). The random draws are keyed on the server seed, the prompt
kind and the request's messages (a hash), never on the arrival order: the same request gets the
same reply, so a resumed or concurrent sweep is reproducible.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Sequence
from typing import Any

NOISE_SCALE: dict[str, float] = {
    "tool": 0.25,
    "tile": 0.5,
    "list": 0.6,
    "cot": 0.8,
    "direct": 1.0,
    "video-P1": 1.0,
    "video-P2": 0.7,
    "video-P3": 1.4,
    "cf-mcq": 0.5,
    "cf-oe": 1.0,
    "other": 1.0,
}
"""Noise multiplier per prompt kind (the arm's prompt the server recognised)."""

JITTER_UNITS = 100.0
"""Point jitter standard deviation per unit of ``SIGMA * scale``, in the [0, 1000] frame."""
DUPLICATE_OFFSET = 6
"""Largest offset (normalised units) of an extra point from the detected point it copies."""


def check_noise(sigma: Any) -> float:
    """``sigma`` as a float, or ``ValueError`` (one line) when it is not a finite number >= 0."""
    if isinstance(sigma, bool) or not isinstance(sigma, int | float) or not math.isfinite(sigma) or sigma < 0:
        raise ValueError(f"noise must be a finite number >= 0 (0 = no noise), got {sigma!r}")
    return float(sigma)


def noise_rng(seed: int, kind: str, messages: Sequence[dict[str, Any]]) -> random.Random:
    """The RNG of one request: keyed on (seed, prompt kind, hash of the messages)."""
    h = hashlib.sha256(f"{seed}|{kind}|".encode())
    h.update(json.dumps(messages, sort_keys=True, default=str).encode())
    return random.Random(int.from_bytes(h.digest()[:8], "little"))


def noisy_count(n: int, sigma: float, kind: str, rng: random.Random) -> int:
    """``n`` plus a rounded Normal(0, sigma * scale * n) error, floored at 0."""
    if sigma <= 0 or n <= 0:
        return n
    sd = sigma * NOISE_SCALE.get(kind, NOISE_SCALE["other"]) * n
    return max(0, n + round(rng.gauss(0.0, sd)))


def noisy_points(points: Sequence[Sequence[int]], sigma: float, kind: str, rng: random.Random) -> list[list[int]]:
    """Detected points with the kind's count error (dropped points or near-duplicates) and
    jitter, clipped to the [0, 1000] frame; the reading order of the kept points is kept."""
    pts = [[int(x), int(y)] for x, y in points]
    if sigma <= 0 or not pts:
        return pts
    scale = NOISE_SCALE.get(kind, NOISE_SCALE["other"])
    k = noisy_count(len(pts), sigma, kind, rng)
    if k < len(pts):
        keep = sorted(rng.sample(range(len(pts)), k))
        pts = [pts[i] for i in keep]
    else:
        extra = [rng.choice(pts) for _ in range(k - len(pts))]
        pts = pts + [
            [x + rng.randint(-DUPLICATE_OFFSET, DUPLICATE_OFFSET), y + rng.randint(-DUPLICATE_OFFSET, DUPLICATE_OFFSET)]
            for x, y in extra
        ]
    sd = sigma * scale * JITTER_UNITS
    return [[_clip(x + rng.gauss(0.0, sd)), _clip(y + rng.gauss(0.0, sd))] for x, y in pts]


def _clip(v: float) -> int:
    return min(1000, max(0, round(v)))
