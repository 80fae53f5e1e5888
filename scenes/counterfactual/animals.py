"""Drawn animals: mammals, birds, bugs, reptiles, sea, ancient and mythical creatures.

Each builder draws the subject with ``n`` attribute parts. Everything that is not the attribute
is drawn identically whatever ``n`` is, so a factual/CF pair differs only in the attribute.
Slot lists put the canonical parts first, so removing parts drops the last slots and adding
parts fills new ones while the canonical ones stay put (the edits of the paper: "a dog with
three legs", "a spider with ten legs").
"""

from __future__ import annotations

import math

from shapely.geometry.base import BaseGeometry

from .draw import RGB, Scene
from .geometry import (
    arc_points,
    capsule,
    circle,
    ellipse,
    fan,
    polar,
    poly,
    rect,
    spread,
    tapered,
    union,
)
from .spec import LINE, OUTLINE, Palette, Subject


def shade(c: RGB, k: float) -> RGB:
    """A darker (k < 1) or lighter (k > 1, towards white) version of a colour."""
    if k <= 1:
        return (round(c[0] * k), round(c[1] * k), round(c[2] * k))
    t = min(1.0, k - 1.0)
    return (round(c[0] + (255 - c[0]) * t), round(c[1] + (255 - c[1]) * t), round(c[2] + (255 - c[2]) * t))


def backdrop(sky: RGB, ground: RGB | None = None, horizon: float = 330.0) -> Scene:
    """A flat sky, with a ground band below ``horizon`` when ``ground`` is given."""
    sc = Scene(background=sky)
    if ground is not None:
        sc.add(rect(0, horizon, 480, 480), ground, role="background")
    return sc


def shadow(sc: Scene, cx: float, cy: float, rx: float, ground: RGB) -> None:
    """A soft contact shadow on the ground (scenery, not the object)."""
    sc.add(ellipse(cx, cy, rx, rx * 0.13), shade(ground, 0.82), role="background")


