"""DotArrays generators (*Give the Model a Finger*, Appendix D).

Every image is a 768 x 768 white canvas with black discs (radius 14 px in the main battery),
drawn from one ``numpy.random.default_rng(seed)`` whose seed is a SHA-256 of the stimulus's
design coordinates (family, set, arrangement, n, replicate, seed offset). Same design, same
bytes, on every machine and in every process.

Coordinates are continuous pixel coordinates: pixel ``(i, j)`` covers ``[i, i+1) x [j, j+1)``.
Pillow rasterises a bounding box at whole pixels, so the centre of a drawn disc lies within
0.5 px (per axis) of the exact float centre stored in ``points``.

Placement functions return numpy arrays of centres and never touch global state; ``generate``
turns an :class:`ArraySpec` into a :class:`~countgym.stimulus.Stimulus` plus its image.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from countgym.stimulus import Stimulus

GENERATOR_VERSION = 2
"""Bump when any image or manifest field changes (also renames the on-disk cache)."""

SIDE = 768
RADIUS = 14
SMALL_RADIUS = 6
MIN_GAP = 8
"""Random arrangement: minimum gap between disc edges (centre distance >= 2r + 8)."""
CLUSTER_GAP = 4
"""Clustered arrangement: the paper gives no gap; a small one keeps every disc a separate blob."""
JITTER = 0.15
"""Regular and lattice arrangements: uniform jitter of +-15 % of the cell, per axis."""
CLUSTER_SIGMA = 0.09
"""Cluster spread as a fraction of the canvas side."""
BORDER = 2
"""Clear pixels kept between any object and the canvas edge."""
RANDOM_FIELD = 0.70
"""Random arrangement: centres are uniform in the central square of this fraction of the side,
[0.15, 0.85] x 768 px. Appendix D names no placement region; this one reproduces the tau
statistics of Appendix E (median 44 px, range 17-272 over the battery; see docs/dotarrays.md).
The XL extension uses the whole canvas: 200 discs at the 8 px gap do not fit in this field."""

WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
RED = (255, 0, 0)
BLUE = (0, 0, 255)
PALETTE: dict[str, tuple[int, int, int]] = {
    "black": (0, 0, 0),
    "red": (230, 25, 75),
    "green": (60, 180, 75),
    "blue": (0, 130, 200),
    "orange": (245, 130, 48),
    "purple": (145, 30, 180),
}
"""The six colours of the heterogeneous factor set (well separated on white)."""
SHAPES = ("circle", "square", "triangle")
COLOR_TABLE: tuple[tuple[int, int, int], ...] = tuple(
    dict.fromkeys([WHITE, BLACK, RED, BLUE, *PALETTE.values()])
)
"""Every colour a DotArrays image uses; index 0 (white) is the background."""
_COLOR_INDEX = {rgb: i for i, rgb in enumerate(COLOR_TABLE)}

# Squares and triangles have the area of the radius-r disc, so shape does not change ink.
_SQUARE_HALF = math.sqrt(math.pi) / 2  # half-side / r
_TRIANGLE_R = math.sqrt(4 * math.pi / (3 * math.sqrt(3)))  # circumradius / r
_SHAPE_EXTENT = max(1.0, _SQUARE_HALF * math.sqrt(2), _TRIANGLE_R)

_BATCH = 64  # candidates drawn per placement try (consumed in order: deterministic)
_MAX_BATCHES = 400  # per object before a placement counts as failed
_MAX_RESTARTS = 5

Points = np.ndarray  # shape (n, 2), float64, continuous pixel coordinates


@dataclass(frozen=True)
class ArraySpec:
    """The design coordinates of one DotArrays image; everything else follows from them."""

    family: str
    """Battery family: ``dotarrays`` (main + factor sets), ``dotarrays-xl`` or ``lattice``."""
    set: str
    """``main``, ``heterogeneous``, ``distractor``, ``dense``, ``small``, ``xl`` or ``lattice``."""
    arrangement: str
    """``regular``, ``random``, ``clustered``; lattice kinds ``rotated``, ``hex``, ``holed``."""
    n: int
    replicate: int

    @property
    def stimulus_id(self) -> str:
        """Readable, stable id, e.g. ``main-regular-n012-s1`` or ``hetero-n015-s2``."""
        prefix = _ID_PREFIX.get(self.set, self.set)
        if self.set in _FACTOR_ARRANGEMENT:
            return f"{prefix}-n{self.n:03d}-s{self.replicate}"
        return f"{prefix}-{self.arrangement}-n{self.n:03d}-s{self.replicate}"

    @property
    def radius(self) -> int:
        """Disc radius in pixels (the small factor set uses 6 px)."""
        return SMALL_RADIUS if self.set == "small" else RADIUS


_ID_PREFIX = {"heterogeneous": "hetero"}
# Factor sets have a fixed arrangement, so their ids leave it out.
_FACTOR_ARRANGEMENT = {
    "heterogeneous": "random",
    "distractor": "random",
    "dense": "clustered",
    "small": "random",
}


def factor_arrangement(set_name: str) -> str:
    """The arrangement a factor set uses."""
    return _FACTOR_ARRANGEMENT[set_name]


def derive_seed(spec: ArraySpec, seed_offset: int = 0) -> int:
    """Stable 63-bit seed from the design coordinates (SHA-256, never Python's ``hash``)."""
    key = (
        f"countgym.dotarrays|{spec.family}|{spec.set}|{spec.arrangement}|"
        f"{spec.n}|{spec.replicate}|{seed_offset}"
    )
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") >> 1


# --------------------------------------------------------------------------- placement


def place_sequential(
    n: int,
    draw: Callable[[int], np.ndarray],
    *,
    min_dist: float,
    lo: float,
    hi: float,
    max_batches: int = _MAX_BATCHES,
) -> Points | None:
    """Place ``n`` centres one at a time, each the first candidate at least ``min_dist`` from
    all placed ones and inside ``[lo, hi]^2``; ``draw(i)`` returns a batch of candidates for
    object ``i``. Returns None when some object finds no room within ``max_batches`` batches.
    """
    placed = np.empty((n, 2))
    min_d2 = min_dist * min_dist
    for i in range(n):
        for _ in range(max_batches):
            cand = draw(i)
            ok = np.all((cand >= lo) & (cand <= hi), axis=1)
            if i:
                d2 = ((cand[:, None, :] - placed[None, :i, :]) ** 2).sum(-1)
                ok &= d2.min(axis=1) >= min_d2
            hits = np.flatnonzero(ok)
            if hits.size:
                placed[i] = cand[hits[0]]
                break
        else:
            return None
    return placed


def random_centres(
    n: int,
    rng: np.random.Generator,
    *,
    extent: float = RADIUS,
    min_gap: float = MIN_GAP,
    side: int = SIDE,
    field: float = RANDOM_FIELD,
    allow_smaller_gap: bool = False,
) -> tuple[Points, float]:
    """Uniform centres in the central ``field`` x ``side`` square, with edge gap ``>= min_gap``
    between objects of radius ``extent`` (every object stays ``BORDER`` px inside the canvas).

    Returns ``(points, gap_used)``. With ``allow_smaller_gap`` a crowded array that cannot
    reach ``min_gap`` retries with a gap 1 px smaller (the XL battery at n = 200 may need it).
    """
    if not 0.0 < field <= 1.0:
        raise ValueError(f"field must be in (0, 1], got {field}")
    margin = (1.0 - field) / 2 * side
    lo, hi = max(extent + BORDER, margin), min(side - extent - BORDER, side - margin)
    gaps = np.arange(min_gap, -1, -1) if allow_smaller_gap else [min_gap]
    for gap in gaps:
        for _ in range(_MAX_RESTARTS):
            pts = place_sequential(
                n,
                lambda _i: rng.uniform(lo, hi, size=(_BATCH, 2)),
                min_dist=2 * extent + float(gap),
                lo=lo,
                hi=hi,
            )
            if pts is not None:
                return pts, float(gap)
    raise RuntimeError(f"cannot place {n} objects of radius {extent} with gap {min_gap}")


def clustered_centres(
    n: int,
    rng: np.random.Generator,
    *,
    radius: float = RADIUS,
    min_gap: float = CLUSTER_GAP,
    sigma_frac: float = CLUSTER_SIGMA,
    side: int = SIDE,
) -> tuple[Points, np.ndarray, np.ndarray]:
    """Centres in 2-4 isotropic Gaussian clusters (sigma = ``sigma_frac`` x side).

    Returns ``(points, labels, cluster_centres)``. Cluster sizes are as equal as possible
    (so every cluster is visible); a sample outside the canvas or too close to a placed disc
    is redrawn from the same cluster.
    """
    sigma = sigma_frac * side
    lo, hi = radius + BORDER, side - radius - BORDER
    for _ in range(_MAX_RESTARTS):
        k = int(rng.integers(2, 5))
        # Cluster centres keep 2 sigma from the edges and 2.5 sigma from each other.
        centres = place_sequential(
            k,
            lambda _i: rng.uniform(0.2 * side, 0.8 * side, size=(_BATCH, 2)),
            min_dist=2.5 * sigma,
            lo=0.2 * side,
            hi=0.8 * side,
        )
        if centres is None:
            continue
        labels = rng.permutation(np.arange(n) % k)

        def near_centre(i: int, c: np.ndarray = centres, lab: np.ndarray = labels) -> np.ndarray:
            return c[lab[i]] + rng.normal(0.0, sigma, size=(_BATCH, 2))

        pts = place_sequential(
            n,
            near_centre,
            min_dist=2 * radius + min_gap,
            lo=lo,
            hi=hi,
        )
        if pts is not None:
            return pts, labels, centres
    raise RuntimeError(f"cannot place {n} clustered discs")


def lattice_units(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, float, dict]:
    """Ideal cell positions in units of the cell, centred on the origin.

    ``kind`` is ``square`` (the main regular arrangement), ``rotated``, ``hex`` or ``holed``.
    Returns ``(units, span, extra)``: ``units`` has one row per filled cell, ``span`` is the
    lattice width in cells (sets the largest cell size), ``extra`` holds kind-specific meta.
    """
    extra: dict[str, Any] = {}
    if kind == "hex":
        # Rows are sqrt(3)/2 apart, so this many columns makes the patch about square.
        cols = math.ceil(math.sqrt(n * math.sqrt(3) / 2))
        units = _row_major(n, cols, row_height=math.sqrt(3) / 2, stagger=True)
        return _centre(units), cols + 0.5, extra
    if kind == "holed":
        m = math.ceil(n / 0.75)
        cols = math.ceil(math.sqrt(m))
        cells = _centre(_row_major(m, cols))
        filled = np.sort(rng.choice(m, size=n, replace=False))
        holes = np.setdiff1d(np.arange(m), filled)
        extra["n_cells"] = m
        extra["holes_units"] = cells[holes]
        return cells[filled], float(cols), extra
    cols = math.ceil(math.sqrt(n))
    units = _centre(_row_major(n, cols))
    if kind == "rotated":
        angle = float(rng.uniform(20.0, 40.0))
        units = _rotate(units, angle)
        extra["angle_deg"] = angle
    elif kind != "square":
        raise ValueError(f"unknown lattice kind {kind!r}")
    return units, float(cols), extra


def lattice_centres(
    kind: str,
    n: int,
    rng: np.random.Generator,
    *,
    radius: float = RADIUS,
    jitter: float = JITTER,
    side: int = SIDE,
) -> tuple[Points, np.ndarray, float, dict]:
    """Jittered lattice centres: ``(points, cells, cell_size, extra)``.

    The cell is the largest (up to ``side / span``, the main battery's regular cell) at which
    every jittered disc stays inside the canvas. ``cells`` are the ideal centres, in the
    order of ``points``. Rotation is about the canvas centre, clockwise on screen (y down).
    """
    units, span, extra = lattice_units(kind, n, rng)
    reach = float(np.abs(units).max()) if n else 0.0
    cell = min(side / span, (side / 2 - radius - BORDER) / (reach + jitter))
    cells = units * cell + side / 2
    pts = cells + rng.uniform(-jitter * cell, jitter * cell, size=cells.shape)
    holes = extra.pop("holes_units", None)
    if holes is not None:
        extra["holes"] = holes * cell + side / 2
    return pts, cells, cell, extra


def _row_major(
    count: int, cols: int, *, row_height: float = 1.0, stagger: bool = False
) -> np.ndarray:
    """``count`` lattice positions filled row by row; a short last row is centred on whole
    cells so every position stays on the lattice."""
    rows = math.ceil(count / cols)
    out: list[tuple[float, float]] = []
    for r in range(rows):
        k = min(cols, count - r * cols)
        offset = (cols - k) // 2 + (0.5 if stagger and r % 2 else 0.0)
        out.extend((offset + j, r * row_height) for j in range(k))
    return np.asarray(out, dtype=np.float64).reshape(-1, 2)


def _centre(units: np.ndarray) -> np.ndarray:
    """Shift so the bounding box of the positions is centred on the origin."""
    if not len(units):
        return units
    return units - (units.min(axis=0) + units.max(axis=0)) / 2


def _rotate(units: np.ndarray, angle_deg: float) -> np.ndarray:
    t = math.radians(angle_deg)
    rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    return units @ rot.T


# --------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class Mark:
    """One object to draw: centre, shape, RGB colour and radius (pixels)."""

    x: float
    y: float
    shape: str
    color: tuple[int, int, int]
    radius: float


def render(marks: list[Mark], *, side: int = SIDE, indexed: bool = False) -> Image.Image:
    """Draw marks on a white canvas, aliased, on their exact bounding boxes.

    Returns RGB, or with ``indexed`` the same pixels as a palette image (mode ``P``, fixed
    palette ``COLOR_TABLE``): a quarter of the bytes to compress, so files write ~4x faster.
    """
    im = Image.new("P", (side, side), 0)
    im.putpalette([c for rgb in COLOR_TABLE for c in rgb])
    draw = ImageDraw.Draw(im)
    for m in marks:
        fill = _COLOR_INDEX[m.color]
        r = m.radius
        if m.shape == "circle":
            draw.ellipse((m.x - r, m.y - r, m.x + r, m.y + r), fill=fill)
        elif m.shape == "square":
            h = _SQUARE_HALF * r
            draw.rectangle((m.x - h, m.y - h, m.x + h, m.y + h), fill=fill)
        elif m.shape == "triangle":
            # Upright equilateral triangle whose centroid is the stored centre.
            R = _TRIANGLE_R * r
            dx = R * math.sqrt(3) / 2
            draw.polygon(
                [(m.x, m.y - R), (m.x + dx, m.y + R / 2), (m.x - dx, m.y + R / 2)], fill=fill
            )
        else:
            raise ValueError(f"unknown shape {m.shape!r}")
    return im if indexed else im.convert("RGB")


def _discs(points: Points, radius: float, color: tuple[int, int, int] = BLACK) -> list[Mark]:
    return [Mark(float(x), float(y), "circle", color, radius) for x, y in points]


# --------------------------------------------------------------------------- stimuli


def generate(
    spec: ArraySpec, *, seed_offset: int = 0, indexed: bool = False
) -> tuple[Stimulus, Image.Image]:
    """The stimulus (image path ``images/<id>.png``) and its RGB image for one design cell
    (``indexed``: the palette image that is written to disk, same pixels)."""
    seed = derive_seed(spec, seed_offset)
    rng = np.random.default_rng(seed)
    builder = _BUILDERS.get(spec.set, _build_plain)
    points, marks, meta, names = builder(spec, rng)
    meta = {
        "battery": spec.family,
        "set": spec.set,
        "arrangement": spec.arrangement,
        "seed": seed,
        "replicate": spec.replicate,
        "seed_offset": seed_offset,
        "width": SIDE,
        "height": SIDE,
        "radius": spec.radius,
        "generator_version": GENERATOR_VERSION,
        **meta,
    }
    stimulus = Stimulus(
        id=spec.stimulus_id,
        image=f"images/{spec.stimulus_id}.png",
        n=spec.n,
        obj=names[0],
        obj_sing=names[1],
        points=[(float(x), float(y)) for x, y in points],
        meta=meta,
    )
    return stimulus, render(marks, indexed=indexed)


_Built = tuple[Points, list[Mark], dict[str, Any], tuple[str, str]]
_DOTS = ("dots", "dot")


def _build_plain(spec: ArraySpec, rng: np.random.Generator) -> _Built:
    """Black discs: main battery, dense and small factor sets, XL, lattice controls."""
    r = spec.radius
    meta: dict[str, Any] = {}
    arrangement = spec.arrangement
    if arrangement == "random":
        xl = spec.set == "xl"
        field = 1.0 if xl else RANDOM_FIELD
        pts, gap = random_centres(spec.n, rng, extent=r, field=field, allow_smaller_gap=xl)
        meta.update(min_gap=gap, field=field)
    elif arrangement == "clustered":
        gap = 0 if spec.set == "dense" else CLUSTER_GAP
        pts, labels, centres = clustered_centres(spec.n, rng, radius=r, min_gap=gap)
        meta.update(
            min_gap=float(gap),
            sigma=CLUSTER_SIGMA * SIDE,
            cluster_centres=_as_list(centres),
            cluster=[int(c) for c in labels],
        )
    else:
        kind = "square" if arrangement == "regular" else arrangement
        pts, cells, cell, extra = lattice_centres(kind, spec.n, rng, radius=r)
        meta.update(jitter=JITTER, cell=cell, cells=_as_list(cells))
        meta.update({k: _as_list(v) if isinstance(v, np.ndarray) else v for k, v in extra.items()})
    return pts, _discs(pts, r), meta, _DOTS


def _build_heterogeneous(spec: ArraySpec, rng: np.random.Generator) -> _Built:
    """Circles, squares and triangles in six colours, placed by their bounding circle."""
    r = spec.radius
    pts, gap = random_centres(spec.n, rng, extent=_SHAPE_EXTENT * r)
    shapes = [SHAPES[i] for i in rng.integers(0, len(SHAPES), size=spec.n)]
    names = list(PALETTE)
    colors = [names[i] for i in rng.integers(0, len(names), size=spec.n)]
    marks = [
        Mark(float(x), float(y), s, PALETTE[c], r)
        for (x, y), s, c in zip(pts, shapes, colors, strict=True)
    ]
    meta = {
        "factor": spec.set,
        "min_gap": gap,
        "field": RANDOM_FIELD,
        "shapes": shapes,
        "colors": colors,
        "palette": {k: list(v) for k, v in PALETTE.items()},
        "shape_size": "area of the radius-r disc",
    }
    return pts, marks, meta, ("shapes", "shape")


def _build_distractor(spec: ArraySpec, rng: np.random.Generator) -> _Built:
    """``n`` red target discs among ``n`` blue distractors, all with the random min gap."""
    r = spec.radius
    both, gap = random_centres(2 * spec.n, rng, extent=r)
    is_red = np.zeros(2 * spec.n, dtype=bool)
    is_red[rng.permutation(2 * spec.n)[: spec.n]] = True
    red, blue = both[is_red], both[~is_red]
    meta = {
        "factor": spec.set,
        "min_gap": gap,
        "field": RANDOM_FIELD,
        "target_color": "red",
        "distractor_color": "blue",
        "distractors": _as_list(blue),
    }
    return red, _discs(red, r, RED) + _discs(blue, r, BLUE), meta, ("red dots", "red dot")


def _build_factor_plain(spec: ArraySpec, rng: np.random.Generator) -> _Built:
    pts, marks, meta, names = _build_plain(spec, rng)
    return pts, marks, {"factor": spec.set, **meta}, names


_BUILDERS: dict[str, Callable[[ArraySpec, np.random.Generator], _Built]] = {
    "heterogeneous": _build_heterogeneous,
    "distractor": _build_distractor,
    "dense": _build_factor_plain,
    "small": _build_factor_plain,
}


def _as_list(a: np.ndarray) -> list[list[float]]:
    return [[float(x), float(y)] for x, y in a]
