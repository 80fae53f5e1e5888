"""Blender's Bezier F-curve with auto-clamped handles, in numpy (renderer-independent).

The camera orientation of every video is keyframed at frames 1, 50, 100, 150, 200 with Bezier
interpolation and auto-clamped handles (*CountVideoBench*, Table 3). The ground truth
(visibility statistics) must follow the same curve the Blender renderer animates, so this module
transcribes Blender's handle rule (``calchandleNurb_intern`` in ``curve.cc``, F-curve branch,
auto-smoothing "None") and its evaluation (solve the cubic in x for the frame, then y). The
Blender renderer sets each camera F-curve's ``auto_smoothing`` to ``NONE`` so both follow this
rule; Blender's default for new curves ("Continuous Acceleration") would move the orientation
by up to about 0.4 deg between keys (measured on Blender 5.0.1):

- handle direction ``t = (p - prev)/dx_a + (next - p)/dx_b``, handle x-lengths
  ``dx_a * t_x / (2.5614 t_x)`` (about 0.39 of the key interval);
- auto-clamped: a key that is a local extremum gets flat handles, otherwise a handle may not
  pass the neighbouring key's value (the opposite handle is re-aligned);
- first and last keys get flat handles (constant extrapolation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_AUTO_LEN = 2.5614  # Blender's constant for auto handle length (smoothing "None")


@dataclass(frozen=True)
class BezierCurve:
    """A 1-D F-curve: keys ``(x, y)`` with left/right handles, evaluated at any x."""

    x: np.ndarray
    y: np.ndarray
    left: np.ndarray
    """(k, 2) left handle points."""
    right: np.ndarray
    """(k, 2) right handle points."""

    def __call__(self, t: np.ndarray | float) -> np.ndarray:
        """The curve's value at frames ``t`` (constant extrapolation outside the keys)."""
        t = np.atleast_1d(np.asarray(t, dtype=float))
        out = np.empty_like(t)
        lo, hi = t <= self.x[0], t >= self.x[-1]
        out[lo], out[hi] = self.y[0], self.y[-1]
        mid = ~(lo | hi)
        if mid.any():
            tm = t[mid]
            seg = np.clip(np.searchsorted(self.x, tm, side="right") - 1, 0, len(self.x) - 2)
            p0 = np.stack([self.x[seg], self.y[seg]], -1)
            p1 = self.right[seg]
            p2 = self.left[seg + 1]
            p3 = np.stack([self.x[seg + 1], self.y[seg + 1]], -1)
            u = _solve_x(tm, p0[:, 0], p1[:, 0], p2[:, 0], p3[:, 0])
            out[mid] = _bez(u, p0[:, 1], p1[:, 1], p2[:, 1], p3[:, 1])
        return out


def auto_clamped(x: np.ndarray | list[float], y: np.ndarray | list[float]) -> BezierCurve:
    """The curve Blender builds from keys ``(x, y)`` with AUTO_CLAMPED handles."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    k = len(x)
    if k < 2 or np.any(np.diff(x) <= 0):
        raise ValueError("need at least two keys with increasing x")
    left = np.stack([x, y], -1).copy()
    right = left.copy()
    for i in range(k):
        p2 = np.array([x[i], y[i]])
        has_prev, has_next = i > 0, i < k - 1
        p3 = np.array([x[i + 1], y[i + 1]]) if has_next else None
        p1 = np.array([x[i - 1], y[i - 1]]) if has_prev else None
        if p1 is None:
            p1 = 2 * p2 - p3  # mirrored neighbour, as Blender does at the ends
        if p3 is None:
            p3 = 2 * p2 - p1
        da, db = p2 - p1, p3 - p2
        len_a, len_b = da[0], db[0]  # F-curves measure handle length along x only
        tvec = db / len_b + da / len_a
        length = tvec[0] * _AUTO_LEN
        len_a, len_b = min(len_a, 5 * len_b), min(len_b, 5 * len_a)
        h1 = p2 - tvec * (len_a / length)
        h2 = p2 + tvec * (len_b / length)
        if not (has_prev and has_next):
            h1[1] = h2[1] = p2[1]  # ease in/out at the ends (constant extrapolation)
        else:
            yd1, yd2 = p1[1] - p2[1], p3[1] - p2[1]
            if (yd1 <= 0 and yd2 <= 0) or (yd1 >= 0 and yd2 >= 0):
                h1[1] = h2[1] = p2[1]  # local extremum: flat
            else:
                left_violate = (yd1 <= 0 and p1[1] > h1[1]) or (yd1 > 0 and p1[1] < h1[1])
                if left_violate:
                    h1[1] = p1[1]
                right_violate = (yd1 <= 0 and p3[1] < h2[1]) or (yd1 > 0 and p3[1] > h2[1])
                if right_violate:
                    h2[1] = p3[1]
                hx1, hx2 = h1[0] - p2[0], p2[0] - h2[0]
                if left_violate:
                    h2[1] = p2[1] + ((p2[1] - h1[1]) / hx1) * hx2
                elif right_violate:
                    h1[1] = p2[1] + ((p2[1] - h2[1]) / hx2) * hx1
        left[i], right[i] = h1, h2
    return BezierCurve(x, y, left, right)


def _bez(u: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> np.ndarray:
    v = 1.0 - u
    return v * v * v * a + 3 * v * v * u * b + 3 * v * u * u * c + u * u * u * d


def _solve_x(
    t: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray
) -> np.ndarray:
    """Parameter u in [0, 1] with x(u) = t; x is monotone here (handles inside the interval)."""
    lo, hi = np.zeros_like(t), np.ones_like(t)
    for _ in range(60):  # bisection to ~1e-18: exact enough, and identical on every machine
        m = 0.5 * (lo + hi)
        below = _bez(m, a, b, c, d) < t
        lo = np.where(below, m, lo)
        hi = np.where(below, hi, m)
    return 0.5 * (lo + hi)
