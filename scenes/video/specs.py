"""The CountVideoBench design (*CountVideoBench*, Section 4.2-4.3): cardinalities, classes, seeds.

Six anchors {5, 10, 20, 30, 40, 50}, each with its neighbours n-2..n+2 clipped to [5, 50], give
26 cardinalities; 10 classes = {cube, sphere} x {red, blue, green, yellow, purple}; 10 videos per
(cardinality, class): 2,600 videos. Every video has its own seed, a SHA-256 of its design
coordinates (never Python's ``hash``, which is salted per process).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from countgym.errors import UserError

ANCHORS: tuple[int, ...] = (5, 10, 20, 30, 40, 50)
N_MIN, N_MAX = 5, 50
SHAPES: tuple[str, ...] = ("cube", "sphere")
COLORS: tuple[str, ...] = ("red", "blue", "green", "yellow", "purple")
CLASSES: tuple[tuple[str, str], ...] = tuple((s, c) for s in SHAPES for c in COLORS)
VIDEOS_PER_CLASS = 10


def cardinalities() -> tuple[int, ...]:
    """The 26 benchmark cardinalities, ascending."""
    vals = {n + k for n in ANCHORS for k in range(-2, 3)}
    return tuple(sorted(v for v in vals if N_MIN <= v <= N_MAX))


CARDINALITIES: tuple[int, ...] = cardinalities()


def anchor_of(n: int) -> int:
    """The anchor whose cluster holds ``n`` (the nearest anchor)."""
    return min(ANCHORS, key=lambda a: (abs(a - n), a))


@dataclass(frozen=True, order=True)
class VideoSpec:
    """The design coordinates of one video; everything else follows from them (and the offset)."""

    n: int
    shape: str
    color: str
    replicate: int

    @property
    def stimulus_id(self) -> str:
        """Readable, stable id, e.g. ``cvb-n05-red-cube-r0``."""
        return f"cvb-n{self.n:02d}-{self.color}-{self.shape}-r{self.replicate}"

    @property
    def obj(self) -> str:
        """Plural object name used in the question ("red cubes")."""
        return f"{self.color} {self.shape}s"

    @property
    def obj_sing(self) -> str:
        """Singular object name ("red cube")."""
        return f"{self.color} {self.shape}"


def video_seed(spec: VideoSpec, seed_offset: int = 0) -> int:
    """Stable 63-bit seed from the design coordinates and the seed offset (0 = the battery)."""
    key = f"countgym.countvideo|{spec.n}|{spec.shape}|{spec.color}|{spec.replicate}|{seed_offset}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") >> 1


def design() -> list[VideoSpec]:
    """All 2,600 videos in manifest order: cardinality, then class, then replicate."""
    return [
        VideoSpec(n, shape, color, r)
        for n in CARDINALITIES
        for shape, color in CLASSES
        for r in range(VIDEOS_PER_CLASS)
    ]


def balanced_subset(per_level: int) -> list[VideoSpec]:
    """``per_level`` videos per cardinality with the classes balanced, deterministic.

    At cardinality index ``i`` the picks are the slots ``v = (i * k + j) mod 100`` for
    ``j < k``, slot ``v`` meaning class ``v mod 10`` and replicate ``v // 10``: within a level
    the slots are distinct, and over the 26 levels every class is used ``26 k / 10`` times,
    give or take one. ``per_level=4`` is the size of the paper's human-study subset (104).
    """
    k = int(per_level)
    if not 1 <= k <= len(CLASSES) * VIDEOS_PER_CLASS:
        raise UserError(f"--per-level must be in 1..100 for countvideo, got {per_level}")
    out: list[VideoSpec] = []
    for i, n in enumerate(CARDINALITIES):
        slots = sorted((i * k + j) % 100 for j in range(k))
        for v in slots:
            shape, color = CLASSES[v % 10]
            out.append(VideoSpec(n, shape, color, v // 10))
    return out


def spread(specs: list[VideoSpec], limit: int) -> list[VideoSpec]:
    """``limit`` specs spread evenly over ``specs`` (so a small limit still spans the counts)."""
    if limit < 1:
        raise UserError(f"--limit must be a positive integer, got {limit}")
    if limit >= len(specs):
        return specs
    return [specs[(2 * i + 1) * len(specs) // (2 * limit)] for i in range(limit)]
