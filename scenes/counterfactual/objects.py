"""Drawn made things and people: human, functional, housing, transportation, landmark, logo,
symbol, flag, food and a fictional character.

As in ``animals``: non-attribute layers never depend on the count, and slot lists put the
canonical parts first so removals drop parts and additions keep the canonical ones in place
wherever the layout allows.
"""

from __future__ import annotations

import math

import numpy as np

from .animals import backdrop, shade
from .draw import RGB, Scene
from .geometry import (
    arc_points,
    capsule,
    circle,
    ellipse,
    fan,
    flat_stroke,
    polar,
    poly,
    rect,
    rotate,
    sector,
    spread,
    star,
    union,
)
from .spec import LINE, OUTLINE, Palette, Subject

WHITE: RGB = (252, 252, 250)


# --------------------------------------------------------------------------- human
def hand(n: int, p: Palette) -> Scene:
    """An open right hand, palm towards the viewer; attribute: fingers (5, thumb included)."""
    sc = backdrop(p["sky"])
    skin = p["skin"]
    if n >= 1:  # the thumb, splayed out to the left
        sc.attr(capsule([(190, 330), (140, 280), (118, 228)], 40), skin, OUTLINE, LINE, 0)
        sc.attr(ellipse(120, 222, 10, 12, -25), shade(skin, 1.3), None, 0, 0)
    k = max(n - 1, 0)
    xs = spread(k, 186, 294) if k > 1 else [240.0] * k
    width = min(32.0, 120.0 / max(k, 1) - 4)
    profile = np.interp(np.linspace(0, 1, k) if k > 1 else [0.35], [0, 1 / 3, 2 / 3, 1], [132, 150, 140, 106])
    for j, (x, length, a) in enumerate(zip(xs, profile, fan(k, 0.0, 7.0), strict=True)):
        base = (x, 250)
        tip = polar(x, 250, float(length), -90 + a)
        finger = capsule([base, tip], width)
        nail = ellipse(tip[0], tip[1] + width * 0.35, width * 0.28, width * 0.34, a)
        sc.attr(finger, skin, OUTLINE, LINE, j + 1)
        sc.attr(nail, shade(skin, 1.3), None, 0, j + 1)
        mid = polar(x, 250, float(length) * 0.5, -90 + a)
        sc.attr(capsule([(mid[0] - width * 0.25, mid[1]), (mid[0] + width * 0.25, mid[1])], 2), shade(skin, 0.75), None, 0, j + 1)
    sc.add(rect(182, 380, 298, 480), skin, OUTLINE, LINE)  # wrist
    sc.add(rect(168, 235, 312, 400, 46), skin, OUTLINE, LINE)  # palm
    sc.add(rect(185, 400, 295, 480), skin)  # wrist joins the palm without a seam
    sc.add(capsule(arc_points(262, 330, 60, 40, 200, 290, 12), 3), shade(skin, 0.75))  # palm crease
    sc.add(rect(175, 440, 305, 480), p["sleeve"], OUTLINE, LINE)  # cuff
    return sc


EYE_SLOTS: tuple[tuple[float, float], ...] = ((200, 236), (280, 236), (240, 178), (240, 300), (150, 190))
"""Eye slots: the canonical pair first, then a third on the forehead and so on."""


def face(n: int, p: Palette) -> Scene:
    """A person's face from the front; attribute: eyes (2)."""
    sc = backdrop(p["sky"])
    skin, hair = p["skin"], p["hair"]
    sc.add(ellipse(240, 470, 150, 70), p["shirt"], OUTLINE, LINE)  # shoulders
    sc.add(rect(205, 340, 275, 420), skin, OUTLINE, LINE)  # neck
    sc.add(ellipse(240, 150, 130, 110), hair, OUTLINE, LINE)  # hair (back)
    for sx in (-1, 1):
        sc.add(ellipse(240 + sx * 112, 250, 22, 34), skin, OUTLINE, LINE)  # ears
    sc.add(ellipse(240, 245, 112, 135), skin, OUTLINE, LINE)  # face
    sc.add(poly([(128, 200), (150, 120), (240, 95), (330, 120), (352, 200), (300, 140), (200, 145)]), hair)  # fringe
    for sx in (-1, 1):
        sc.add(capsule([(240 + sx * 22, 210), (240 + sx * 62, 204)], 7), shade(hair, 0.8))  # brows
    sc.add(capsule([(240, 250), (232, 288), (246, 292)], 4), shade(skin, 0.7))  # nose
    sc.add(capsule(arc_points(240, 312, 34, 16, 15, 165, 16), 5), (180, 70, 70))  # smile
    for sx in (-1, 1):
        sc.add(circle(240 + sx * 70, 300, 16), shade(p["cheek"], 1.0))
    for i, (x, y) in enumerate(EYE_SLOTS[:n]):
        sc.attr(ellipse(x, y, 24, 15), WHITE, OUTLINE, 2.5, i)
        sc.attr(circle(x, y, 11), p["iris"], None, 0, i)
        sc.attr(circle(x, y, 5), OUTLINE, None, 0, i)
        sc.attr(circle(x + 4, y - 4, 2.5), WHITE, None, 0, i)
    return sc


