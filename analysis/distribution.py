"""Prediction-distribution statistics (*CountVideoBench*, Section 5.2; analysis spec section 5).

- Support size ``|S|``: the number of distinct announced counts.
- Prediction perplexity ``PP = 2^H`` with ``H = -sum_c p_c log2 p_c`` over the categories of
  the predictions: every distinct announced count, plus one extra category for all
  non-answers (not counted in ``|S|``). PP is the effective number of distinct predictions:
  1 when every prediction is the same, ``|S|`` for a uniform spread over ``|S|`` values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _check_predictions(y_pred: Sequence[float | int | None] | np.ndarray) -> np.ndarray:
    """Predictions as floats, NaN = no answer."""
    vals = [np.nan if v is None else v for v in y_pred]
    try:
        p = np.asarray(vals, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"y_pred must hold numbers or None, got {list(y_pred)[:5]!r}") from None
    if p.ndim != 1:
        raise ValueError(f"y_pred must be 1-D, got shape {p.shape}")
    if np.isinf(p).any():
        raise ValueError("y_pred must be finite or None")
    return p


def support_size(y_pred: Sequence[float | int | None] | np.ndarray) -> int:
    """Number of distinct announced counts (non-answers excluded)."""
    p = _check_predictions(y_pred)
    return int(len(np.unique(p[~np.isnan(p)])))


def prediction_entropy(y_pred: Sequence[float | int | None] | np.ndarray) -> float:
    """Shannon entropy in bits of the predictions, non-answers as one extra category."""
    p = _check_predictions(y_pred)
    if len(p) == 0:
        return float("nan")
    answered = p[~np.isnan(p)]
    _, counts = np.unique(answered, return_counts=True)
    n_none = len(p) - len(answered)
    if n_none:
        counts = np.append(counts, n_none)
    q = counts / counts.sum()
    return float(-(q * np.log2(q)).sum())


def prediction_perplexity(y_pred: Sequence[float | int | None] | np.ndarray) -> float:
    """PP = 2^H, the effective number of distinct predictions (NaN without items)."""
    h = prediction_entropy(y_pred)
    return float(2.0**h) if np.isfinite(h) else float("nan")
