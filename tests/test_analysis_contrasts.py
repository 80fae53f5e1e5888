"""Paired arm contrasts: hand-computed cases, image clustering, table pairing and CI coverage."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from countgym.analysis import bootstrap_ratio_ci, contrasts_table, paired_contrasts
from countgym.analysis.contrasts import CONTRAST_COLUMNS, arm_sort_key


def test_paired_contrast_hand_computed() -> None:
    y = [3, 5, 7, 9]
    a = [3, 4, None, 9]  # correct, off by 1, unanswered, correct
    b = [3, 5, 7, 6]  # correct, correct, correct, off by 3
    em, mae = paired_contrasts(y, a, b, n_resamples=200)
    assert (em.value_a, em.value_b, em.difference) == (0.5, 0.75, 0.25)
    assert em.n_pairs == 4 and em.n_images == 4
    # MAE over the 3 pairs both answered: a = (0 + 1 + 0) / 3, b = (0 + 0 + 3) / 3.
    assert mae.n_pairs == 3
    assert mae.value_a == pytest.approx(1 / 3) and mae.value_b == pytest.approx(1.0)
    assert mae.difference == pytest.approx(2 / 3)
    # 4 images: fewer than the minimum for an interval, so none is claimed (and nothing is solid).
    assert math.isnan(em.ci_low) and em.ci_note == "4 images, fewer than 5" and not em.ci_solid
    assert mae.ci_note == "3 images, fewer than 5"


def test_ci_solid_when_the_interval_excludes_zero() -> None:
    y = [2] * 30
    em, mae = paired_contrasts(y, [1] * 30, [2] * 30, n_resamples=300)
    # Every pair moves the same way: no interval to show (never [1, 1]), but 30 of 30 pairs
    # in one direction is solid.
    assert em.difference == 1.0 and math.isnan(em.ci_low) and math.isnan(em.ci_high) and em.ci_solid
    assert em.ci_note == "no resample of the 30 images changes the value (every outcome alike)"
    assert mae.difference == -1.0 and mae.ci_solid
    em0, _ = paired_contrasts(y, [2] * 30, [2] * 30, n_resamples=100)
    assert em0.difference == 0 and not em0.ci_solid


def test_image_clusters_resample_together() -> None:
    # Each image has two repeats whose differences cancel (+1, -1): resampling whole images
    # gives 0 in every resample; resampling pairs independently does not.
    y = [1] * 40
    a = [1, 0] * 20
    b = [0, 1] * 20
    img = np.repeat(np.arange(20), 2)
    em, _ = paired_contrasts(y, a, b, image=img, n_resamples=500)
    assert math.isnan(em.ci_low) and em.n_images == 20 and "every outcome alike" in em.ci_note
    assert not em.ci_solid
    em_flat, _ = paired_contrasts(y, a, b, n_resamples=500)
    assert em_flat.ci_low < -0.1 and em_flat.ci_high > 0.1


def test_paired_contrast_validation() -> None:
    with pytest.raises(ValueError, match="one length"):
        paired_contrasts([1, 2], [1], [1, 2])
    with pytest.raises(ValueError, match="n_resamples"):
        paired_contrasts([1], [1], [1], n_resamples=0)
    with pytest.raises(ValueError, match="y_true must be known"):
        paired_contrasts([None], [1], [1])


def _table() -> pd.DataFrame:
    rows = []
    for arm, answers in (("tag", [2, 3, 4, 5]), ("direct", [2, 0, 4, 0])):
        for i, ans in enumerate(answers):
            rows.append(("d", "m", arm, f"s{i // 2}", i % 2, [2, 3, 4, 5][i], ans))
    rows.append(("d", "m", "tag", "s9", 0, 9, 9))  # unpaired: left out
    rows.append(("d", "other", "tag", "s0", 0, 2, 2))  # a lone arm of another model
    return pd.DataFrame(
        rows, columns=["dataset", "model", "arm", "stimulus_id", "repeat", "n_true", "answer"]
    ).astype({"n_true": "Int64", "answer": "Int64"})


def test_contrasts_table_pairs_by_stimulus_and_repeat() -> None:
    t = contrasts_table(_table(), n_resamples=200)
    assert tuple(t.columns) == CONTRAST_COLUMNS
    assert len(t) == 2  # one contrast (direct -> tag of model m), two metrics
    em = t[t["metric"] == "exact_match_score"].iloc[0]
    # The baseline is direct (BASELINE_ORDER), the difference is tag - direct.
    assert (em["arm_a"], em["arm_b"]) == ("direct", "tag")
    assert (em["n_pairs"], em["n_images"]) == (4, 2)
    assert em["value_a"] == 0.5 and em["value_b"] == 1.0 and em["difference"] == 0.5
    mae = t[t["metric"] == "mean_absolute_error"].iloc[0]
    assert mae["value_a"] == pytest.approx((0 + 3 + 0 + 5) / 4) and mae["value_b"] == 0


def test_errored_episodes_leave_their_pair_out() -> None:
    t = _table()
    t["end"] = "answer"
    # direct's episode on (s0, 1) failed on a model call: it is no wrong answer, so its pair goes.
    t.loc[(t["arm"] == "direct") & (t["stimulus_id"] == "s0") & (t["repeat"] == 1), ["end", "answer"]] = ["error", None]
    em = contrasts_table(t, n_resamples=200).query("metric == 'exact_match_score'").iloc[0]
    assert em["n_pairs"] == 3
    assert em["value_a"] == pytest.approx(2 / 3) and em["value_b"] == 1.0


def test_contrasts_table_is_seeded() -> None:
    a = contrasts_table(_table(), n_resamples=300, seed=4)
    b = contrasts_table(_table(), n_resamples=300, seed=4)
    pd.testing.assert_frame_equal(a, b)


def test_arm_sort_key_baseline_order() -> None:
    labels = ["tag[order=reverse]", "zeta", "tag", "direct", "cot"]
    assert sorted(labels, key=arm_sort_key) == ["direct", "cot", "tag", "tag[order=reverse]", "zeta"]


# --- coverage -----------------------------------------------------------------------------------


def test_bootstrap_ci_coverage_of_a_bernoulli_mean() -> None:
    """About 95 % of simulated 95 % intervals cover the true mean (400 replications)."""
    rng = np.random.default_rng(2025)
    p, n, reps = 0.3, 200, 400
    covered = 0
    for r in range(reps):
        x = (rng.random(n) < p).astype(float)
        ci = bootstrap_ratio_ci(x, n_resamples=1000, seed=r)
        covered += ci.low <= p <= ci.high
    assert 0.92 <= covered / reps <= 0.98


@pytest.mark.slow
def test_paired_contrast_ci_coverage() -> None:
    """The paired EM-difference interval covers the true difference about 95 % of the time."""
    rng = np.random.default_rng(11)
    n, reps = 300, 400
    pa, pb = 0.5, 0.65  # true difference 0.15, outcomes correlated within pairs
    covered = 0
    for r in range(reps):
        u = rng.random(n)
        y = np.full(n, 5)
        a = np.where(u < pa, 5, 4)
        b = np.where(u < pb, 5, 6)
        em, _ = paired_contrasts(y, a, b, n_resamples=1000, seed=r)
        covered += em.ci_low <= pb - pa <= em.ci_high
    assert 0.92 <= covered / reps <= 0.98
    assert not math.isnan(em.ci_low)