# --------------------------------------------------------------------------- functional
CLOCK_HANDS: tuple[tuple[float, float, float, RGB | None], ...] = (
    (-150.0, 92.0, 13.0, None),   # hour hand at ten
    (-30.0, 140.0, 9.0, None),    # minute hand at two
    (110.0, 150.0, 4.0, (210, 40, 40)),  # second hand
    (45.0, 120.0, 8.0, None),
    (170.0, 110.0, 8.0, None),
)
"""Hand slots (angle from 3 o'clock, length, width, colour): hour and minute first (10:10)."""


def clock(n: int, p: Palette) -> Scene:
    """A wall clock; attribute: hands (2)."""
    sc = backdrop(p["wall"])
    cx, cy = 240, 240
    sc.add(circle(cx + 6, cy + 8, 196), shade(p["wall"], 0.85), role="background")  # shadow
    sc.add(circle(cx, cy, 196), p["rim"], OUTLINE, LINE)
    sc.add(circle(cx, cy, 172), p["face"], OUTLINE, LINE)
    for k in range(60):
        a = 6.0 * k
        major = k % 5 == 0
        r0 = 140 if major else 154
        sc.add(flat_stroke([polar(cx, cy, r0, a), polar(cx, cy, 164, a)], 8 if major else 2.5), OUTLINE)
    for i, (a, length, width, colour) in enumerate(CLOCK_HANDS[:n]):
        tail = polar(cx, cy, 22, a + 180)
        tip = polar(cx, cy, length, a)
        col = colour or p["hand"]
        sc.attr(flat_stroke([tail, tip], width), col, None, 0, i)
        sc.attr(poly([polar(*tip, width * 0.9, a + 90), polar(*tip, width * 1.8, a), polar(*tip, width * 0.9, a - 90)]), col, None, 0, i)
    sc.add(circle(cx, cy, 12), p["hand"])  # hub (drawn over the hands' roots)
    sc.add(circle(cx, cy, 4), p["rim"])
    return sc


def fork(n: int, p: Palette) -> Scene:
    """A table fork on a napkin; attribute: tines (4)."""
    sc = backdrop(p["table"])
    sc.add(rotate(rect(110, 40, 370, 440, 8), 8, (240, 240)), p["napkin"], role="background")
    metal = p["metal"]
    xs = spread(n, 194, 286) if n > 1 else [240.0] * n
    width = min(15.0, 110.0 / max(n, 1) - 7) if n > 1 else 15.0
    for i, x in enumerate(xs):
        sc.attr(capsule([(x, 60), (x, 205)], width), metal, OUTLINE, 2.5, i)
    sc.add(poly([(180, 190), (300, 190), (292, 240), (262, 268), (218, 268), (188, 240)]).buffer(6), metal, OUTLINE, 2.5)
    sc.add(rect(226, 262, 254, 300), metal)  # neck
    sc.add(union(capsule([(240, 280), (240, 440)], 26), ellipse(240, 410, 24, 42)), metal, OUTLINE, 2.5)  # handle
    sc.add(rect(224, 255, 256, 300), metal)  # neck over the handle's outline
    sc.add(capsule([(236, 300), (236, 430)], 5), shade(metal, 1.3))  # highlight
    return sc


LIGHT_COLOURS: tuple[RGB, ...] = ((225, 45, 40), (250, 190, 40), (60, 190, 80))