def side_legs(sc: Scene, n: int, fronts: tuple[float, float], top: float, bottom: float,
              width: float, colour: RGB, *, paw: RGB | None = None, gap: float = 26.0) -> list[tuple[float, bool]]:
    """Legs of a quadruped seen from the side: the front group gets ceil(n/2) legs, the back
    group the rest; within a group legs alternate near/far. Returns (x, far) per leg in order."""
    front_x, back_x = fronts
    groups = [(front_x, (n + 1) // 2), (back_x, n // 2)]
    legs: list[tuple[float, bool]] = []
    for cx, k in groups:
        for j in range(k):
            legs.append((cx + gap * (j - (k - 1) / 2.0), j % 2 == 1))
    for i, (x, far) in enumerate(legs):
        col = shade(colour, 0.8) if far else colour
        geom: BaseGeometry = capsule([(x, top), (x + (3 if far else 0), bottom - width / 2)], width)
        if paw is not None:
            geom = union(geom, ellipse(x + 6, bottom - width * 0.3, width * 0.62, width * 0.32))
        sc.attr(geom, col, OUTLINE, LINE, i)
    return legs


# --------------------------------------------------------------------------- mammals
def dog(n: int, p: Palette) -> Scene:
    """A dog in profile facing right; attribute: legs (4)."""
    sc = backdrop(p["sky"], p["ground"], 330)
    shadow(sc, 235, 378, 150, p["ground"])
    fur, dark = p["fur"], p["ear"]
    # Legs first: the body's outline caps them, as in a cartoon drawing.
    side_legs(sc, n, (300, 168), 250, 380, 24, fur, paw=fur, gap=30)
    sc.add(capsule([(148, 232), (120, 205), (108, 168), (114, 150)], 15), fur, OUTLINE, LINE)  # tail
    sc.add(ellipse(232, 250, 100, 50), fur, OUTLINE, LINE)  # body
    sc.add(poly([(290, 215), (318, 160), (352, 175), (330, 250)]), fur)  # neck (no outline: joins head)
    sc.add(circle(342, 172, 44), fur, OUTLINE, LINE)  # head
    sc.add(ellipse(384, 188, 34, 22), shade(fur, 1.25), OUTLINE, LINE)  # snout
    sc.add(circle(414, 180, 9), OUTLINE)  # nose
    sc.add(capsule([(392, 204), (404, 206)], 3), OUTLINE)  # mouth
    sc.add(circle(352, 160, 6), OUTLINE)  # eye
    sc.add(circle(354, 158, 2), (255, 255, 255))
    sc.add(ellipse(318, 178, 16, 34, -18), dark, OUTLINE, LINE)  # floppy ear
    if "spot" in p:
        sc.add(ellipse(235, 232, 34, 24, 10), p["spot"])
    sc.add(rect(305, 205, 335, 215, 4), p["collar"], OUTLINE, 2)  # collar
    return sc


def cat(n: int, p: Palette) -> Scene:
    """A cat's face from the front; attribute: ears (2)."""
    sc = backdrop(p["sky"])
    cx, cy, r = 240, 270, 118
    fur = p["fur"]
    # Ears: triangles rooted on the head's upper arc; the canonical pair sits at -125/-55 deg.
    step = 70.0 if n <= 2 else 140.0 / (n - 1)
    for i, a in enumerate(fan(n, -90.0, step)):
        base_l, base_r = polar(cx, cy, r - 20, a - 21), polar(cx, cy, r - 20, a + 21)
        tip = polar(cx, cy, r + 62, a)
        sc.attr(poly([base_l, tip, base_r]), fur, OUTLINE, LINE, i)
        il, ir = polar(cx, cy, r - 6, a - 12), polar(cx, cy, r - 6, a + 12)
        sc.attr(poly([il, polar(cx, cy, r + 40, a), ir]), p["inner"], None, 0, i)
    sc.add(ellipse(cx, 440, 150, 70), fur, OUTLINE, LINE)  # shoulders
    sc.add(ellipse(cx, cy, r, r * 0.9), fur, OUTLINE, LINE)  # head
    for sx in (-1, 1):
        ex = cx + sx * 44
        sc.add(ellipse(ex, cy - 12, 22, 26), p["eye"], OUTLINE, LINE)
        sc.add(ellipse(ex, cy - 12, 6, 20), OUTLINE)
        sc.add(circle(ex + 5, cy - 22, 4), (255, 255, 255))
        for k in (-1, 0, 1):  # whiskers
            sc.add(capsule([(cx + sx * 40, cy + 40 + 8 * k), (cx + sx * 132, cy + 26 + 22 * k)], 2.5), OUTLINE)
    sc.add(poly([(cx - 13, cy + 22), (cx + 13, cy + 22), (cx, cy + 36)]), p["nose"], OUTLINE, 2)
    sc.add(capsule(arc_points(cx - 12, cy + 40, 12, 10, 0, 180), 3), OUTLINE)
    sc.add(capsule(arc_points(cx + 12, cy + 40, 12, 10, 0, 180), 3), OUTLINE)
    if "stripe" in p:
        for dx in (-22, 0, 22):
            sc.add(capsule([(cx + dx, cy - 92), (cx + dx * 0.6, cy - 62)], 8), p["stripe"])
    return sc


# --------------------------------------------------------------------------- birds
def bird(n: int, p: Palette) -> Scene:
    """A songbird in profile facing right, standing; attribute: legs (2)."""
    sc = backdrop(p["sky"], p["ground"], 350)
    shadow(sc, 240, 392, 110, p["ground"])
    leg = p["leg"]
    xs = [228.0 + 30.0 * (k - (n - 1) / 2.0) for k in range(n)]
    for i, x in enumerate(xs):
        g = union(
            capsule([(x, 270), (x - 4, 388)], 7),
            capsule([(x - 4, 388), (x + 22, 392)], 5),
            capsule([(x - 4, 388), (x + 14, 380)], 5),
            capsule([(x - 4, 388), (x - 22, 391)], 5),
        )
        sc.attr(g, leg, OUTLINE, 2, i)
    sc.add(poly([(170, 250), (70, 290), (82, 312), (178, 282)]), p["wing"], OUTLINE, LINE)  # tail
    sc.add(ellipse(235, 235, 92, 68, -12), p["body"], OUTLINE, LINE)  # body
    sc.add(ellipse(248, 258, 60, 40, -10), p["belly"])  # belly
    sc.add(circle(315, 165, 50), p["body"], OUTLINE, LINE)  # head
    sc.add(poly([(358, 150), (410, 170), (356, 182)]), p["beak"], OUTLINE, LINE)
    sc.add(circle(330, 155, 8), OUTLINE)
    sc.add(circle(332, 152, 3), (255, 255, 255))
    sc.add(ellipse(215, 228, 62, 36, -18), p["wing"], OUTLINE, LINE)  # folded wing
    for k in range(3):
        sc.add(capsule([(180 + 14 * k, 236 + 4 * k), (232 + 10 * k, 230 + 2 * k)], 2.5), shade(p["wing"], 0.7))
    return sc


# --------------------------------------------------------------------------- bugs
def _arthropod_leg(x0: float, y0: float, angle: float, reach: float, width: float, side: int) -> list[tuple[float, float]]:
    """A bent leg (top view): out to the knee, then further out and down to the foot."""
    knee = (x0 + side * reach * 0.55 * math.cos(math.radians(angle)), y0 + reach * 0.55 * math.sin(math.radians(angle)) - 18)
    foot = (knee[0] + side * reach * 0.5 * math.cos(math.radians(angle * 1.3)), knee[1] + reach * 0.5 * math.sin(math.radians(angle * 1.3)) + 40)
    return [(x0, y0), knee, foot]


def spider(n: int, p: Palette) -> Scene:
    """A spider seen from above; attribute: legs (8)."""
    sc = backdrop(p["sky"])
    cx, cy = 240, 215
    right = (n + 1) // 2
    left = n // 2
    i = 0
    for side, k in ((1, right), (-1, left)):
        for a in (spread(k, -55, 60) if k > 1 else [0.0] * k):
            pts = _arthropod_leg(cx + side * 30, cy + a * 0.35, a, 190, 9, side)
            sc.attr(capsule(pts, 10), p["leg"], OUTLINE, 2, i)
            i += 1
    sc.add(ellipse(cx, 320, 68, 84), p["body"], OUTLINE, LINE)  # abdomen
    sc.add(poly([(cx, 270), (cx - 22, 310), (cx, 360), (cx + 22, 310)]), p["mark"])  # marking
    sc.add(circle(cx, cy, 48), p["body"], OUTLINE, LINE)  # cephalothorax
    for dx in (-14, 14):
        sc.add(circle(cx + dx, cy - 30, 8), p["eye"], OUTLINE, 1.5)
    for dx in (-28, 28, -6, 6):
        sc.add(circle(cx + dx, cy - 18 if abs(dx) > 10 else cy - 16, 4), p["eye"])
    sc.add(capsule([(cx - 10, cy - 44), (cx - 14, cy - 60)], 8), p["leg"], OUTLINE, 2)  # fangs
    sc.add(capsule([(cx + 10, cy - 44), (cx + 14, cy - 60)], 8), p["leg"], OUTLINE, 2)
    return sc


def ant(n: int, p: Palette) -> Scene:
    """An ant (insect) seen from above; attribute: legs (6)."""
    sc = backdrop(p["sky"])
    cx = 240
    right, left = (n + 1) // 2, n // 2
    i = 0
    for side, k in ((1, right), (-1, left)):
        for a in spread(k, -40, 45) if k > 1 else [0.0] * k:
            y0 = 215 + a * 0.7
            knee = (cx + side * 95, y0 - 30 + 0.9 * a)
            foot = (cx + side * 150, y0 + 20 + 1.8 * a)
            sc.attr(capsule([(cx + side * 10, y0), knee, foot], 8), p["leg"], OUTLINE, 2, i)
            i += 1
    col = p["body"]
    sc.add(capsule([(cx - 14, 95), (cx - 40, 40), (cx - 75, 30)], 6), col, OUTLINE, 2)  # antennae
    sc.add(capsule([(cx + 14, 95), (cx + 40, 40), (cx + 75, 30)], 6), col, OUTLINE, 2)
    sc.add(ellipse(cx, 340, 58, 82), col, OUTLINE, LINE)  # gaster
    sc.add(circle(cx, 255, 14), col, OUTLINE, LINE)  # waist
    sc.add(ellipse(cx, 210, 28, 50), col, OUTLINE, LINE)  # thorax
    sc.add(ellipse(cx, 122, 40, 36), col, OUTLINE, LINE)  # head
    for dx in (-24, 24):
        sc.add(ellipse(cx + dx, 112, 8, 12), p["eye"])
    for k in range(3):
        sc.add(capsule(arc_points(cx, 300 + 28 * k, 50 - 4 * k, 14, 20, 160, 12), 2.5), shade(col, 1.4))
    return sc


LADYBUG_SPOTS: tuple[tuple[float, float, float], ...] = (
    (240, 188, 22),
    (182, 228, 22), (298, 228, 22),
    (168, 300, 24), (312, 300, 24),
    (205, 358, 20), (275, 358, 20),
    (215, 270, 15), (265, 270, 15),
    (240, 392, 14),
)
"""Spot slots: the canonical seven (one on the seam, three per wing case) first."""


def ladybug(n: int, p: Palette) -> Scene:
    """A seven-spot ladybird seen from above; attribute: spots (7)."""
    sc = backdrop(p["sky"])
    cx, cy = 240, 280
    for side in (-1, 1):
        for k, a in enumerate((-30, 5, 40)):
            sc.add(capsule([(cx + side * 100, cy + a), (cx + side * 150, cy + a + 10 + 6 * k), (cx + side * 165, cy + a + 40)], 9), OUTLINE)
    sc.add(capsule([(cx - 20, 120), (cx - 45, 80), (cx - 60, 78)], 5), OUTLINE)  # antennae
    sc.add(capsule([(cx + 20, 120), (cx + 45, 80), (cx + 60, 78)], 5), OUTLINE)
    sc.add(ellipse(cx, 140, 50, 36), OUTLINE)  # head
    sc.add(ellipse(cx - 24, 128, 11, 9), (250, 250, 245))
    sc.add(ellipse(cx + 24, 128, 11, 9), (250, 250, 245))
    sc.add(ellipse(cx, cy, 138, 130), p["shell"], OUTLINE, LINE)  # elytra
    sc.add(capsule([(cx, 160), (cx, 408)], 4), OUTLINE)  # seam
    sc.add(ellipse(cx - 60, cy - 70, 30, 14, -30), shade(p["shell"], 1.35))  # highlight
    for i in range(n):
        x, y, r = LADYBUG_SPOTS[i]
        sc.attr(circle(x, y, r), OUTLINE, None, 0, i)
    return sc


# --------------------------------------------------------------------------- reptiles
TURTLE_LEGS: tuple[float, ...] = (-38.0, -142.0, 38.0, 142.0, 0.0, 180.0, -90.0)
"""Leg slot angles (screen degrees): the canonical four diagonals first."""


def turtle(n: int, p: Palette) -> Scene:
    """A turtle seen from above; attribute: legs (4)."""
    sc = backdrop(p["sky"])
    cx, cy = 240, 250
    for i, a in enumerate(TURTLE_LEGS[:n]):
        tip = polar(cx, cy, 168, a)
        sc.attr(union(tapered([polar(cx, cy, 70, a), tip], [30, 22]),
                      circle(tip[0], tip[1], 22)), p["skin"], OUTLINE, LINE, i)
    sc.add(poly([(cx - 14, 370), (cx, 410), (cx + 14, 370)]), p["skin"], OUTLINE, LINE)  # tail
    sc.add(ellipse(cx, 88, 34, 44), p["skin"], OUTLINE, LINE)  # head
    sc.add(circle(cx - 15, 78, 5), OUTLINE)
    sc.add(circle(cx + 15, 78, 5), OUTLINE)
    sc.add(ellipse(cx, cy, 115, 135), p["shell"], OUTLINE, LINE)  # shell
    hexes = [(0, 0), (0, -82), (0, 82), (-64, -40), (64, -40), (-64, 42), (64, 42)]
    for dx, dy in hexes:
        pts = [polar(cx + dx, cy + dy, 36, 30 + 60 * k) for k in range(6)]
        sc.add(poly(pts), shade(p["shell"], 1.25), shade(p["shell"], 0.6), 3)
    return sc


# --------------------------------------------------------------------------- sea creatures
def octopus(n: int, p: Palette) -> Scene:
    """An octopus from the front; attribute: arms (8)."""
    sc = backdrop(p["sky"])
    col = p["body"]
    bases = spread(n, 175, 305) if n > 1 else [240.0] * n
    ends = spread(n, 48, 432) if n > 1 else [240.0] * n
    arms = []
    for b, e in zip(bases, ends, strict=True):
        # One shared wiggle keeps neighbouring arms parallel, so no two arms cross.
        pts = [(b + (e - b) * t + 12 * math.sin(t * 6.0), 225 + 195 * t - 30 * t * t)
               for t in (k / 8.0 for k in range(9))]
        radii = [13 - 9 * k / 8.0 for k in range(9)]
        pts.append((pts[-1][0] + (12 if e >= 240 else -12), pts[-1][1] - 12))
        radii.append(3.5)
        arms.append((tapered(pts, radii), pts))
    # All outlines first, then all fills, so crossing arms read as one soft body.
    for i, (arm, _) in enumerate(arms):
        sc.attr(arm.buffer(LINE / 2, quad_segs=16), OUTLINE, None, 0, i)
    for i, (arm, pts) in enumerate(arms):
        sc.attr(arm, col, None, 0, i)
        for k in (3, 5):  # suckers
            sx, sy = pts[k]
            sc.attr(circle(sx, sy + 2, 4.5), shade(col, 1.45), None, 0, i)
    sc.add(ellipse(240, 165, 95, 105), col, OUTLINE, LINE)  # mantle
    sc.add(ellipse(240, 238, 76, 40), col)  # skirt over the arm roots (no seam)
    for dx in (-36, 36):
        sc.add(ellipse(240 + dx, 200, 20, 24), (255, 255, 255), OUTLINE, LINE)
        sc.add(circle(240 + dx + 4, 204, 10), OUTLINE)
    sc.add(capsule(arc_points(240, 226, 16, 8, 20, 160, 10), 3.5), OUTLINE)
    sc.add(ellipse(210, 110, 18, 10, -30), shade(col, 1.3))
    return sc


def starfish(n: int, p: Palette) -> Scene:
    """A starfish seen from above; attribute: arms (5)."""
    sc = backdrop(p["sky"], p["ground"], 0)
    cx, cy = 240, 245
    col = p["body"]
    arms = [tapered([(cx, cy), polar(cx, cy, 100, a), polar(cx, cy, 188, a)], [46, 28, 13])
            for a in fan(n, -90.0, 360.0 / max(n, 1))]
    # All outlines first, then all fills: the arms merge into one body like a real starfish.
    for i, arm in enumerate(arms):
        sc.attr(arm.buffer(LINE / 2, quad_segs=16), OUTLINE, None, 0, i)
    for i, (arm, a) in enumerate(zip(arms, fan(n, -90.0, 360.0 / max(n, 1)), strict=True)):
        sc.attr(arm, col, None, 0, i)
        for r in (80, 120, 155):
            dx, dy = polar(0, 0, r, a)
            sc.attr(circle(cx + dx, cy + dy, 6 - r / 60), shade(col, 1.4), None, 0, i)
    sc.add(circle(cx, cy, 52), col)  # centre (no outline: arms merge into it)
    for k in range(5):
        dx, dy = polar(0, 0, 26, -90 + 72 * k)
        sc.add(circle(cx + dx, cy + dy, 6), shade(col, 1.4))
    sc.add(circle(cx, cy, 7), shade(col, 1.4))
    return sc


# --------------------------------------------------------------------------- ancient creatures
def sauropod(n: int, p: Palette) -> Scene:
    """A long-necked dinosaur (sauropod) in profile; attribute: legs (4)."""
    sc = backdrop(p["sky"], p["ground"], 330)
    shadow(sc, 230, 392, 170, p["ground"])
    col = p["skin"]
    side_legs(sc, n, (292, 168), 270, 392, 38, col, gap=34)
    sc.add(tapered([(140, 270), (80, 300), (30, 330), (10, 336)], [40, 22, 10, 5]), col, OUTLINE, LINE)  # tail
    sc.add(tapered([(300, 240), (350, 160), (380, 90)], [42, 24, 18]), col, OUTLINE, LINE)  # neck
    sc.add(ellipse(220, 262, 118, 68), col, OUTLINE, LINE)  # body
    sc.add(tapered([(300, 240), (350, 160), (380, 90)], [40, 22, 16]), col)  # neck over body seam
    sc.add(ellipse(400, 86, 38, 20, 8), col, OUTLINE, LINE)  # head
    sc.add(circle(404, 78, 5), OUTLINE)
    sc.add(capsule([(414, 96), (432, 97)], 3), OUTLINE)
    for k in range(5):
        sc.add(circle(160 + 34 * k, 228 - 6 * math.sin(k), 9), shade(col, 0.8))
    return sc


def triceratops(n: int, p: Palette) -> Scene:
    """A triceratops in profile facing right; attribute: horns (3)."""
    sc = backdrop(p["sky"], p["ground"], 330)
    shadow(sc, 225, 392, 165, p["ground"])
    col = p["skin"]
    for x, far in ((300, True), (285, False), (160, True), (145, False)):
        c = shade(col, 0.8) if far else col
        sc.add(capsule([(x, 270), (x + (4 if far else 0), 375)], 38), c, OUTLINE, LINE)
    sc.add(tapered([(130, 255), (60, 300), (25, 318)], [40, 18, 6]), col, OUTLINE, LINE)  # tail
    sc.add(ellipse(215, 255, 115, 70), col, OUTLINE, LINE)  # body
    frill = ellipse(318, 192, 64, 88, 22)
    bumps = [circle(*polar(318, 192, 80, -175 + 25 * k), 13) for k in range(9)]
    sc.add(union(frill, *bumps), p["frill"], OUTLINE, LINE)  # frill with a scalloped edge
    sc.add(ellipse(322, 196, 40, 62, 22), shade(p["frill"], 1.2))
    sc.add(poly([(318, 196), (380, 200), (424, 222), (442, 250), (412, 270), (336, 266)]).buffer(4), col, OUTLINE, LINE)  # head
    sc.add(poly([(420, 222), (452, 240), (430, 258)]), shade(col, 0.7), OUTLINE, LINE)  # beak
    sc.add(circle(372, 222, 6), OUTLINE)
    # Horn slots: two long brow horns and the short nose horn (canonical), then extras.
    slots = [((372, 214), 100, 11, -18), ((356, 210), 96, 10, -26), ((420, 228), 34, 9, -62),
             ((340, 208), 90, 9, -34), ((398, 220), 70, 9, -22), ((432, 236), 26, 7, -40)]
    for i, ((x, y), length, w, a) in enumerate(slots[:n]):
        tip = polar(x, y, length, a)
        mid = polar(x, y, length * 0.55, a - 6)
        horn = poly([(x - w, y + 6), (mid[0] - w * 0.45, mid[1]), tip, (mid[0] + w * 0.6, mid[1] + w * 0.5), (x + w, y + 6)])
        sc.attr(horn, p["horn"], OUTLINE, 2.5, i)
    return sc


# --------------------------------------------------------------------------- mythical creatures
def unicorn(n: int, p: Palette) -> Scene:
    """A unicorn in profile facing right; attribute: horns (1)."""
    sc = backdrop(p["sky"], p["ground"], 340)
    shadow(sc, 225, 400, 150, p["ground"])
    col = p["coat"]
    for x, far in ((300.0, True), (288.0, False), (160.0, True), (146.0, False)):
        c = shade(col, 0.85) if far else col
        sc.add(capsule([(x, 260), (x + (3 if far else 0), 378)], 20), c, OUTLINE, LINE)
        sc.add(rect(x - 12 + (3 if far else 0), 378, x + 12 + (3 if far else 0), 396, 3), p["hoof"], OUTLINE, 2)
    sc.add(tapered([(125, 220), (95, 260), (90, 320)], [18, 22, 12]), p["mane"], OUTLINE, LINE)  # tail
    sc.add(ellipse(222, 240, 100, 50), col, OUTLINE, LINE)  # body
    sc.add(poly([(275, 230), (300, 150), (345, 130), (350, 175), (320, 265)]), col, OUTLINE, LINE)  # neck
    sc.add(poly([(290, 220), (305, 160), (340, 145), (330, 240)]), col)
    head = poly([(318, 128), (350, 104), (372, 112), (425, 170), (428, 190), (408, 196), (350, 168)])
    sc.add(head.buffer(8), col, OUTLINE, LINE)
    sc.add(poly([(330, 110), (342, 78), (352, 110)]), col, OUTLINE, LINE)  # ear
    sc.add(circle(370, 140, 6), OUTLINE)
    sc.add(circle(418, 182, 3), OUTLINE)
    mane = [(348, 106), (320, 115), (300, 140), (285, 175), (275, 215)]
    sc.add(capsule(mane, 20), p["mane"], OUTLINE, LINE)
    # Horn slots along the forehead; the canonical horn sits in the middle.
    for i, x in enumerate([368.0, 352.0, 384.0][:n] if n <= 3 else spread(n, 345, 392)):
        base_y = 112 + (x - 360) * 0.45
        sc.attr(poly([(x - 8, base_y), (x + 22, base_y - 72), (x + 8, base_y + 5)]), p["horn"], OUTLINE, 2.5, i)
        for k in (1, 2):
            t = k / 3.0
            sc.attr(capsule([(x - 8 + 30 * t * 0.9 + 2, base_y - 72 * t + 4), (x + 8 + 14 * t - 2, base_y + 5 - 77 * t + 4)], 2),
                    shade(p["horn"], 0.75), None, 0, i)
    return sc


ANIMALS: tuple[Subject, ...] = (
    Subject("dog", "dog", "Mammals", "leg", "legs", 4, (3, 5, 2, 6), dog, (
        {"sky": (205, 228, 245), "ground": (168, 206, 128), "fur": (205, 150, 88), "ear": (125, 82, 48), "collar": (200, 40, 50)},
        {"sky": (245, 232, 205), "ground": (190, 210, 140), "fur": (150, 150, 156), "ear": (80, 80, 88), "collar": (40, 90, 200)},
        {"sky": (220, 240, 230), "ground": (160, 195, 120), "fur": (240, 236, 228), "ear": (70, 60, 55), "spot": (70, 60, 55), "collar": (230, 160, 30)},
    )),
    Subject("cat", "cat", "Mammals", "ear", "ears", 2, (1, 3, 4), cat, (
        {"sky": (225, 236, 248), "fur": (236, 150, 70), "inner": (250, 190, 190), "eye": (150, 205, 90), "nose": (240, 140, 150), "stripe": (200, 110, 40)},
        {"sky": (245, 235, 220), "fur": (120, 120, 128), "inner": (240, 185, 190), "eye": (240, 200, 70), "nose": (235, 140, 150)},
        {"sky": (230, 245, 235), "fur": (60, 56, 58), "inner": (200, 150, 160), "eye": (120, 210, 120), "nose": (230, 120, 140)},
    )),
    Subject("bird", "bird", "Birds", "leg", "legs", 2, (1, 3, 4, 0), bird, (
        {"sky": (214, 234, 250), "ground": (176, 210, 140), "body": (70, 130, 215), "belly": (230, 235, 245), "wing": (40, 80, 160), "beak": (245, 170, 40), "leg": (235, 140, 40)},
        {"sky": (250, 236, 214), "ground": (190, 205, 150), "body": (215, 60, 50), "belly": (245, 200, 170), "wing": (150, 35, 35), "beak": (245, 190, 50), "leg": (225, 140, 60)},
        {"sky": (225, 245, 230), "ground": (165, 200, 130), "body": (245, 205, 50), "belly": (250, 240, 190), "wing": (190, 140, 20), "beak": (230, 120, 40), "leg": (215, 120, 50)},
    )),
    Subject("spider", "spider", "Bugs", "leg", "legs", 8, (6, 7, 9, 10), spider, (
        {"sky": (236, 236, 230), "body": (50, 44, 48), "leg": (60, 52, 56), "mark": (200, 40, 40), "eye": (220, 60, 60)},
        {"sky": (225, 238, 225), "body": (120, 80, 50), "leg": (100, 66, 42), "mark": (230, 200, 120), "eye": (30, 30, 30)},
    )),
    Subject("ant", "insect", "Bugs", "leg", "legs", 6, (4, 5, 7, 8), ant, (
        {"sky": (245, 236, 210), "body": (60, 40, 36), "leg": (70, 48, 40), "eye": (20, 20, 20)},
        {"sky": (225, 240, 215), "body": (170, 50, 30), "leg": (150, 45, 28), "eye": (30, 20, 20)},
    )),
    Subject("ladybug", "ladybug", "Bugs", "spot", "spots", 7, (5, 6, 8, 10), ladybug, (
        {"sky": (200, 230, 160), "shell": (220, 40, 35)},
        {"sky": (230, 240, 220), "shell": (235, 120, 30)},
    )),
    Subject("turtle", "turtle", "Reptiles", "leg", "legs", 4, (3, 5, 6, 2), turtle, (
        {"sky": (215, 235, 245), "skin": (150, 190, 100), "shell": (110, 140, 60)},
        {"sky": (240, 232, 210), "skin": (170, 180, 110), "shell": (140, 100, 60)},
    )),
    Subject("octopus", "octopus", "Sea Creatures", "arm", "arms", 8, (6, 7, 9, 10), octopus, (
        {"sky": (190, 225, 240), "body": (230, 100, 90)},
        {"sky": (200, 220, 250), "body": (160, 100, 190)},
    )),
    Subject("starfish", "starfish", "Sea Creatures", "arm", "arms", 5, (4, 6, 7, 3), starfish, (
        {"sky": (235, 220, 180), "ground": (235, 220, 180), "body": (240, 120, 60)},
        {"sky": (180, 215, 230), "ground": (180, 215, 230), "body": (220, 80, 110)},
    )),
    Subject("sauropod", "dinosaur", "Ancient Creatures", "leg", "legs", 4, (3, 5, 6, 2), sauropod, (
        {"sky": (215, 235, 245), "ground": (180, 200, 130), "skin": (120, 170, 110)},
        {"sky": (245, 230, 210), "ground": (200, 180, 130), "skin": (150, 130, 180)},
    )),
    Subject("triceratops", "triceratops", "Ancient Creatures", "horn", "horns", 3, (2, 4, 1, 5), triceratops, (
        {"sky": (215, 235, 245), "ground": (180, 200, 130), "skin": (110, 160, 150), "frill": (220, 160, 90), "horn": (245, 238, 215)},
        {"sky": (245, 235, 215), "ground": (195, 185, 135), "skin": (180, 120, 80), "frill": (200, 90, 70), "horn": (245, 240, 220)},
    )),
    Subject("unicorn", "unicorn", "Mythical Creatures", "horn", "horns", 1, (2, 3, 0), unicorn, (
        {"sky": (225, 225, 250), "ground": (190, 220, 160), "coat": (250, 248, 250), "mane": (200, 120, 220), "hoof": (150, 130, 150), "horn": (245, 205, 70)},
        {"sky": (250, 230, 240), "ground": (185, 215, 170), "coat": (245, 240, 235), "mane": (110, 170, 230), "hoof": (140, 130, 140), "horn": (240, 200, 90)},
    )),
)
