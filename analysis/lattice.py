"""Lattice controls (*Give the Model a Finger*, Appendix F, Table 23).

On regular and lattice arrays every dot sits near an ideal cell centre (stimulus meta
``cells``, one per object, jittered by up to +-15 % of the cell). A model could count rows and
columns and emit an evenly spaced grid, which would score as on-target without any dot being
looked at. For every on-target tag (final matching, audit tau) of object j, in the tag frame:

- ``dot offset`` = dot_j - cell_j and ``tag offset`` = tag - cell_j (2-D, pixels);
- ``offset_slope``: least-squares slope of tag offset on dot offset, x and y components pooled
  with one intercept per axis; ~1 when tags follow the dots, ~0 when tags sit on the ideal
  grid; ``offset_r`` is the matching (per-axis centred) correlation;
- ``median_dot_distance`` / ``median_cell_distance``: median |tag - dot_j| and |tag - cell_j|;
  ``cell_over_dot_ratio`` = their quotient (how many times closer to the dot than to the cell
  centre; > 1 means tags are placed on dots), ``share_closer_to_dot`` = share of tags with
  |tag - dot_j| < |tag - cell_j|.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from countgym.logs import EpisodeRecord
from countgym.matching import match_tags

from .stimuli import StimulusCache

LATTICE_COLUMNS: tuple[str, ...] = (
    "dataset", "model", "arm", "arrangement", "n_trajectories", "n_tags", "offset_slope",
    "offset_r", "median_dot_distance", "median_cell_distance", "cell_over_dot_ratio",
    "share_closer_to_dot",
)  # fmt: skip


def offset_stats(tags: np.ndarray, dots: np.ndarray, cells: np.ndarray) -> dict[str, float]:
    """Lattice statistics of matched (tag, dot, cell) triples, arrays of shape (k, 2)."""
    t, d, c = (np.asarray(a, dtype=float).reshape(-1, 2) for a in (tags, dots, cells))
    if not (len(t) == len(d) == len(c)):
        raise ValueError(f"tags, dots and cells must match in length, got {len(t)}, {len(d)}, {len(c)}")
    nan = float("nan")
    if len(t) == 0:
        return dict.fromkeys(
            ("offset_slope", "offset_r", "median_dot_distance", "median_cell_distance",
             "cell_over_dot_ratio", "share_closer_to_dot"), nan)  # fmt: skip
    x, y = d - c, t - c
    # One slope for both axes, one intercept per axis (a constant shift of the tags, e.g. a
    # pointing bias to the right, is not a failure to follow the dots).
    xc, yc = x - x.mean(axis=0), y - y.mean(axis=0)
    sxx, syy = float((xc**2).sum()), float((yc**2).sum())
    slope = float((xc * yc).sum() / sxx) if sxx > 0 else nan
    r = float((xc * yc).sum() / np.sqrt(sxx * syy)) if sxx > 0 and syy > 0 else nan
    dd = np.hypot(*(t - d).T)
    dc = np.hypot(*(t - c).T)
    md, mc = float(np.median(dd)), float(np.median(dc))
    return {
        "offset_slope": slope,
        "offset_r": r,
        "median_dot_distance": md,
        "median_cell_distance": mc,
        "cell_over_dot_ratio": mc / md if md > 0 else nan,
        "share_closer_to_dot": float((dd < dc).mean()),
    }


def lattice_table(
    records: Sequence[EpisodeRecord], episodes: pd.DataFrame, stimuli: StimulusCache
) -> pd.DataFrame:
    """Tag offsets vs dot offsets from the ideal cells per (dataset, model, arm, arrangement)."""
    info = episodes.set_index("episode_id")[["dataset", "model", "arm"]]
    groups: dict[tuple, list[np.ndarray]] = {}
    n_traj: dict[tuple, int] = {}
    for rec in records:
        if not rec.tags or rec.episode_id not in info.index:
            continue
        cells = stimuli.cells(rec)
        if cells is None:
            continue
        gt = stimuli.truth_points(rec)
        if gt is None:
            continue
        pts, tau = gt
        m = match_tags(rec.tags, pts, tau=tau)
        obj = np.asarray(m.tag_object)
        on = obj >= 0
        stim = stimuli.stimulus(rec)
        arrangement = str(stim.meta.get("arrangement", "")) if stim is not None else ""
        ds, model, arm = info.loc[rec.episode_id]
        key = (ds, model, arm, arrangement)
        tags = np.asarray(rec.tags, dtype=float)[on]
        groups.setdefault(key, []).append(np.hstack([tags, pts[obj[on]], cells[obj[on]]]))
        n_traj[key] = n_traj.get(key, 0) + 1
    rows = []
    for key in sorted(groups, key=str):
        arr = np.vstack(groups[key]) if groups[key] else np.zeros((0, 6))
        stats = offset_stats(arr[:, 0:2], arr[:, 2:4], arr[:, 4:6])
        rows.append({"dataset": key[0], "model": key[1], "arm": key[2], "arrangement": key[3],
                     "n_trajectories": n_traj[key], "n_tags": len(arr), **stats})  # fmt: skip
    return pd.DataFrame(rows, columns=list(LATTICE_COLUMNS))