def traffic_light(n: int, p: Palette) -> Scene:
    """A traffic light on a pole; attribute: lights (3)."""
    sc = backdrop(p["sky"])
    sc.add(rect(228, 380, 252, 480), p["pole"], OUTLINE, LINE)  # pole
    sc.add(rect(175, 30, 305, 390, 22), p["housing"], OUTLINE, LINE)
    sc.add(rect(190, 45, 290, 375, 14), shade(p["housing"], 1.25))
    r = min(40.0, 300.0 / max(n, 1) / 2 - 5)
    for i, y in enumerate(spread(n, 45 + 330 / (2 * n), 375 - 330 / (2 * n)) if n else []):
        col = LIGHT_COLOURS[i % 3]
        sc.attr(circle(240, y, r + 5), (40, 40, 40), None, 0, i)
        sc.attr(circle(240, y, r), col, OUTLINE, 2, i)
        sc.attr(ellipse(240 - r * 0.35, y - r * 0.35, r * 0.25, r * 0.18, -35), shade(col, 1.5), None, 0, i)
        sc.attr(sector(240, y - 2, r + 12, 185, 355, 24).difference(circle(240, y, r + 5)), shade(p["housing"], 0.8), OUTLINE, 2, i)  # visor
    return sc


# --------------------------------------------------------------------------- housing
TABLE_LEGS: tuple[tuple[float, float, float, bool], ...] = (
    (118, 262, 420, False), (362, 262, 420, False), (398, 200, 372, True), (164, 200, 372, True),
    (240, 262, 420, False), (281, 200, 372, True),
)
"""Leg slots (x, top, bottom, behind): the front pair, the back pair, then middle legs."""


def table(n: int, p: Palette) -> Scene:
    """A wooden table in three-quarter view; attribute: legs (4)."""
    sc = backdrop(p["wall"], p["floor"], 300)
    sc.add(ellipse(260, 412, 190, 22), shade(p["floor"], 0.85), role="background")
    wood = p["wood"]
    for i, (x, top, bottom, behind) in enumerate(TABLE_LEGS[:n]):
        col = shade(wood, 0.78) if behind else wood
        sc.attr(rect(x - 11, top, x + 11, bottom, 3), col, OUTLINE, LINE, i)
    sc.add(poly([(100, 250), (380, 250), (380, 268), (100, 268)]), shade(wood, 0.8), OUTLINE, LINE)  # front edge
    sc.add(poly([(100, 250), (150, 180), (420, 180), (380, 250)]), wood, OUTLINE, LINE)  # top
    sc.add(poly([(380, 250), (420, 180), (420, 196), (380, 268)]), shade(wood, 0.65), OUTLINE, LINE)  # side edge
    for k in range(3):
        y = 198 + 16 * k
        sc.add(capsule([(150 - 0.7 * (y - 180) + 20, y), (400 - 0.6 * (y - 180), y + 3)], 2), shade(wood, 0.88))
    return sc


def stool(n: int, p: Palette) -> Scene:
    """A round stool; attribute: legs (3)."""
    sc = backdrop(p["wall"], p["floor"], 320)
    sc.add(ellipse(240, 428, 150, 22), shade(p["floor"], 0.85), role="background")
    cx, cy, rx, ry = 240, 170, 120, 38
    wood = p["wood"]
    legs = []
    for a in fan(n, 90.0, 360.0 / max(n, 1)):
        top = (cx + 0.72 * rx * math.cos(math.radians(a)), cy + 18 + 0.72 * ry * math.sin(math.radians(a)))
        foot = (cx + 1.25 * rx * math.cos(math.radians(a)), 405 + 34 * math.sin(math.radians(a)))
        legs.append((math.sin(math.radians(a)), top, foot))
    order = sorted(range(len(legs)), key=lambda i: legs[i][0])  # back legs first
    for rank, i in enumerate(order):
        depth, top, foot = legs[i]
        col = wood if depth > 0 else shade(wood, 0.75)
        sc.attr(capsule([top, foot], 22), col, OUTLINE, LINE, rank)
    sc.add(ellipse(cx, cy + 20, rx, ry), shade(p["seat"], 0.7), OUTLINE, LINE)  # seat side
    sc.add(rect(cx - rx, cy, cx + rx, cy + 20), shade(p["seat"], 0.7))
    sc.add(capsule([(cx - rx, cy), (cx - rx, cy + 20)], LINE), OUTLINE)
    sc.add(capsule([(cx + rx, cy), (cx + rx, cy + 20)], LINE), OUTLINE)
    sc.add(ellipse(cx, cy, rx, ry), p["seat"], OUTLINE, LINE)  # seat top
    sc.add(ellipse(cx - 30, cy - 8, 40, 10), shade(p["seat"], 1.3))
    return sc


