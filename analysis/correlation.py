"""Rank correlations used by the principle tests (Kendall tau-b, Spearman rho).

Small, dependency-light versions whose results equal ``scipy.stats.kendalltau`` (tau-b,
ties corrected) and ``scipy.stats.spearmanr`` (average ranks); the tests check both against
SciPy. Undefined correlations (fewer than two items, or a constant input) are NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _check_pair(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"x and y must be 1-D of one length, got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("x and y must be finite (drop missing pairs first)")
    return a, b


def kendall_tau_b(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Kendall's tau-b: (concordant - discordant) / sqrt((n0 - ties_x) (n0 - ties_y))."""
    a, b = _check_pair(x, y)
    if len(a) < 2:
        return float("nan")
    iu = np.triu_indices(len(a), k=1)
    sx = np.sign(a[:, None] - a[None, :])[iu]
    sy = np.sign(b[:, None] - b[None, :])[iu]
    denom = np.sqrt(float(np.count_nonzero(sx)) * float(np.count_nonzero(sy)))
    return float((sx * sy).sum() / denom) if denom > 0 else float("nan")


def spearman_rho(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rho: the Pearson correlation of the average ranks."""
    a, b = _check_pair(x, y)
    if len(a) < 2:
        return float("nan")
    from scipy.stats import rankdata  # imported when needed: scipy.stats takes 0.2 s to import

    ra = rankdata(a) - (len(a) + 1) / 2.0
    rb = rankdata(b) - (len(b) + 1) / 2.0
    denom = np.sqrt((ra**2).sum() * (rb**2).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else float("nan")
