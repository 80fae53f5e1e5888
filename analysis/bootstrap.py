"""Percentile bootstrap confidence intervals, vectorised with numpy and seeded explicitly.

Every statistic here is a ratio of sums over items, ``sum(num[idx]) / sum(den[idx])``: a mean
(``den = 1``), a mean over a subset (``den`` = membership, e.g. MAE over answered items) or a
rate per ground-truth object. Resampling draws items with replacement; resamples whose
denominator is zero (say, no answered item) have no value and are left out of the percentiles.

Items are resampled in a canonical order (``canonical_order``: sorted by their values), not in the
order they arrive: logs list episodes in the order they finished, which concurrent runs change
from one run to the next, and the same seed drawing the same indices over items in another order
gives another interval. So an interval depends only on the items and the seed: the same episodes
give the same interval, however they were logged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Index matrices are drawn in chunks of about this many entries to bound memory (8 bytes each).
_CHUNK_ENTRIES = 2_000_000


@dataclass(frozen=True)
class BootstrapResult:
    """A point estimate with its percentile bootstrap interval."""

    estimate: float
    low: float
    high: float
    confidence: float
    n_resamples: int
    note: str | None = None
    """Why the interval is empty (not estimable: ``ci_reason``), or None."""


def _check_bootstrap_args(n_resamples: int, confidence: float) -> None:
    if not isinstance(n_resamples, int | np.integer) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")


def _check_ratio_arrays(num: np.ndarray, den: np.ndarray) -> None:
    if num.ndim != 2 or den.shape != num.shape:
        raise ValueError(
            f"numerators and denominators must be 2-D arrays of one shape, got {num.shape} and {den.shape}"
        )
    if not (np.isfinite(num).all() and np.isfinite(den).all()):
        raise ValueError(
            "numerators and denominators must be finite (encode missing items as den = 0)"
        )


def canonical_order(*rows: np.ndarray) -> np.ndarray:
    """The permutation that sorts items (columns of the 1-D or 2-D ``rows``, compared value by value,
    first row first): items in this order depend only on their values, not on the order they came
    in. Items that compare equal are interchangeable, so ties do not matter."""
    keys = [r for row in rows for r in np.atleast_2d(np.asarray(row, dtype=float))]
    if not keys:
        return np.arange(0)
    return np.lexsort(keys[::-1])  # lexsort's primary key is its last


def canonical_values(values: np.ndarray) -> np.ndarray:
    """``values`` sorted (1-D): resampling one sample of values in an order that depends only on them."""
    return np.sort(np.asarray(values, dtype=float).ravel())


def bootstrap_ratios(
    num: np.ndarray,
    den: np.ndarray,
    *,
    n_resamples: int = 2000,
    seed: int | np.random.Generator = 0,
) -> np.ndarray:
    """Resampled ratios ``(k, n_resamples)`` for k statistics sharing the same n items.

    All k statistics use the same resampled index sets, so they stay jointly consistent.
    NaN marks resamples with a zero denominator. Items are resampled in ``canonical_order``: the
    result does not depend on the order of the columns.
    """
    num = np.atleast_2d(np.asarray(num, dtype=float))
    den = np.atleast_2d(np.asarray(den, dtype=float))
    _check_ratio_arrays(num, den)
    order = canonical_order(num, den)
    num, den = num[:, order], den[:, order]
    _check_bootstrap_args(n_resamples, 0.5)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    k, n = num.shape
    out = np.full((k, n_resamples), np.nan)
    if n == 0:
        return out
    chunk = max(1, _CHUNK_ENTRIES // n)
    # A denominator of ones (a plain mean) sums to the resample size exactly: not gathered.
    ones = [bool((den[j] == 1.0).all()) for j in range(k)]
    for start in range(0, n_resamples, chunk):
        stop = min(n_resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        for j in range(k):
            s_num = num[j][idx].sum(axis=1)
            s_den = np.full(stop - start, float(n)) if ones[j] else den[j][idx].sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[j, start:stop] = np.where(
                    s_den > 0, s_num / np.where(s_den > 0, s_den, 1), np.nan
                )
    return out


def percentile_interval(samples: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The (low, high) percentile interval of bootstrap samples, ignoring NaN; NaN if none."""
    s = np.asarray(samples, dtype=float)
    s = s[~np.isnan(s)]
    if len(s) == 0:
        return float("nan"), float("nan")
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(s, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


MIN_CI_ITEMS = 5
"""Fewest items (images, episodes, stimuli, pairs: whatever the bootstrap resamples) a percentile
interval is reported for. With fewer, a resampled mean takes only a handful of values and the
percentile interval is not a 95 % interval of anything; it is reported as not estimable."""

CI_NOTE = "ci_note"
"""Column that says why a table row's interval(s) are empty (not estimable)."""


def ci_reason(
    samples: np.ndarray | None, n_items: int, low: float = float("nan"), high: float = float("nan"),
    *, unit: str = "items",
) -> str | None:
    """Why a bootstrap interval over ``n_items`` resampled items cannot be reported, or None.

    Not estimable: fewer than ``MIN_CI_ITEMS`` items; no resample has a value; every resample
    gives the same value (every outcome equal, e.g. all correct); or the interval collapses to
    one value (``low == high``). Such an interval is reported empty, never as ``[x, x]``."""
    if n_items < MIN_CI_ITEMS:
        return f"{n_items} {unit}, fewer than {MIN_CI_ITEMS}"
    if samples is not None:
        s = np.asarray(samples, dtype=float).ravel()
        s = s[~np.isnan(s)]
        if len(s) == 0:
            return "no resample has a value"
        if s.min() == s.max():
            return f"no resample of the {n_items} {unit} changes the value (every outcome alike)"
    if not (np.isnan(low) or np.isnan(high)) and low == high:
        return "95 % of resamples give the same value"
    return None


def estimable_interval(
    samples: np.ndarray, n_items: int, confidence: float = 0.95, *, unit: str = "items"
) -> tuple[float, float, str | None]:
    """``percentile_interval`` with ``ci_reason``: (low, high, None), or (NaN, NaN, reason)."""
    lo, hi = percentile_interval(samples, confidence)
    why = ci_reason(samples, n_items, lo, hi, unit=unit)
    return (float("nan"), float("nan"), why) if why else (lo, hi, None)


def join_notes(notes: dict[str, str | None]) -> str | None:
    """``{"em": "3 items ...", "r80": None}`` -> ``"em: 3 items ..."`` (None when all are None);
    metrics with the same reason share it (``em, mae: ...``)."""
    by_reason: dict[str, list[str]] = {}
    for k, v in notes.items():
        if v:
            by_reason.setdefault(v, []).append(k)
    if not by_reason:
        return None
    return "; ".join(f"{', '.join(ks)}: {why}" for why, ks in by_reason.items())


def bootstrap_ratio_ci(
    numerator: np.ndarray,
    denominator: np.ndarray | None = None,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.Generator = 0,
) -> BootstrapResult:
    """Percentile CI of ``sum(numerator) / sum(denominator)`` resampling items (den = 1 if None)."""
    _check_bootstrap_args(n_resamples, confidence)
    num = np.asarray(numerator, dtype=float).ravel()
    den = np.ones_like(num) if denominator is None else np.asarray(denominator, dtype=float).ravel()
    if den.shape != num.shape:
        raise ValueError(f"denominator has {den.size} items but numerator has {num.size}")
    total = den.sum()
    estimate = float(num.sum() / total) if total > 0 else float("nan")
    samples = bootstrap_ratios(num[None], den[None], n_resamples=n_resamples, seed=seed)[0]
    low, high, note = estimable_interval(samples, int(np.count_nonzero(den)), confidence)
    return BootstrapResult(estimate, low, high, confidence, n_resamples, note)


def bootstrap_mean_ci(
    values: np.ndarray,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.Generator = 0,
) -> BootstrapResult:
    """Percentile CI of the mean of the non-NaN values, resampling all items (NaN ones included)."""
    v = np.asarray(values, dtype=float).ravel()
    ok = ~np.isnan(v)
    return bootstrap_ratio_ci(
        np.where(ok, v, 0.0),
        ok.astype(float),
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
    )