def flower(n: int, p: Palette) -> Scene:
    """A flower in a pot; attribute: petals (5)."""
    sc = backdrop(p["wall"], p["table"], 400)
    cx, cy = 240, 150
    sc.add(capsule([(240, 200), (246, 300), (240, 380)], 12), (70, 150, 60), OUTLINE, 2.5)  # stem
    sc.add(ellipse(200, 300, 40, 16, -30), (80, 170, 70), OUTLINE, 2.5)  # leaves
    sc.add(ellipse(286, 280, 40, 16, 30), (80, 170, 70), OUTLINE, 2.5)
    sc.add(poly([(170, 350), (310, 350), (290, 450), (190, 450)]), p["pot"], OUTLINE, LINE)  # pot
    sc.add(rect(160, 340, 320, 372, 4), shade(p["pot"], 0.85), OUTLINE, LINE)
    width = min(34.0, 0.9 * math.pi * 60 / max(n, 1))
    for i, a in enumerate(fan(n, -90.0, 360.0 / max(n, 1))):
        px, py = polar(cx, cy, 70, a)
        sc.attr(ellipse(px, py, 58, width, a), p["petal"], OUTLINE, LINE, i)
        sc.attr(ellipse(*polar(cx, cy, 74, a), 30, width * 0.25, a), shade(p["petal"], 1.25), None, 0, i)
    sc.add(circle(cx, cy, 36), p["centre"], OUTLINE, LINE)
    for k in range(8):
        sc.add(circle(*polar(cx, cy, 20, 45 * k), 4), shade(p["centre"], 0.75))
    return sc


# --------------------------------------------------------------------------- transportation
CAR_WHEELS: tuple[tuple[float, float], ...] = (
    (158, 140), (322, 140), (158, 350), (322, 350), (158, 245), (322, 245), (240, 420),
)
"""Wheel slots of the top-view car: front pair, rear pair, then a middle pair."""


def car(n: int, p: Palette) -> Scene:
    """A car seen from above, driving up the road; attribute: wheels (4)."""
    sc = backdrop(p["road"])
    for lane_y in range(-10, 480, 80):
        sc.add(rect(62, lane_y, 72, lane_y + 44), (240, 240, 230), role="background")
        sc.add(rect(408, lane_y, 418, lane_y + 44), (240, 240, 230), role="background")
    for i, (x, y) in enumerate(CAR_WHEELS[:n]):
        sc.attr(rect(x - 22, y - 36, x + 22, y + 36, 10), (35, 35, 38), OUTLINE, 2, i)
        sc.attr(rect(x - 14, y - 28, x + 14, y + 28, 6), (70, 70, 76), None, 0, i)
    body = p["body"]
    sc.add(rect(170, 60, 310, 430, 50), body, OUTLINE, LINE)
    sc.add(poly([(186, 170), (294, 170), (282, 215), (198, 215)]), p["glass"], OUTLINE, 2.5)  # windscreen
    sc.add(rect(196, 215, 284, 320, 10), shade(body, 0.85), OUTLINE, 2.5)  # roof
    sc.add(poly([(198, 320), (282, 320), (290, 350), (190, 350)]), p["glass"], OUTLINE, 2.5)  # rear window
    for sx in (-1, 1):
        sc.add(ellipse(240 + sx * 40, 72, 16, 8), (255, 245, 190), OUTLINE, 2)  # headlights
        sc.add(rect(240 + sx * 40 - 14, 414, 240 + sx * 40 + 14, 424, 3), (220, 40, 40), OUTLINE, 2)
        sc.add(ellipse(240 + sx * 76, 185, 12, 6), body, OUTLINE, 2)  # mirrors
    return sc


BIKE_WHEELS: tuple[float, ...] = (120.0, 360.0, 240.0)
"""Wheel hub x positions: rear, front, then one in the middle."""


def bicycle(n: int, p: Palette) -> Scene:
    """A bicycle from the side; attribute: wheels (2)."""
    sc = backdrop(p["sky"], p["ground"], 380)
    hub_y, r = 320.0, 56.0
    for i, x in enumerate(BIKE_WHEELS[:n]):
        tyre = circle(x, hub_y, r).difference(circle(x, hub_y, r - 11))
        sc.attr(tyre, (40, 40, 44), OUTLINE, 1.5, i)
        for k in range(8):
            a = 22.5 * k
            sc.attr(flat_stroke([polar(x, hub_y, r - 11, a), polar(x, hub_y, r - 11, a + 180)], 1.6), (170, 170, 175), None, 0, i)
        sc.attr(circle(x, hub_y, 7), (120, 120, 128), OUTLINE, 1.5, i)
    frame = p["frame"]
    bb = (230.0, 322.0)
    seat_top, head_top = (190.0, 200.0), (330.0, 196.0)
    tubes = [
        [(120, hub_y), bb], [(120, hub_y), seat_top], [seat_top, bb], [seat_top, (335, 222)],
        [(335, 222), bb], [head_top, (360, hub_y)],
    ]
    for t in tubes:
        sc.add(capsule(t, 11), frame, OUTLINE, 2)
    sc.add(capsule([(186, 190), (182, 174)], 8), (60, 60, 60))  # seat post
    sc.add(poly([(150, 168), (212, 166), (206, 180), (160, 180)]).buffer(4), (45, 45, 50), OUTLINE, 2)  # saddle
    sc.add(capsule([(330, 196), (322, 170), (300, 166)], 8), (60, 60, 60), OUTLINE, 2)  # handlebar
    sc.add(capsule([(300, 166), (290, 168)], 12), (40, 40, 40))
    sc.add(circle(*bb, 18), (150, 150, 158), OUTLINE, 2)  # chainring
    sc.add(capsule([bb, (250, 350)], 7), (60, 60, 60))  # crank
    sc.add(rect(240, 346, 266, 354, 2), (40, 40, 40))  # pedal
    return sc


