"""Known-answer tests for the counting metrics and the bootstrap (countgym.analysis)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from countgym.analysis import (
    absolute_error,
    acc10_score,
    accuracy_by,
    bootstrap,
    bootstrap_mean_ci,
    bootstrap_ratio_ci,
    bootstrap_ratios,
    counting_scores,
    coverage_score,
    exact_match,
    exact_match_score,
    mean_absolute_error,
    mean_signed_error,
    root_mean_squared_error,
    signed_error,
    summarize,
    tolerance_10,
    within_10,
)
from countgym.analysis.capacity import median_ci
from countgym.analysis.r80 import counting_range

# --- Acc@10% floor rule -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("y", "tol"),
    [(0, 0), (1, 0), (9, 0), (10, 1), (19, 1), (20, 2), (25, 2), (30, 3), (70, 7), (99, 9)],
)
def test_tolerance_is_floor_of_tenth(y: int, tol: int) -> None:
    assert tolerance_10([y]).tolist() == [tol]


def test_acc10_floor_rule_cases() -> None:
    # y=9: tolerance 0, so 8 and 10 are both wrong; y=10: tolerance 1; y=25: tolerance 2.
    y = [9, 9, 9, 10, 10, 10, 25, 25, 25, 25]
    p = [9, 8, 10, 9, 11, 12, 23, 27, 22, 28]
    assert within_10(y, p).tolist() == [
        True,
        False,
        False,
        True,
        True,
        False,
        True,
        True,
        False,
        False,
    ]
    assert acc10_score(y, p) == pytest.approx(5 / 10)


def test_acc10_unanswered_is_wrong() -> None:
    assert within_10([10, 10], [None, 10]).tolist() == [False, True]


# --- exact match, errors, coverage --------------------------------------------------------------


def test_exact_match_none_is_wrong() -> None:
    y = [3, 4, 5, 6]
    p = [3, None, 4, 6]
    assert exact_match(y, p).tolist() == [True, False, False, True]
    assert exact_match_score(y, p) == 0.5


def test_nan_prediction_is_unanswered() -> None:
    assert exact_match_score([3], np.array([np.nan])) == 0.0
    assert coverage_score([3, 4], np.array([np.nan, 4.0])) == 0.5


def test_errors_sign_and_direction() -> None:
    y = [10, 10, 10]
    p = [12, 7, None]
    np.testing.assert_array_equal(signed_error(y, p), [2.0, -3.0, np.nan])
    np.testing.assert_array_equal(absolute_error(y, p), [2.0, 3.0, np.nan])


def test_mae_rmse_over_answered_only() -> None:
    y = [10, 20, 30, 40]
    p = [12, None, 27, None]  # errors +2, -3 over the two answered items
    assert mean_absolute_error(y, p) == pytest.approx(2.5)
    assert root_mean_squared_error(y, p) == pytest.approx(math.sqrt((4 + 9) / 2))
    assert mean_signed_error(y, p) == pytest.approx(-0.5)
    assert coverage_score(y, p) == 0.5
    assert exact_match_score(y, p) == 0.0


def test_no_answers_gives_nan_errors_and_zero_coverage() -> None:
    y, p = [1, 2], [None, None]
    assert math.isnan(mean_absolute_error(y, p))
    assert math.isnan(root_mean_squared_error(y, p))
    assert coverage_score(y, p) == 0.0


def test_counting_scores_matches_single_metrics() -> None:
    rng = np.random.default_rng(3)
    y = rng.integers(1, 60, 200)
    p = (y + rng.integers(-5, 6, 200)).astype(float)
    p[rng.random(200) < 0.2] = np.nan
    s = counting_scores(y, p)
    assert s.n_items == 200
    assert s.n_answered == int((~np.isnan(p)).sum())
    assert s.exact_match == pytest.approx(exact_match_score(y, p))
    assert s.acc10 == pytest.approx(acc10_score(y, p))
    assert s.mae == pytest.approx(mean_absolute_error(y, p))
    assert s.rmse == pytest.approx(root_mean_squared_error(y, p))
    assert s.coverage == pytest.approx(coverage_score(y, p))


@pytest.mark.parametrize(
    ("y", "p", "match"),
    [
        ([1, 2], [1], "y_pred has 1 items"),
        ([1, -2], [1, 2], r"y_true\[1\] = -2"),
        ([1, 2.5], [1, 2], r"y_true\[1\] = 2.5"),
        ([[1, 2]], [[1, 2]], "y_true must be 1-D"),
        ([1, 2], [1, float("inf")], r"y_pred\[1\]"),
        ([1, 2], ["a", 2], "y_pred must hold numbers"),
    ],
)
def test_validation_names_argument_and_value(y: list, p: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        exact_match_score(y, p)


# --- bootstrap ----------------------------------------------------------------------------------


def test_bootstrap_ci_contains_estimate_and_is_deterministic() -> None:
    rng = np.random.default_rng(0)
    x = (rng.random(300) < 0.6).astype(float)
    a = bootstrap_ratio_ci(x, n_resamples=1000, seed=7)
    b = bootstrap_ratio_ci(x, n_resamples=1000, seed=7)
    c = bootstrap_ratio_ci(x, n_resamples=1000, seed=8)
    assert a == b
    assert (a.low, a.high) != (c.low, c.high)
    assert a.low <= a.estimate <= a.high
    assert a.estimate == pytest.approx(x.mean())
    # Width near the normal approximation 2 * 1.96 * sqrt(p(1-p)/n).
    se = math.sqrt(x.mean() * (1 - x.mean()) / len(x))
    assert a.high - a.low == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_bootstrap_mean_ignores_nan_items_in_estimate() -> None:
    v = np.array([1.0, np.nan, 3.0, np.nan] * 3)
    r = bootstrap_mean_ci(v, n_resamples=500, seed=0)
    assert r.estimate == 2.0 and r.note is None
    assert 1.0 <= r.low <= r.high <= 3.0
    # Two valued items: too few for an interval, which is empty with the reason.
    small = bootstrap_mean_ci(v[:4], n_resamples=500, seed=0)
    assert small.estimate == 2.0 and np.isnan(small.low) and small.note == "2 items, fewer than 5"


def test_bootstrap_chunking_does_not_change_results(monkeypatch: pytest.MonkeyPatch) -> None:

    x = np.arange(50, dtype=float)[None]
    full = bootstrap_ratios(x, np.ones_like(x), n_resamples=64, seed=1)
    monkeypatch.setattr(bootstrap, "_CHUNK_ENTRIES", 50 * 5)  # five resamples per chunk
    chunked = bootstrap_ratios(x, np.ones_like(x), n_resamples=64, seed=1)
    np.testing.assert_array_equal(full, chunked)


def test_bootstrap_ratios_are_the_resampled_sums_over_their_denominators() -> None:
    """Each resample's ratio is sum(num[idx]) / sum(den[idx]) over the drawn indices, for a
    denominator of ones (taken as the resample size, not gathered), a 0/1 denominator and a
    general one alike."""
    rng = np.random.default_rng(4)
    n = 37
    num = np.stack([rng.random(n), rng.integers(0, 9, n).astype(float), rng.random(n)])
    den = np.stack([np.ones(n), (rng.random(n) < 0.7).astype(float), rng.random(n) + 0.5])
    got = bootstrap_ratios(num, den, n_resamples=50, seed=3)
    order = bootstrap.canonical_order(num, den)  # items are resampled in their canonical order
    num, den = num[:, order], den[:, order]
    idx = np.random.default_rng(3).integers(0, n, size=(50, n))
    for j in range(3):
        s_den = den[j][idx].sum(axis=1)
        want = np.where(s_den > 0, num[j][idx].sum(axis=1) / np.where(s_den > 0, s_den, 1), np.nan)
        np.testing.assert_array_equal(got[j], want)


def test_bootstrap_does_not_depend_on_the_order_items_come_in() -> None:
    """Logs list episodes in the order they finished: the same items in another order give the
    same resamples, and so the same interval, for every bootstrap of the audit."""
    rng = np.random.default_rng(5)
    n = 41
    num = np.stack([rng.integers(0, 2, n).astype(float), rng.random(n)])
    den = np.stack([np.ones(n), (rng.random(n) < 0.6).astype(float)])
    perm = rng.permutation(n)
    np.testing.assert_array_equal(
        bootstrap_ratios(num, den, n_resamples=200, seed=7),
        bootstrap_ratios(num[:, perm], den[:, perm], n_resamples=200, seed=7),
    )
    ci = bootstrap_ratio_ci(num[1], den[1], seed=2)
    assert ci == bootstrap_ratio_ci(num[1][perm], den[1][perm], seed=2)
    values = rng.normal(0, 1, n)
    assert median_ci(values, seed=3) == median_ci(values[perm], seed=3)
    # R80 over items with no image ids: its per-level rates come in log order.
    levels = rng.integers(1, 6, n)
    hits = (rng.random(n) < 0.8).astype(int)
    r80 = counting_range(levels, hits, n_resamples=300, seed=1)
    again = counting_range(levels[perm], hits[perm], n_resamples=300, seed=1)
    np.testing.assert_equal((r80.ci_low, r80.ci_high), (again.ci_low, again.ci_high))
    assert not np.isnan(r80.ci_high)
    # The canonical order does not split a multi-statistic item: columns move together.
    order = bootstrap.canonical_order(num, den)
    assert sorted(map(tuple, np.vstack([num, den]).T[order])) == sorted(map(tuple, np.vstack([num, den]).T))


def test_bootstrap_coverage_near_nominal() -> None:
    # A 95 % interval should cover the true mean in about 95 % of replications.
    rng = np.random.default_rng(11)
    p_true, n, reps = 0.3, 120, 300
    hits = 0
    for _ in range(reps):
        x = (rng.random(n) < p_true).astype(float)
        r = bootstrap_ratio_ci(x, n_resamples=400, seed=rng)
        hits += r.low <= p_true <= r.high
    assert 0.89 <= hits / reps <= 0.99


@pytest.mark.parametrize(
    ("kw", "match"), [({"n_resamples": 0}, "n_resamples"), ({"confidence": 1.0}, "confidence")]
)
def test_bootstrap_validation(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        bootstrap_ratio_ci(np.ones(3), **kw)


# --- summary on a hand-built episodes table -----------------------------------------------------


def _episodes_table() -> pd.DataFrame:
    """Four episodes of one arm: two audited tag episodes, one tag episode without points,
    one direct episode (no tag calls)."""
    return pd.DataFrame(
        {
            "dataset": ["d"] * 4,
            "arm": ["tag"] * 4,
            "model": ["m"] * 4,
            "n_true": pd.array([10, 30, 5, 20], dtype="Int64"),
            "answer": pd.array([10, 28, None, 21], dtype="Int64"),
            "correct": pd.array([True, False, False, False], dtype="boolean"),
            "abs_error": [0.0, 2.0, np.nan, 1.0],
            "audited": [True, True, False, False],
            "on_target": pd.array([8, 20, None, None], dtype="Int64"),
            "duplicate": pd.array([1, 3, None, None], dtype="Int64"),
            "phantom": pd.array([1, 0, None, None], dtype="Int64"),
            "omission": pd.array([2, 10, None, None], dtype="Int64"),
            "tau": [20.0, 30.0, np.nan, np.nan],
            "pointing_error": [4.0, 10.0, np.nan, np.nan],
            "cardinality_consistent": pd.array([True, False, False, None], dtype="boolean"),
            "tag_calls": [1, 2, 3, 0],
            "revised": [False, True, True, False],
        }
    )


def test_summary_rates_per_100_objects_and_consistency() -> None:
    s = summarize(_episodes_table(), n_resamples=200)
    assert len(s) == 1
    row = s.iloc[0]
    assert row["n_episodes"] == 4
    assert row["n_audited"] == 2
    assert row["n_objects"] == 40  # only audited episodes' objects
    assert row["on_target_per100"] == pytest.approx(28 / 40 * 100)
    assert row["duplicate_per100"] == pytest.approx(4 / 40 * 100)
    assert row["phantom_per100"] == pytest.approx(1 / 40 * 100)
    assert row["omission_per100"] == pytest.approx(12 / 40 * 100)
    assert row["em"] == pytest.approx(1 / 4)
    assert row["coverage"] == pytest.approx(3 / 4)
    assert row["mae"] == pytest.approx((0 + 2 + 1) / 3)
    assert row["cardinality_consistency"] == pytest.approx(1 / 3)  # NA (no tag call) left out
    assert row["revision_rate"] == pytest.approx(2 / 3)  # among the 3 with >= 1 tag call
    assert row["pointing_error"] == pytest.approx(7.0)  # median of per-image medians 4 and 10
    assert row["tau_median"] == pytest.approx(25.0)
    # 4 episodes (3 answered): fewer than the minimum, so the intervals are empty with a reason.
    assert math.isnan(row["em_ci_low"]) and math.isnan(row["mae_ci_high"])
    assert row["ci_note"].startswith("em: 4 episodes, fewer than 5; mae: 3 answered episodes, fewer than 5")
    # The tau-sensitivity columns are absent from this table, so their rates are NaN.
    assert math.isnan(row["on_target_per100_t150"])


def test_summary_groups_and_is_deterministic() -> None:
    t = pd.concat([_episodes_table(), _episodes_table().assign(arm="direct")], ignore_index=True)
    a = summarize(t, n_resamples=300, seed=5)
    b = summarize(t, n_resamples=300, seed=5)
    pd.testing.assert_frame_equal(a, b)
    assert a["arm"].tolist() == ["direct", "tag"]


def test_summary_validation() -> None:
    t = _episodes_table()
    with pytest.raises(ValueError, match="'nope'"):
        summarize(t, by=("dataset", "nope"))
    with pytest.raises(ValueError, match="n_resamples"):
        summarize(t, n_resamples=-1)
    with pytest.raises(ValueError, match="pointing_error"):
        summarize(t.drop(columns="pointing_error"))


def test_accuracy_by_level() -> None:
    t = _episodes_table()
    acc = accuracy_by(t, n_resamples=100)
    assert acc["n_true"].tolist() == [5, 10, 20, 30]
    assert acc["em"].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert acc["coverage"].tolist() == [0.0, 1.0, 1.0, 1.0]
