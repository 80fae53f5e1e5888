"""Counting metrics (analysis spec section 1): exact match, errors, Acc@10%, MAE, RMSE, coverage.

Conventions follow scikit-learn: truth first, prediction second, options keyword-only, names
that say their direction (``*_score`` higher is better, ``*_error`` lower is better).
A prediction is *unanswered* when it is ``None`` or NaN (no announced count, or an unparseable
reply); unanswered items are wrong for exact match and Acc@10%, and are left out of MAE, RMSE
and the signed error, which are computed over answered items only. Coverage is the share
answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ArrayLike = Sequence[float | int | None] | np.ndarray


# --- validation ---------------------------------------------------------------------------------


def _check_truth(y_true: ArrayLike, *, name: str = "y_true") -> np.ndarray:
    """Truth as a 1-D int64 array of non-negative counts."""
    y = np.asarray(y_true, dtype=object if _has_none(y_true) else None)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {y.shape}")
    try:
        yf = y.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold numbers, got {y[:5].tolist()!r}") from None
    bad = ~np.isfinite(yf) | (yf < 0) | (yf != np.round(yf))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name} must hold non-negative integer counts; {name}[{i}] = {y.tolist()[i]!r}"
        )
    return yf.astype(np.int64)


def _check_prediction(y_pred: ArrayLike, n: int, *, name: str = "y_pred") -> np.ndarray:
    """Prediction as a 1-D float array, NaN where unanswered (None or NaN)."""
    if _has_none(y_pred):
        y_pred = [np.nan if v is None else v for v in y_pred]
    try:
        p = np.asarray(y_pred, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold numbers or None, got {list(y_pred)[:5]!r}") from None
    if p.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {p.shape}")
    if len(p) != n:
        raise ValueError(f"{name} has {len(p)} items but y_true has {n}")
    if np.isinf(p).any():
        i = int(np.flatnonzero(np.isinf(p))[0])
        raise ValueError(f"{name} must be finite or None; {name}[{i}] = {p.tolist()[i]!r}")
    return p


def _has_none(values: ArrayLike) -> bool:
    return not isinstance(values, np.ndarray) and any(v is None for v in values)


def _check_counts(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Validated (truth int64, prediction float with NaN = unanswered)."""
    y = _check_truth(y_true)
    return y, _check_prediction(y_pred, len(y))


# --- per-item metrics ---------------------------------------------------------------------------


def answered(y_pred: ArrayLike) -> np.ndarray:
    """Per item: True where a count was announced (not None/NaN)."""
    return ~np.isnan(_check_prediction(y_pred, len(y_pred)))


def tolerance_10(y_true: ArrayLike) -> np.ndarray:
    """Acc@10% tolerance tau(y) = floor(0.1 y), computed in integers (no float rounding)."""
    return _check_truth(y_true) // 10


def exact_match(y_true: ArrayLike, y_pred: ArrayLike) -> np.ndarray:
    """Per item: prediction equals the truth; unanswered is wrong."""
    y, p = _check_counts(y_true, y_pred)
    return p == y  # NaN compares unequal


def within_10(y_true: ArrayLike, y_pred: ArrayLike) -> np.ndarray:
    """Per item: |prediction - truth| <= floor(0.1 truth); unanswered is wrong."""
    y, p = _check_counts(y_true, y_pred)
    with np.errstate(invalid="ignore"):
        return np.abs(p - y) <= y // 10


def absolute_error(y_true: ArrayLike, y_pred: ArrayLike) -> np.ndarray:
    """Per item: |prediction - truth|, NaN where unanswered."""
    y, p = _check_counts(y_true, y_pred)
    return np.abs(p - y)


def signed_error(y_true: ArrayLike, y_pred: ArrayLike) -> np.ndarray:
    """Per item: prediction - truth (positive = overcount), NaN where unanswered."""
    y, p = _check_counts(y_true, y_pred)
    return p - y


# --- aggregate metrics --------------------------------------------------------------------------


def _mean_or_nan(x: np.ndarray) -> float:
    return float(x.mean()) if len(x) else float("nan")


def exact_match_score(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Exact-match accuracy (EM) over all items; unanswered counts as wrong."""
    return _mean_or_nan(exact_match(y_true, y_pred))


def acc10_score(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Acc@10%: share of items with |prediction - truth| <= floor(0.1 truth)."""
    return _mean_or_nan(within_10(y_true, y_pred))


def coverage_score(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Share of items with an announced count."""
    _, p = _check_counts(y_true, y_pred)
    return _mean_or_nan(~np.isnan(p))


def mean_absolute_error(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """MAE over answered items (NaN when none is answered)."""
    e = absolute_error(y_true, y_pred)
    return _mean_or_nan(e[~np.isnan(e)])


def root_mean_squared_error(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """RMSE over answered items (NaN when none is answered)."""
    e = signed_error(y_true, y_pred)
    e = e[~np.isnan(e)]
    return float(np.sqrt((e**2).mean())) if len(e) else float("nan")


def mean_signed_error(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Mean of prediction - truth over answered items (positive = overcounting)."""
    e = signed_error(y_true, y_pred)
    return _mean_or_nan(e[~np.isnan(e)])


@dataclass(frozen=True)
class CountingScores:
    """All counting metrics of one set of items."""

    n_items: int
    n_answered: int
    exact_match: float
    acc10: float
    mae: float
    rmse: float
    mean_signed_error: float
    coverage: float


def counting_scores(y_true: ArrayLike, y_pred: ArrayLike) -> CountingScores:
    """EM, Acc@10%, MAE, RMSE, mean signed error and coverage in one pass."""
    y, p = _check_counts(y_true, y_pred)
    ok = ~np.isnan(p)
    err = p[ok] - y[ok]
    with np.errstate(invalid="ignore"):
        within = np.abs(p - y) <= y // 10
    return CountingScores(
        n_items=len(y),
        n_answered=int(ok.sum()),
        exact_match=_mean_or_nan(p == y),
        acc10=_mean_or_nan(within),
        mae=_mean_or_nan(np.abs(err)),
        rmse=float(np.sqrt((err**2).mean())) if len(err) else float("nan"),
        mean_signed_error=_mean_or_nan(err),
        coverage=_mean_or_nan(ok),
    )