# --------------------------------------------------------------------------- landmark
PYRAMIDS: tuple[tuple[float, float, float, float], ...] = (
    (170, 112, 165, 372), (322, 82, 118, 372), (420, 46, 64, 372), (46, 38, 54, 372), (120, 44, 56, 446),
)
"""Pyramid slots (apex x, half base, height, base y): the three of Giza first, large to small."""


def pyramids(n: int, p: Palette) -> Scene:
    """The pyramids of Giza in the desert; attribute: pyramids (3)."""
    sc = backdrop(p["sky"], p["sand"], 360)
    sc.add(circle(400, 80, 34), (255, 240, 170), role="background")  # sun
    slots = list(enumerate(PYRAMIDS[:n]))
    # Far (higher base line, then smaller) pyramids first, so nearer ones overlap them.
    for i, (x, half, h, base) in sorted(slots, key=lambda s: (s[1][3], s[1][2])):
        left = poly([(x - half, base), (x, base - h), (x + half * 0.25, base)])
        right = poly([(x + half * 0.25, base), (x, base - h), (x + half, base)])
        sc.attr(left, p["lit"], OUTLINE, 2.5, i)
        sc.attr(right, p["shade"], OUTLINE, 2.5, i)
        for k in range(1, 6):  # stone courses
            yy = base - h * k / 6
            xl = x - half * (1 - k / 6)
            sc.attr(flat_stroke([(xl, yy), (x + half * 0.25 * (1 - k / 6), yy)], 1.4), shade(p["lit"], 0.85), None, 0, i)
    return sc


# --------------------------------------------------------------------------- logo
RING_COLOURS_TOP: tuple[RGB, ...] = ((0, 129, 200), (20, 20, 20), (238, 51, 78), (130, 60, 160))
RING_COLOURS_BOTTOM: tuple[RGB, ...] = ((252, 177, 49), (0, 166, 81), (240, 120, 30))


def olympic_rings(n: int, p: Palette) -> Scene:
    """The Olympic rings; attribute: rings (5)."""
    sc = backdrop(p["sky"])
    top, bottom = (n + 1) // 2, n // 2
    r, w, step = 58.0, 11.0, 128.0
    xs_top = [240 + step * (k - (top - 1) / 2.0) for k in range(top)]
    xs_bottom = [240 + step * (k - (bottom - 1) / 2.0) for k in range(bottom)]
    if top == bottom:  # keep the staggered look: the lower row shifts half a step right
        xs_bottom = [x + step / 2 for x in xs_top[:bottom]]
        xs_top = [x - step / 4 for x in xs_top]
        xs_bottom = [x - step / 4 for x in xs_bottom]
    rings = [(x, 210.0, RING_COLOURS_TOP[k]) for k, x in enumerate(xs_top)]
    rings += [(x, 270.0, RING_COLOURS_BOTTOM[k]) for k, x in enumerate(xs_bottom)]
    for i, (x, y, col) in enumerate(rings):
        sc.attr(circle(x, y, r).difference(circle(x, y, r - w)), col, None, 0, i)
    return sc


