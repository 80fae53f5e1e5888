"""Counting range R80, the isotonic fit and the prediction-distribution statistics."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import isotonic_regression

from countgym.analysis import (
    accuracy_curve_table,
    counting_range,
    isotonic_nonincreasing,
    prediction_entropy,
    prediction_perplexity,
    summarize,
    support_size,
)
from countgym.analysis.r80 import r80_index, r80_index_direct


def curve(acc_per_level: list[list[int]], levels: list[int] | None = None):
    """(n_true, correct) arrays from per-level lists of 0/1 outcomes (one image each)."""
    levels = levels or list(range(1, len(acc_per_level) + 1))
    n = [lv for lv, outs in zip(levels, acc_per_level, strict=True) for _ in outs]
    c = [o for outs in acc_per_level for o in outs]
    return np.array(n), np.array(c, dtype=float)


# --- the isotonic fit ---------------------------------------------------------------------------


def test_isotonic_matches_scipy_on_random_curves() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        k = int(rng.integers(1, 30))
        y = rng.random(k).round(2)  # rounding makes ties common
        w = rng.integers(1, 8, k).astype(float)
        ref = isotonic_regression(y, weights=w, increasing=False).x
        np.testing.assert_allclose(isotonic_nonincreasing(y, w), ref, atol=1e-12)


def test_isotonic_vectorises_over_rows() -> None:
    rng = np.random.default_rng(8)
    y = rng.random((50, 9))
    w = np.arange(1.0, 10.0)
    fits = isotonic_nonincreasing(y, w)
    for row, fit in zip(y, fits, strict=True):
        np.testing.assert_allclose(fit, isotonic_regression(row, weights=w, increasing=False).x)
    assert (np.diff(fits, axis=1) <= 1e-12).all()


def test_isotonic_hand_computed() -> None:
    # (1, 0.5, 1) with weights (1, 4, 1): the violating pair pools to (0.5*4 + 1) / 5 = 0.6.
    np.testing.assert_allclose(isotonic_nonincreasing([1.0, 0.5, 1.0], [1, 4, 1]), [1, 0.6, 0.6])
    with pytest.raises(ValueError, match="weights"):
        isotonic_nonincreasing([1.0, 0.5], [1, 0])


def test_direct_r80_index_equals_the_fitted_one() -> None:
    # The bootstrap locates R80 from cumulative sums without fitting; it must agree with the fit,
    # including ties at the threshold (y on a grid of tenths, pooled means hitting 0.8 exactly).
    rng = np.random.default_rng(9)
    for _ in range(500):
        k = int(rng.integers(1, 25))
        y = rng.integers(0, 11, k) / 10
        w = rng.integers(1, 6, k).astype(float)
        for t in (0.8, 0.5):
            assert r80_index_direct(y, w, t) == r80_index(isotonic_nonincreasing(y, w), t)
    y = rng.integers(0, 5, (300, 12)) / 4
    w = rng.integers(1, 4, 12).astype(float)
    np.testing.assert_array_equal(r80_index_direct(y, w), r80_index(isotonic_nonincreasing(y, w)))


# --- R80 ----------------------------------------------------------------------------------------


def test_r80_monotone_curve() -> None:
    n, c = curve([[1] * 4, [1] * 4, [1, 1, 1, 1], [1, 1, 0, 0], [0] * 4])
    cr = counting_range(n, c, n_resamples=0)
    assert cr.r80 == 3 and not cr.censored
    assert cr.levels == (1, 2, 3, 4, 5) and cr.accuracy == (1, 1, 1, 0.5, 0)
    assert math.isnan(cr.ci_low)


def test_r80_right_censored_when_still_above_at_largest_n() -> None:
    n, c = curve([[1] * 5, [1, 1, 1, 1, 0], [1, 1, 1, 1, 0]], levels=[10, 20, 60])
    cr = counting_range(n, c, n_resamples=0)
    assert cr.r80 == 60 and cr.censored


def test_r80_tie_at_threshold_counts() -> None:
    # Exactly 80 % passes ("at or above"), including a pooled 0.8 = (0.7 + 0.9) / 2.
    n, c = curve([[1] * 10, [1] * 8 + [0] * 2, [0] * 10])
    assert counting_range(n, c, n_resamples=0).r80 == 2
    n, c = curve([[1] * 10, [1] * 7 + [0] * 3, [1] * 9 + [0], [0] * 10])
    cr = counting_range(n, c, n_resamples=0)
    np.testing.assert_allclose(cr.fit, [1.0, 0.8, 0.8, 0.0])
    assert cr.r80 == 3


def test_r80_non_monotone_dip_is_smoothed() -> None:
    # Level 3 dips to 0.6, levels 4-5 recover: the fit pools 3..5 to (0.6 + 1 + 1) / 3 = 0.867,
    # still >= 0.8, so R80 = 5 (reading the raw curve would stop at 2).
    outs = [[1] * 5, [1] * 5, [1, 1, 1, 0, 0], [1] * 5, [1] * 5, [1, 0, 0, 0, 0]]
    n, c = curve(outs)
    cr = counting_range(n, c, n_resamples=0)
    np.testing.assert_allclose(cr.fit, [1, 1, 2.6 / 3, 2.6 / 3, 2.6 / 3, 0.2])
    assert cr.r80 == 5 and not cr.censored


def test_r80_weights_are_images_per_level() -> None:
    # Level 2 has 4 images at 50 %, level 3 one image at 100 %: pooled (0.5*4 + 1) / 5 = 0.6.
    n, c = curve([[1], [1, 1, 0, 0], [1]])
    cr = counting_range(n, c, n_resamples=0)
    np.testing.assert_allclose(cr.fit, [1, 0.6, 0.6])
    assert cr.r80 == 1 and cr.n_images == (1, 4, 1)


def test_r80_undefined_below_threshold_at_smallest_level() -> None:
    n, c = curve([[1, 0], [0, 0]])
    cr = counting_range(n, c, n_resamples=50)
    assert math.isnan(cr.r80) and not cr.censored


def test_r80_repeats_average_within_image() -> None:
    # One image with repeats (1, 1, 1, 0) and one with (1): per-image rates 0.75 and 1 -> 0.875.
    cr = counting_range([2, 2, 2, 2, 2], [1, 1, 1, 0, 1], image=["a", "a", "a", "a", "b"],
                        n_resamples=0)  # fmt: skip
    assert cr.accuracy == (0.875,) and cr.n_images == (2,)


def test_r80_bootstrap_ci() -> None:
    # All-or-nothing levels: every resample gives the same curve, so no interval is claimed.
    n, c = curve([[1] * 6, [1] * 6, [0] * 6])
    cr = counting_range(n, c, n_resamples=300)
    assert cr.r80 == 2 and np.isnan(cr.ci_low) and np.isnan(cr.ci_high)
    assert cr.ci_note == "every resample gives the same R80 (2)"
    # A noisy curve: the CI brackets R80, lies on tested levels and is seeded.
    rng = np.random.default_rng(3)
    levels = np.repeat(np.arange(1, 19), 12)
    correct = rng.random(len(levels)) < np.clip(1.25 - levels / 14, 0, 1)
    a = counting_range(levels, correct, n_resamples=500, seed=11)
    b = counting_range(levels, correct, n_resamples=500, seed=11)
    assert a == b
    assert a.ci_low <= a.r80 <= a.ci_high
    assert {a.ci_low, a.ci_high} <= set(a.levels)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"threshold": 0.0}, "threshold"),
        ({"n_resamples": -1}, "n_resamples"),
        ({"confidence": 1.0}, "confidence"),
    ],
)
def test_r80_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        counting_range([1, 2], [1, 0], **kwargs)
    with pytest.raises(ValueError, match="correct"):
        counting_range([1, 2], [1, 2])
    with pytest.raises(ValueError, match="n_true"):
        counting_range([1.5, 2], [1, 0])


def _episodes(n: list[int], answer: list[int | None], arm: str = "tag") -> pd.DataFrame:
    k = len(n)
    return pd.DataFrame({
        "dataset": ["d"] * k, "arm": [arm] * k, "model": ["m"] * k,
        "stimulus_id": [f"s{i}" for i in range(k)],
        "n_true": pd.array(n, dtype="Int64"), "answer": pd.array(answer, dtype="Int64"),
    })  # fmt: skip


def test_accuracy_curve_table_and_summary_columns() -> None:
    ep = _episodes([1, 1, 2, 2, 3, 3], [1, 1, 2, None, 3, 3])
    tab = accuracy_curve_table(ep)
    assert tab["n_true"].tolist() == [1, 2, 3]
    assert tab["exact_match_score"].tolist() == [1.0, 0.5, 1.0]
    np.testing.assert_allclose(tab["isotonic_fit"], [1.0, 0.75, 0.75])
    audit_cols = {c: pd.NA for c in ("on_target", "duplicate", "phantom", "omission",
                                      "cardinality_consistent")}  # fmt: skip
    full = ep.assign(audited=False, tau=np.nan, pointing_error=np.nan, tag_calls=0,
                     revised=False, **audit_cols)  # fmt: skip
    row = summarize(full, n_resamples=100).iloc[0]
    assert row["r80"] == 1 and not row["r80_censored"] and row["n_levels"] == 3
    assert row["support_size"] == 3  # answers 1, 2, 3; the missing one is not counted
    probs = np.array([2, 1, 2, 1]) / 6  # 1, 2, 3 and "no answer"
    assert row["prediction_perplexity"] == pytest.approx(2 ** -(probs * np.log2(probs)).sum())


# --- support size and prediction perplexity -----------------------------------------------------


def test_support_size_and_perplexity_hand_computed() -> None:
    assert support_size([1, 1, 2, 2]) == 2
    assert prediction_perplexity([1, 1, 2, 2]) == pytest.approx(2.0)
    assert prediction_perplexity([5, 5, 5]) == pytest.approx(1.0)
    # Non-answers are one extra category of PP but not part of the support.
    assert support_size([1, 1, 1, None]) == 1
    h = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert prediction_entropy([1, 1, 1, None]) == pytest.approx(h)
    assert prediction_perplexity([1, 1, 1, None]) == pytest.approx(2**h)
    assert prediction_perplexity([None, None]) == pytest.approx(1.0)
    assert support_size([None, np.nan]) == 0
    assert math.isnan(prediction_perplexity([]))
    # Uniform over k values: PP = k.
    assert prediction_perplexity(list(range(7))) == pytest.approx(7.0)
    with pytest.raises(ValueError, match="finite"):
        support_size([1, float("inf")])
