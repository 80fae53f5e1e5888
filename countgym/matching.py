"""Point-level matching of tags to ground-truth objects (Give the Model a Finger, Section 4, Appendix E).

Shared by the environment (perturbation probe, ``audit`` reward) and by ``countgym.analysis``,
so that both score tags identically.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np


@cache
def _solver() -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """SciPy's ``linear_sum_assignment``, loaded from its compiled module alone when it is one.

    ``from scipy.optimize import linear_sum_assignment`` imports the whole of
    ``scipy.optimize`` (about 0.4 s of CPU, a tenth of an audit); the solver is a function of
    the small compiled module ``scipy.optimize._lsap``, which loads in a millisecond. Where that
    module is not a compiled extension (another SciPy layout), the public import is used."""
    try:
        spec = importlib.util.find_spec("scipy")
        roots = list(spec.submodule_search_locations or []) if spec else []
        for root in roots:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = Path(root) / "optimize" / f"_lsap{suffix}"
                if not path.is_file():
                    continue
                name = "scipy.optimize._lsap"
                loader = importlib.machinery.ExtensionFileLoader(name, str(path))
                mod_spec = importlib.util.spec_from_file_location(name, path, loader=loader)
                if mod_spec is None:
                    continue
                module = importlib.util.module_from_spec(mod_spec)
                loader.exec_module(module)
                fn = getattr(module, "linear_sum_assignment", None)
                if callable(fn):
                    return fn
    except (ImportError, OSError, AttributeError):
        pass
    from scipy.optimize import linear_sum_assignment

    return linear_sum_assignment


TAU_FLOOR_PX = 15.0
_FORBIDDEN = 1e12


DENSE_MAX_POINTS = 1024
"""Up to this many points, nearest neighbours come from the full distance matrix (faster than a
k-d tree for the tens of objects of a counting image, and the same distances)."""


def median_of(values: Sequence[float]) -> float:
    """Median of a non-empty sequence, equal to ``float(np.median(values))`` (the mean of the two
    middle values for an even count), without numpy's per-call overhead."""
    s = sorted(values)
    k = len(s) // 2
    return float(s[k]) if len(s) % 2 else (float(s[k - 1]) + float(s[k])) / 2.0


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``a`` (n x 2) and ``b`` (m x 2), n x m: the
    square root of dx * dx + dy * dy, in that order (the same floats as a k-d tree's)."""
    dx = a[:, 0, None] - b[None, :, 0]
    dy = a[:, 1, None] - b[None, :, 1]
    dx *= dx
    dy *= dy
    dx += dy
    return np.sqrt(dx, out=dx)


def tau_for(points: np.ndarray | list, *, scale: float = 1.0, floor: float = TAU_FLOOR_PX) -> float:
    """Per-image threshold: half the median nearest-neighbour distance among the ground-truth
    points, floored at ``floor`` px, times ``scale`` (tau-sensitivity uses 0.75 and 1.5).

    With fewer than two points there is no nearest neighbour; the floor is used.
    """
    pts = np.asarray(points, dtype=float).reshape(-1, 2)
    if len(pts) < 2:
        return floor * scale
    if len(pts) <= DENSE_MAX_POINTS:
        d = _distances(pts, pts)
        np.fill_diagonal(d, np.inf)
        nearest = d.min(1).tolist()
    else:
        from scipy.spatial import cKDTree  # only for images of over DENSE_MAX_POINTS objects

        nearest = cKDTree(pts).query(pts, k=2)[0][:, 1].tolist()
    return max(floor, 0.5 * median_of(nearest)) * scale


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


def _assign(
    d: np.ndarray, tau: float, *, split: bool, pairs: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(matched object per tag or -1, number of objects within tau of each tag).

    Minimum-cost one-to-one assignment with pairs farther than tau forbidden: the tags and
    objects with an allowed pair go to ``linear_sum_assignment``, where forbidden pairs get a
    cost so large that the solver first maximises the number of allowed matches, then minimises
    their cost.

    With ``split``, a tag whose only allowed object allows no other tag is matched to it
    directly first (such a pair is its own component of the allowed-pairs graph, so every
    optimal assignment holds it) and only the rest goes to the solver: the same counts, faster,
    but where two assignments tie in cost the solver may pick the other one, so which tag is
    on-target and which a duplicate can differ. Without it the solver sees exactly the matrix
    it always saw. ``pairs``: ``np.nonzero(d <= tau)`` when already known.
    """
    n_t, n_p = d.shape
    tag_obj = np.full(n_t, -1)
    ri, ci = np.nonzero(d <= tau) if pairs is None else pairs
    row_deg = np.bincount(ri, minlength=n_t)
    if not len(ri):
        return tag_obj, row_deg
    col_deg = np.bincount(ci, minlength=n_p)
    if split:
        alone = (row_deg[ri] == 1) & (col_deg[ci] == 1)
        tag_obj[ri[alone]] = ci[alone]
        if alone.all():
            return tag_obj, row_deg
        shared = ~alone
        in_rows = np.zeros(n_t, dtype=bool)
        in_rows[ri[shared]] = True
        in_cols = np.zeros(n_p, dtype=bool)
        in_cols[ci[shared]] = True
        rows = in_rows.nonzero()[0]
        cols = in_cols.nonzero()[0]
    else:
        rows = (row_deg > 0).nonzero()[0]
        cols = (col_deg > 0).nonzero()[0]
    sub_d = d[rows[:, None], cols]
    sub = np.where(sub_d <= tau, sub_d, _FORBIDDEN)
    r, c = _solver()(sub)
    ok = sub[r, c] < _FORBIDDEN
    tag_obj[rows[r[ok]]] = cols[c[ok]]
    return tag_obj, row_deg


SMALL_SHARED_EDGES = 256
"""Up to this many allowed pairs outside the lone pairs, ``_matched_count`` finds the maximum
matching in Python (far faster than a solver call for the few duplicates of an image);
above it, the solver."""


def _max_matching(rows: list[int], cols: list[int]) -> int:
    """Size of a maximum matching of the bipartite graph with edges ``rows[k] - cols[k]``
    (Kuhn's augmenting paths; the recursion is at most as deep as there are rows)."""
    adj: dict[int, list[int]] = {}
    for r, c in zip(rows, cols, strict=True):
        adj.setdefault(r, []).append(c)
    owner: dict[int, int] = {}
    # A greedy start, then one augmenting-path search per row it left unmatched (a row with
    # no augmenting path now never gets one later: Kuhn's argument holds from any matching).
    left = []
    for r, cs in adj.items():
        for c in cs:
            if c not in owner:
                owner[c] = r
                break
        else:
            left.append(r)
    return len(adj) - len(left) + sum(_augment(r, adj, owner, set()) for r in left)


def _augment(r: int, adj: dict[int, list[int]], owner: dict[int, int], seen: set[int]) -> bool:
    """Whether an augmenting path starts at row ``r`` (``owner`` updated along it). A function
    of its own, not a closure over ``adj`` and ``owner``: a recursive closure is a reference
    cycle that keeps each call's graph alive until the garbage collector runs."""
    for c in adj[r]:
        if c not in seen:
            seen.add(c)
            if c not in owner or _augment(owner[c], adj, owner, seen):
                owner[c] = r
                return True
    return False


def _matched_count(
    d: np.ndarray, tau: float, pairs: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[int, int]:
    """(on-target tags, tags within tau of some object) of ``match_tags`` at ``tau``.

    The solver's forbidden cost makes it match as many allowed pairs as possible, so the
    on-target count is the size of a maximum matching of the allowed pairs: the lone pairs
    (a tag and an object allowed only to each other) plus a maximum matching of the rest.
    ``pairs``: ``np.nonzero(d <= tau)`` when already known.
    """
    n_t, n_p = d.shape
    ri, ci = np.nonzero(d <= tau) if pairs is None else pairs
    if not len(ri):
        return 0, 0
    row_deg = np.bincount(ri, minlength=n_t)
    col_deg = np.bincount(ci, minlength=n_p)
    near = int(np.count_nonzero(row_deg))
    alone = (row_deg[ri] == 1) & (col_deg[ci] == 1)
    n_alone = int(np.count_nonzero(alone))
    if n_alone == len(ri):
        return n_alone, near
    shared = ~alone
    if len(ri) - n_alone > SMALL_SHARED_EDGES:
        tag_obj, _ = _assign(d, tau, split=True, pairs=(ri, ci))
        return int(np.count_nonzero(tag_obj >= 0)), near
    return n_alone + _max_matching(ri[shared].tolist(), ci[shared].tolist()), near


def match_tags(
    tags: np.ndarray | Sequence[Sequence[float]], points: np.ndarray | Sequence[Sequence[float]], *,
    tau: float | None = None, tau_scale: float = 1.0,
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
    d = _distances(t, p)
    tag_obj, row_deg = _assign(d, tau, split=False)
    near_any = row_deg > 0
    on = tag_obj >= 0
    label = np.where(on, "on_target", np.where(near_any, "duplicate", "phantom")).tolist()
    matched = np.zeros(n_p, dtype=bool)
    matched[tag_obj[on]] = True
    omitted = tuple(np.flatnonzero(~matched).tolist())
    dists = tuple(d[np.flatnonzero(on), tag_obj[on]].tolist())
    obj = tag_obj.tolist()
    return Match(float(tau), tuple(label), tuple(obj), omitted, dists)


@dataclass(frozen=True)
class MatchCounts:
    """The counts of one matching (what the audit tables need) and its on-target distances."""

    on_target: int
    duplicate: int
    phantom: int
    omission: int
    distances: tuple[float, ...]


def match_counts(
    tags: np.ndarray | list, points: np.ndarray | list, taus: Sequence[float]
) -> list[MatchCounts]:
    """``match_tags`` counts at several thresholds over one distance matrix (the audit's tau and
    its sensitivity scales).

    Entry 0 is ``match_tags(tags, points, tau=taus[0])`` exactly (its on-target distances in
    tag order); the other entries have the same counts as ``match_tags`` at their tau, found as
    the size of a maximum matching of the allowed pairs (``_matched_count``), and no distances.
    """
    t = np.asarray(tags, dtype=float).reshape(-1, 2)
    p = np.asarray(points, dtype=float).reshape(-1, 2)
    n_t, n_p = len(t), len(p)
    if n_t == 0 or n_p == 0:
        return [MatchCounts(0, 0, n_t, n_p, ()) for _ in taus]
    d = _distances(t, p)
    # The allowed pairs at the largest tau, once; those at a smaller tau are a subset, in the
    # same (row-major) order as ``np.nonzero(d <= tau)`` gives them.
    none = np.empty(0, dtype=np.intp)
    all_ri, all_ci = np.nonzero(d <= max(taus)) if taus else (none, none)
    all_d = d[all_ri, all_ci]
    out = []
    for i, tau in enumerate(taus):
        keep = all_d <= tau
        pairs = (all_ri[keep], all_ci[keep])
        if i == 0:
            tag_obj, row_deg = _assign(d, tau, split=False, pairs=pairs)
            on_idx = (tag_obj >= 0).nonzero()[0]
            on = len(on_idx)
            near = int(np.count_nonzero(row_deg))
            dists = tuple(d[on_idx, tag_obj[on_idx]].tolist())
        else:
            on, near = _matched_count(d, tau, pairs)
            dists = ()
        out.append(MatchCounts(on, near - on, n_t - near, n_p - on, dists))
    return out