# --------------------------------------------------------------------------- symbol
def star_symbol(n: int, p: Palette) -> Scene:
    """A star; attribute: points (5). The whole star changes with the count, so every layer,
    outline and highlight included, is cut into per-point wedges and belongs to its point."""
    sc = backdrop(p["sky"])
    outer = 195.0
    inner = 82.0 if n >= 5 else 58.0  # fewer points need deeper notches to read as a star
    body = star(240, 250, n, outer, inner)
    bevel = star(240, 250, n, outer * 0.55, inner * 0.55)
    rim = body.boundary.buffer(LINE / 2)
    wedges = [sector(240, 250, outer + 10, a - 180.0 / n, a + 180.0 / n) for a in fan(n, -90.0, 360.0 / n)] if n else []
    for i, w in enumerate(wedges):
        sc.attr(body.intersection(w), p["star"], None, 0, i)
        sc.attr(bevel.intersection(w), shade(p["star"], 1.3), None, 0, i)
    for i, w in enumerate(wedges):
        sc.attr(rim.intersection(w), OUTLINE, None, 0, i)
    return sc


# --------------------------------------------------------------------------- flags
FLAG = (110.0, 90.0, 410.0, 290.0)


def _flag_base(sc: Scene, p: Palette) -> None:
    sc.add(rect(94, 70, 106, 470), p["pole"], OUTLINE, LINE)
    sc.add(circle(100, 66, 10), (220, 190, 80), OUTLINE, 2)


def french_flag(n: int, p: Palette) -> Scene:
    """The French tricolour on a pole; attribute: stripes (3)."""
    sc = backdrop(p["sky"])
    _flag_base(sc, p)
    x0, y0, x1, y1 = FLAG
    colours = ((0, 85, 164), (250, 250, 250), (239, 65, 53))
    edges = spread(n + 1, x0, x1) if n else []
    for i in range(n):
        sc.attr(rect(edges[i], y0, edges[i + 1], y1), colours[i % 3], None, 0, i)
    sc.add(rect(x0, y0, x1, y1).boundary.buffer(LINE / 2), OUTLINE)
    return sc


def japanese_flag(n: int, p: Palette) -> Scene:
    """The flag of Japan on a pole; attribute: red circles (1)."""
    sc = backdrop(p["sky"])
    _flag_base(sc, p)
    x0, y0, x1, y1 = FLAG
    sc.add(rect(x0, y0, x1, y1), WHITE, OUTLINE, LINE)
    r = 60.0 if n <= 2 else min(44.0, 150.0 / (n - 1) / 2 - 4)
    xs = spread(n, 185, 335) if n > 1 else [260.0] * n
    for i, x in enumerate(xs):
        sc.attr(circle(x, 190, r), (188, 0, 45), None, 0, i)
    return sc


# --------------------------------------------------------------------------- food
YOLKS: tuple[tuple[float, float], ...] = ((250, 235), (180, 290), (315, 300), (200, 190))


def fried_egg(n: int, p: Palette) -> Scene:
    """A fried egg on a plate; attribute: yolks (1)."""
    sc = backdrop(p["table"])
    sc.add(circle(240, 245, 215), (238, 238, 236), OUTLINE, 2, role="background")  # plate
    sc.add(circle(240, 245, 170), (248, 248, 246), role="background")
    white = union(circle(240, 240, 118), circle(185, 290, 80), circle(310, 285, 78), circle(300, 190, 70), circle(175, 200, 62))
    sc.add(white, WHITE, (200, 195, 185), 2.5)
    for i, (x, y) in enumerate(YOLKS[:n]):
        sc.attr(circle(x, y, 40), p["yolk"], shade(p["yolk"], 0.75), 3, i)
        sc.attr(ellipse(x - 12, y - 14, 12, 7, -30), shade(p["yolk"], 1.5), None, 0, i)
    return sc


def pizza(n: int, p: Palette) -> Scene:
    """A round pizza cut into slices; attribute: slices (8)."""
    sc = backdrop(p["table"])
    sc.add(circle(240, 240, 222), (200, 160, 110), OUTLINE, 2, role="background")  # board
    cx, cy = 240, 240
    sc.add(circle(cx, cy, 200), p["crust"], OUTLINE, LINE)
    sc.add(circle(cx, cy, 176), (205, 60, 40))
    sc.add(circle(cx, cy, 170), p["cheese"])
    rng = np.random.default_rng(7)  # fixed: toppings never depend on the slice count
    for _ in range(11):
        a, r = rng.uniform(0, 360), 150 * math.sqrt(rng.uniform(0.05, 1))
        sc.add(circle(*polar(cx, cy, r, a), 17), (180, 40, 35), shade((180, 40, 35), 0.7), 2)
    for _ in range(14):
        a, r = rng.uniform(0, 360), 160 * math.sqrt(rng.uniform(0, 1))
        sc.add(ellipse(*polar(cx, cy, r, a), 7, 4, rng.uniform(0, 180)), (60, 130, 50))
    # A slice is the wedge between two cuts; the cuts are what the count changes.
    for i, a in enumerate(fan(n, -90.0 + 180.0 / max(n, 1), 360.0 / max(n, 1)) if n > 1 else []):
        sc.attr(flat_stroke([(cx, cy), polar(cx, cy, 204, a)], 5), shade(p["crust"], 0.55), None, 0, i)
    return sc


