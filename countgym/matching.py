"""Point-level matching of tags to ground-truth objects (Give the Model a Finger, Section 4, Appendix E).

Shared by the environment (perturbation probe, ``audit`` reward) and by ``countgym.analysis``,
so that both score tags identically.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial import cKDTree

TAU_FLOOR_PX = 15.0
_FORBIDDEN = 1e12


def tau_for(points: np.ndarray, *, scale: float = 1.0, floor: float = TAU_FLOOR_PX) -> float:
    """Per-image threshold: half the median nearest-neighbour distance among the ground-truth
    points, floored at ``floor`` px, times ``scale`` (tau-sensitivity uses 0.75 and 1.5).

    With fewer than two points there is no nearest neighbour; the floor is used.
    """
    pts = np.asarray(points, dtype=float).reshape(-1, 2)
    if len(pts) < 2:
        return floor * scale
    d, _ = cKDTree(pts).query(pts, k=2)
    return max(floor, 0.5 * float(np.median(d[:, 1]))) * scale


@dataclass(frozen=True)
class Match:
    """Result of matching tags to objects in one image.

    ``tag_label[i]`` is ``"on_target"``, ``"duplicate"`` or ``"phantom"`` for tag i;
    ``tag_object[i]`` is the matched object index or -1; ``omitted`` lists unmatched objects;
    ``distances`` holds the on-target tag-object distances in pixels.
    """

    tau: float
    tag_label: tuple[str, ...]
    tag_object: tuple[int, ...]
    omitted: tuple[int, ...]
    distances: tuple[float, ...]

    @property
    def on_target(self) -> int:
        return self.tag_label.count("on_target")

    @property
    def duplicate(self) -> int:
        return self.tag_label.count("duplicate")

    @property
    def phantom(self) -> int:
        return self.tag_label.count("phantom")

    @property
    def omission(self) -> int:
        return len(self.omitted)


def match_tags(
    tags: np.ndarray | list, points: np.ndarray | list, *, tau: float | None = None, tau_scale: float = 1.0
) -> Match:
    """Minimum-cost one-to-one assignment of tags to objects, pairs farther than tau forbidden.

    Matched tag = on-target; unmatched tag within tau of an object = duplicate; unmatched tag
    farther than tau from every object = phantom; unmatched object = omission.
    """
    t = np.asarray(tags, dtype=float).reshape(-1, 2)
    p = np.asarray(points, dtype=float).reshape(-1, 2)
    if tau is None:
        tau = tau_for(p, scale=tau_scale)
    n_t, n_p = len(t), len(p)
    if n_t == 0 or n_p == 0:
        return Match(float(tau), ("phantom",) * n_t, (-1,) * n_t, tuple(range(n_p)), ())
    d = np.sqrt(((t[:, None, :] - p[None, :, :]) ** 2).sum(-1))
    allowed = d <= tau
    tag_obj = np.full(n_t, -1)
    near_any = allowed.any(1)
    if near_any.any():
        # Only rows/cols with at least one allowed pair take part; forbidden pairs get a cost so
        # large that the solver first maximises the number of allowed matches, then their cost.
        rows = np.flatnonzero(near_any)
        cols = np.flatnonzero(allowed.any(0))
        sub = np.where(allowed[np.ix_(rows, cols)], d[np.ix_(rows, cols)], _FORBIDDEN)
        r, c = linear_sum_assignment(sub)
        ok = sub[r, c] < _FORBIDDEN
        tag_obj[rows[r[ok]]] = cols[c[ok]]
    on = tag_obj >= 0
    label = np.where(on, "on_target", np.where(near_any, "duplicate", "phantom")).tolist()
    matched = np.zeros(n_p, dtype=bool)
    matched[tag_obj[on]] = True
    omitted = tuple(np.flatnonzero(~matched).tolist())
    dists = tuple(d[np.flatnonzero(on), tag_obj[on]].tolist())
    obj = tag_obj.tolist()
    return Match(float(tau), tuple(label), tuple(obj), omitted, dists)
