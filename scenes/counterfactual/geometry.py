"""Shapely shape helpers for the drawn CounterCount subjects (480 x 480 canvas units).

Everything a subject is made of is a shapely geometry, so object masks, attribute boxes and
their intersection (Mask-BB) come from exact geometry, not from re-reading pixels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from shapely import affinity
from shapely.geometry import LineString, Point, Polygon, box
from shapely.geometry.base import BaseGeometry
from shapely.ops import unary_union

XY = tuple[float, float]
_RES = 24  # quarter-circle segments: smooth at 4x supersampling, cheap to rasterise


def ellipse(cx: float, cy: float, rx: float, ry: float, angle: float = 0.0) -> Polygon:
    """An ellipse, optionally rotated by ``angle`` degrees (clockwise on screen: y points down)."""
    e = affinity.scale(Point(0, 0).buffer(1.0, quad_segs=_RES), rx, ry)
    if angle:
        e = affinity.rotate(e, angle, origin=(0, 0))
    return affinity.translate(e, cx, cy)


def circle(cx: float, cy: float, r: float) -> Polygon:
    """A disc."""
    return Point(cx, cy).buffer(r, quad_segs=_RES)


def capsule(points: Sequence[XY], width: float) -> Polygon:
    """A stroke of constant ``width`` along a polyline with round caps and joins (limbs, sticks)."""
    return LineString(points).buffer(width / 2.0, quad_segs=_RES)


def flat_stroke(points: Sequence[XY], width: float) -> Polygon:
    """A stroke with flat ends (mitred joins): poles, clock hands, fork tines."""
    return LineString(points).buffer(width / 2.0, cap_style="flat", join_style="mitre")


def tapered(points: Sequence[XY], radii: Sequence[float]) -> BaseGeometry:
    """A limb whose half-width goes through ``radii`` at ``points``: the union of the hulls of
    consecutive discs (a smooth tapering stroke)."""
    if len(points) != len(radii) or len(points) < 2:
        raise ValueError("tapered needs as many radii as points, at least two")
    discs = [circle(x, y, r) for (x, y), r in zip(points, radii, strict=True)]
    return unary_union([unary_union([a, b]).convex_hull for a, b in zip(discs, discs[1:], strict=False)])


def poly(points: Sequence[XY]) -> Polygon:
    """A polygon through the given points."""
    return Polygon(points)


def rect(x0: float, y0: float, x1: float, y1: float, r: float = 0.0) -> Polygon:
    """An axis-aligned rectangle, corners rounded with radius ``r``."""
    if r <= 0:
        return box(x0, y0, x1, y1)
    return box(x0 + r, y0 + r, x1 - r, y1 - r).buffer(r, quad_segs=_RES)


def star(cx: float, cy: float, n: int, r_out: float, r_in: float, angle: float = -90.0) -> Polygon:
    """A star polygon with ``n`` points (the first at ``angle`` degrees); n < 2 gives a disc."""
    if n < 2:
        return circle(cx, cy, r_in)
    pts = []
    for k in range(2 * n):
        r = r_out if k % 2 == 0 else r_in
        a = math.radians(angle + 180.0 * k / n)
        pts.append((cx + r * math.cos(a), cy + r * math.sin(a)))
    return Polygon(pts)


def sector(cx: float, cy: float, r: float, a0: float, a1: float, steps: int = 48) -> Polygon:
    """A pie slice from ``a0`` to ``a1`` degrees."""
    pts = [(cx, cy)]
    for k in range(steps + 1):
        a = math.radians(a0 + (a1 - a0) * k / steps)
        pts.append((cx + r * math.cos(a), cy + r * math.sin(a)))
    return Polygon(pts)


def arc_points(cx: float, cy: float, rx: float, ry: float, a0: float, a1: float, steps: int = 24) -> list[XY]:
    """Points on an elliptical arc from ``a0`` to ``a1`` degrees."""
    return [
        (cx + rx * math.cos(math.radians(a0 + (a1 - a0) * k / steps)),
         cy + ry * math.sin(math.radians(a0 + (a1 - a0) * k / steps)))
        for k in range(steps + 1)
    ]


def polar(cx: float, cy: float, r: float, angle: float) -> XY:
    """The point at distance ``r`` and ``angle`` degrees from (cx, cy)."""
    a = math.radians(angle)
    return (cx + r * math.cos(a), cy + r * math.sin(a))


def rotate(g: BaseGeometry, angle: float, origin: XY) -> BaseGeometry:
    """Rotate by ``angle`` degrees about ``origin``."""
    return affinity.rotate(g, angle, origin=origin)


def mirror_x(g: BaseGeometry, x: float) -> BaseGeometry:
    """Mirror about the vertical line at ``x``."""
    return affinity.scale(g, -1.0, 1.0, origin=(x, 0.0))


def union(*geoms: BaseGeometry) -> BaseGeometry:
    """The union of several geometries."""
    return unary_union(list(geoms))


def spread(n: int, lo: float, hi: float) -> list[float]:
    """``n`` values evenly spread over [lo, hi] (the centre for n = 1)."""
    if n <= 0:
        return []
    if n == 1:
        return [(lo + hi) / 2.0]
    return [lo + (hi - lo) * k / (n - 1) for k in range(n)]


def fan(n: int, centre: float, step: float) -> list[float]:
    """``n`` angles ``step`` apart, centred on ``centre`` (radial attributes)."""
    return [centre + step * (k - (n - 1) / 2.0) for k in range(n)]