# --------------------------------------------------------------------------- fictional characters
SNOWMAN_ARMS: tuple[float, ...] = (200.0, -20.0, 158.0, 22.0, -58.0)
"""Arm slot angles (screen degrees) from the middle ball: left and right first."""


def snowman(n: int, p: Palette) -> Scene:
    """A snowman; attribute: arms (2)."""
    sc = backdrop(p["sky"], (245, 248, 252), 390)
    twig = (110, 72, 40)
    for i, a in enumerate(SNOWMAN_ARMS[:n]):
        root = polar(240, 255, 50, a)
        tip = polar(240, 255, 165, a)
        mid = polar(240, 255, 120, a)
        g = union(capsule([root, tip], 8), capsule([mid, polar(*mid, 36, a - 40)], 6), capsule([mid, polar(*mid, 30, a + 35)], 6))
        sc.attr(g, twig, OUTLINE, 1.5, i)
    snow = (250, 250, 252)
    sc.add(circle(240, 365, 95), snow, OUTLINE, LINE)
    sc.add(circle(240, 250, 70), snow, OUTLINE, LINE)
    sc.add(circle(240, 150, 52), snow, OUTLINE, LINE)
    sc.add(rect(182, 180, 298, 200, 8), p["scarf"], OUTLINE, 2)  # scarf
    sc.add(rect(250, 190, 272, 246, 6), p["scarf"], OUTLINE, 2)
    sc.add(rect(196, 100, 284, 112), OUTLINE)  # hat brim
    sc.add(rect(210, 40, 270, 104, 4), OUTLINE)
    sc.add(rect(210, 86, 270, 96), p["scarf"])
    for dx in (-18, 18):
        sc.add(circle(240 + dx, 140, 6), OUTLINE)
    sc.add(poly([(240, 150), (292, 162), (240, 164)]), (240, 130, 40), OUTLINE, 1.5)  # carrot
    for y in (230, 262, 300, 340):
        sc.add(circle(240, y, 7), OUTLINE)
    return sc


