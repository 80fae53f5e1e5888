"""Scenes of shapely layers, rasterised with Pillow at 4x and box-reduced (anti-aliasing).

A ``Scene`` is an ordered list of ``Layer``s (painter's order). Each layer is one filled
geometry with an optional outline; its *footprint* (the geometry grown by half the outline
width) is exactly what it covers. Layers are ``background`` (scenery, not the object),
``subject`` (the object, unchanged by an edit) or ``attribute`` (the counted parts, numbered by
``part``). A factual image and its counterfactual share every non-attribute layer, so the
pixels can only differ where an attribute part is, or was, visible.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from PIL import Image, ImageDraw
from shapely import affinity
from shapely.geometry import MultiPolygon, Polygon
from shapely.geometry.base import BaseGeometry
from shapely.ops import unary_union

SIZE = 480
"""Canvas side in pixels (the released CounterCount images are 480 x 480)."""
SUPERSAMPLE = 4
"""Rasterisation factor; ``Image.reduce`` averages each 4 x 4 block (exact, deterministic)."""

RGB = tuple[int, int, int]
Role = Literal["background", "subject", "attribute"]


@dataclass(frozen=True)
class Layer:
    """One filled shape with an optional outline of ``width`` pixels."""

    geom: BaseGeometry
    fill: RGB
    outline: RGB | None = None
    width: float = 0.0
    role: Role = "subject"
    part: int | None = None
    """Index of the attribute part this layer belongs to (attribute layers only)."""

    footprint: BaseGeometry = field(init=False, repr=False, compare=False)
    """Everything this layer paints (geometry plus the outer half of its outline)."""

    def __post_init__(self) -> None:
        fp = self.geom if self.outline is None or self.width <= 0 else self.geom.buffer(self.width / 2.0, quad_segs=16)
        object.__setattr__(self, "footprint", fp)


@dataclass
class Scene:
    """Layers in painter's order plus a flat background colour."""

    background: RGB
    layers: list[Layer] = field(default_factory=list)
    _visible: tuple[int, dict[int, BaseGeometry]] | None = field(default=None, init=False, repr=False)

    def add(self, geom: BaseGeometry, fill: RGB, outline: RGB | None = None, width: float = 0.0,
            *, role: Role = "subject", part: int | None = None) -> None:
        """Append a layer (empty geometries are skipped)."""
        if geom.is_empty:
            return
        self.layers.append(Layer(geom, fill, outline, width, role, part))

    def attr(self, geom: BaseGeometry, fill: RGB, outline: RGB | None, width: float, part: int) -> None:
        """Append a layer of attribute part ``part``."""
        self.add(geom, fill, outline, width, role="attribute", part=part)

    # -- geometry derived from the layers ------------------------------------------------
    def object_geometry(self) -> BaseGeometry:
        """Union of the footprints of the object (subject and attribute layers)."""
        return unary_union([la.footprint for la in self.layers if la.role != "background"])

    def visible_parts(self) -> dict[int, BaseGeometry]:
        """Each attribute part's visible footprint: where it is the topmost paint."""
        key = len(self.layers)
        if self._visible is not None and self._visible[0] == key:
            return self._visible[1]
        cover: BaseGeometry | None = None
        pieces: dict[int, list[BaseGeometry]] = {}
        # One top-down sweep: a layer shows where nothing painted later covers it.
        for la in reversed(self.layers):
            if la.role == "attribute" and la.part is not None:
                vis = la.footprint if cover is None else la.footprint.difference(cover)
                pieces.setdefault(la.part, []).append(vis)
            cover = la.footprint if cover is None else cover.union(la.footprint)
        parts = {k: unary_union(v) for k, v in sorted(pieces.items())}
        out = {k: v for k, v in parts.items() if v.area > 1.0}
        self._visible = (key, out)
        return out

    def n_parts(self) -> int:
        """Number of visible attribute parts (the count this scene shows)."""
        return len(self.visible_parts())


def render(scene: Scene, size: int = SIZE) -> Image.Image:
    """The scene as an RGB image of ``size`` x ``size`` pixels."""
    s = SUPERSAMPLE * size / SIZE
    big = Image.new("RGB", (SUPERSAMPLE * size, SUPERSAMPLE * size), scene.background)
    for la in scene.layers:
        if la.outline is not None and la.width > 0:
            _paint(big, la.footprint, la.outline, s)
        _paint(big, la.geom, la.fill, s)
    return big.reduce(SUPERSAMPLE)


def rasterize(geom: BaseGeometry, size: int = SIZE) -> np.ndarray:
    """Boolean mask of the pixels at least half covered by ``geom`` (4x supersampled)."""
    s = SUPERSAMPLE * size / SIZE
    big = Image.new("L", (SUPERSAMPLE * size, SUPERSAMPLE * size), 0)
    _paint(big, geom, 255, s)
    return np.asarray(big.reduce(SUPERSAMPLE)) >= 128


def pixel_box(geom: BaseGeometry, size: int = SIZE, margin: float = 1.0) -> list[int]:
    """Integer pixel box ``[x1, y1, x2, y2]`` (x2, y2 exclusive) covering every pixel the
    geometry can touch after anti-aliasing (``margin`` px of slack for rasteriser rounding)."""
    if geom.is_empty:
        return [0, 0, 0, 0]
    k = size / SIZE
    x0, y0, x1, y1 = geom.bounds
    return [
        max(0, math.floor(x0 * k - margin)),
        max(0, math.floor(y0 * k - margin)),
        min(size, math.ceil(x1 * k + margin)),
        min(size, math.ceil(y1 * k + margin)),
    ]


def _polygons(geom: BaseGeometry) -> list[Polygon]:
    if isinstance(geom, Polygon):
        return [geom]
    if isinstance(geom, MultiPolygon):
        return list(geom.geoms)
    return [g for part in getattr(geom, "geoms", []) for g in _polygons(part)]


def _paint(img: Image.Image, geom: BaseGeometry, colour: RGB | int, scale: float) -> None:
    """Fill ``geom`` (holes included) with ``colour`` on ``img`` in canvas units x ``scale``."""
    polys = _polygons(affinity.scale(geom, scale, scale, origin=(0, 0)))
    for p in polys:
        if p.is_empty:
            continue
        x0, y0, x1, y1 = p.bounds
        bx0, by0 = max(0, math.floor(x0) - 1), max(0, math.floor(y0) - 1)
        bx1, by1 = min(img.width, math.ceil(x1) + 2), min(img.height, math.ceil(y1) + 2)
        if bx1 <= bx0 or by1 <= by0:
            continue
        if not p.interiors:  # the common case: fill straight onto the canvas
            ImageDraw.Draw(img).polygon(_ring(p.exterior.coords, 0, 0), fill=colour)
            continue
        mask = Image.new("L", (bx1 - bx0, by1 - by0), 0)
        d = ImageDraw.Draw(mask)
        d.polygon(_ring(p.exterior.coords, bx0, by0), fill=255)
        for hole in p.interiors:
            d.polygon(_ring(hole.coords, bx0, by0), fill=0)
        img.paste(colour, (bx0, by0, bx1, by1), mask)


def _ring(coords: Iterable[tuple[float, ...]], ox: int, oy: int) -> list[tuple[float, float]]:
    return [(x - ox, y - oy) for x, y, *_ in coords]