OBJECTS: tuple[Subject, ...] = (
    Subject("hand", "hand", "Human", "finger", "fingers", 5, (4, 6, 7, 3), hand, (
        {"sky": (225, 235, 245), "skin": (240, 200, 165), "sleeve": (70, 100, 170)},
        {"sky": (240, 230, 220), "skin": (180, 125, 90), "sleeve": (170, 60, 60)},
        {"sky": (225, 240, 230), "skin": (120, 80, 55), "sleeve": (60, 140, 90)},
    )),
    Subject("face", "person", "Human", "eye", "eyes", 2, (1, 3, 4), face, (
        {"sky": (220, 235, 250), "skin": (245, 205, 175), "hair": (120, 80, 45), "shirt": (70, 110, 180), "iris": (70, 120, 180), "cheek": (245, 180, 170)},
        {"sky": (245, 230, 220), "skin": (170, 115, 80), "hair": (40, 32, 30), "shirt": (200, 80, 70), "iris": (90, 60, 40), "cheek": (200, 120, 100)},
    )),
    Subject("clock", "clock", "Functional", "hand", "hands", 2, (1, 3, 4, 0), clock, (
        {"wall": (232, 222, 205), "rim": (150, 40, 40), "face": (252, 250, 242), "hand": (30, 30, 34)},
        {"wall": (210, 225, 232), "rim": (50, 60, 70), "face": (250, 250, 250), "hand": (20, 20, 24)},
    )),
    Subject("fork", "fork", "Functional", "tine", "tines", 4, (3, 5, 2, 6), fork, (
        {"table": (150, 110, 80), "napkin": (230, 70, 70), "metal": (200, 204, 210)},
        {"table": (200, 180, 150), "napkin": (70, 120, 190), "metal": (196, 200, 206)},
    )),
    Subject("traffic_light", "traffic light", "Functional", "light", "lights", 3, (2, 4, 5), traffic_light, (
        {"sky": (200, 225, 245), "housing": (45, 48, 52), "pole": (90, 95, 100)},
        {"sky": (240, 230, 210), "housing": (230, 180, 30), "pole": (80, 80, 85)},
    )),
    Subject("table", "table", "Housing", "leg", "legs", 4, (3, 5, 6, 2), table, (
        {"wall": (236, 228, 214), "floor": (196, 170, 140), "wood": (170, 110, 60)},
        {"wall": (220, 232, 236), "floor": (170, 170, 178), "wood": (200, 150, 90)},
    )),
    Subject("stool", "stool", "Housing", "leg", "legs", 3, (2, 4, 5), stool, (
        {"wall": (230, 236, 240), "floor": (200, 180, 150), "wood": (160, 105, 60), "seat": (200, 70, 60)},
        {"wall": (240, 232, 220), "floor": (180, 170, 160), "wood": (120, 80, 50), "seat": (70, 130, 170)},
    )),
    Subject("flower", "flower", "Housing", "petal", "petals", 5, (4, 6, 7, 3), flower, (
        {"wall": (225, 238, 245), "table": (200, 170, 130), "pot": (200, 100, 60), "petal": (240, 110, 150), "centre": (250, 200, 50)},
        {"wall": (245, 238, 225), "table": (170, 150, 120), "pot": (90, 120, 170), "petal": (250, 250, 245), "centre": (245, 190, 40)},
        {"wall": (232, 240, 228), "table": (190, 160, 120), "pot": (170, 80, 60), "petal": (150, 110, 220), "centre": (250, 210, 70)},
    )),
    Subject("car", "car", "Transportation", "wheel", "wheels", 4, (3, 5, 6, 2), car, (
        {"road": (110, 112, 118), "body": (210, 45, 45), "glass": (160, 200, 230)},
        {"road": (100, 104, 110), "body": (40, 110, 200), "glass": (170, 210, 235)},
        {"road": (115, 115, 118), "body": (245, 200, 40), "glass": (150, 195, 225)},
    )),
    Subject("bicycle", "bicycle", "Transportation", "wheel", "wheels", 2, (1, 3), bicycle, (
        {"sky": (215, 235, 248), "ground": (190, 200, 170), "frame": (40, 110, 200)},
        {"sky": (245, 235, 220), "ground": (200, 195, 175), "frame": (210, 50, 50)},
    )),
    Subject("pyramids", "Giza pyramid complex", "Landmark", "pyramid", "pyramids", 3, (2, 4, 5), pyramids, (
        {"sky": (150, 200, 240), "sand": (232, 200, 140), "lit": (236, 200, 130), "shade": (190, 150, 90)},
        {"sky": (245, 190, 140), "sand": (220, 170, 110), "lit": (230, 185, 120), "shade": (170, 120, 75)},
    )),
    Subject("olympic_rings", "Olympic logo", "Logo", "ring", "rings", 5, (4, 6, 3), olympic_rings, (
        {"sky": (252, 252, 252)},
        {"sky": (236, 240, 245)},
    )),
    Subject("star", "star", "Symbol", "point", "points", 5, (4, 6, 7, 3), star_symbol, (
        {"sky": (30, 50, 110), "star": (250, 205, 50)},
        {"sky": (220, 232, 245), "star": (235, 60, 60)},
    )),
    Subject("french_flag", "French flag", "Flag", "stripe", "stripes", 3, (2, 4, 5), french_flag, (
        {"sky": (180, 215, 245), "pole": (150, 150, 156)},
        {"sky": (200, 225, 240), "pole": (140, 110, 80)},
    )),
    Subject("japanese_flag", "Japanese flag", "Flag", "circle", "circles", 1, (2, 3, 0), japanese_flag, (
        {"sky": (180, 215, 245), "pole": (150, 150, 156)},
        {"sky": (200, 225, 240), "pole": (140, 110, 80)},
    )),
    Subject("fried_egg", "fried egg", "Food", "yolk", "yolks", 1, (2, 3, 0), fried_egg, (
        {"table": (120, 160, 190), "yolk": (250, 180, 30)},
        {"table": (200, 150, 110), "yolk": (245, 160, 20)},
    )),
    Subject("pizza", "pizza", "Food", "slice", "slices", 8, (6, 7, 9, 10), pizza, (
        {"table": (235, 230, 220), "crust": (225, 170, 90), "cheese": (250, 215, 110)},
        {"table": (120, 90, 70), "crust": (215, 160, 85), "cheese": (252, 225, 130)},
    )),
    Subject("snowman", "snowman", "Fictional Characters", "arm", "arms", 2, (1, 3, 4), snowman, (
        {"sky": (190, 215, 240), "scarf": (210, 40, 50)},
        {"sky": (170, 190, 225), "scarf": (40, 140, 80)},
    )),
)
