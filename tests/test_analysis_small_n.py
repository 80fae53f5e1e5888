"""Statistics honest at small n: an interval the bootstrap cannot give is empty with a reason
(CSV), "[–]" in the report, never "[x, x]"."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from countgym.analysis import audit_episodes, summarize
from countgym.analysis.bootstrap import MIN_CI_ITEMS, ci_reason, estimable_interval, join_notes
from countgym.analysis.contrasts import paired_contrasts
from countgym.analysis.r80 import counting_range
from countgym.analysis.report import fmt_ci, fmt_r80, summary_section

from .test_analysis_audit import make_dataset, record, resolver, stimulus


def test_ci_reason_known_cases() -> None:
    assert ci_reason(np.array([0.1, 0.2]), 3) == f"3 items, fewer than {MIN_CI_ITEMS}"
    assert ci_reason(np.ones(100), 10, unit="episodes") == (
        "no resample of the 10 episodes changes the value (every outcome alike)")
    assert ci_reason(np.array([np.nan, np.nan]), 10) == "no resample has a value"
    assert ci_reason(np.array([0.0, 1.0]), 10, 0.5, 0.5) == "95 % of resamples give the same value"
    assert ci_reason(np.array([0.0, 1.0]), 10, 0.2, 0.8) is None
    lo, hi, why = estimable_interval(np.linspace(0, 1, 101), 10)
    assert why is None and lo == pytest.approx(0.025) and hi == pytest.approx(0.975)
    assert join_notes({"em": "x", "mae": "x", "r80": "y", "pp": None}) == "em, mae: x; r80: y"
    assert join_notes({"em": None}) is None


def test_r80_one_image_per_level_is_not_estimable() -> None:
    n = np.arange(1, 11)
    cr = counting_range(n, n <= 7, n_resamples=200)
    assert cr.r80 == 7 and math.isnan(cr.ci_low) and math.isnan(cr.ci_high)
    assert cr.ci_note == "one image per count level: resampling within levels cannot move R80"
    # Ten images per level that disagree: the bootstrap varies and the interval is reported.
    rng = np.random.default_rng(0)
    many = np.repeat(n, 10)
    correct = rng.random(len(many)) < np.clip(1.1 - many / 10, 0, 1)
    cr2 = counting_range(many, correct, n_resamples=400)
    assert cr2.ci_note is None and cr2.ci_low < cr2.ci_high


def _pilot(tmp_path: Path) -> pd.DataFrame:
    """The 10-image pilot of the issue: one image per count level 1-10, every answer right."""
    stims = [stimulus(f"s{k}", [(30.0 * i + 10, 50.0) for i in range(k)], set="main") for k in range(1, 11)]
    ds = make_dataset(tmp_path / "ds", stims)
    recs = [record(f"e{k}", f"s{k}", [], answer=k, n=k, arm="direct", tools=()) for k in range(1, 11)]
    return audit_episodes(recs, resolve=resolver(ds=ds))


def test_pilot_summary_has_empty_cis_with_reasons(tmp_path: Path) -> None:
    s = summarize(_pilot(tmp_path), n_resamples=200).iloc[0]
    assert s.em == 1.0 and s.r80 == 10
    for col in ("em_ci_low", "em_ci_high", "mae_ci_low", "mae_ci_high", "r80_ci_low", "r80_ci_high"):
        assert math.isnan(s[col]), col
    assert s.ci_note == (
        "em: no resample of the 10 episodes changes the value (every outcome alike); "
        "mae: no resample of the 10 answered episodes changes the value (every outcome alike); "
        "r80: one image per count level: resampling within levels cannot move R80")
    row = s.to_dict()
    assert fmt_ci(row["em"], row["em_ci_low"], row["em_ci_high"]) == "1.00 [–]"
    assert fmt_r80(row) == "≥ 10 [–]"
    html = summary_section(pd.DataFrame([row]))
    assert "[1.00, 1.00]" not in html and "[10, 10]" not in html
    assert "1.00 [–]" in html and "one image per count level" in html


def test_written_summary_csv_keeps_the_reason(tmp_path: Path) -> None:
    from countgym.analysis import write_audit

    stims = [stimulus(f"s{k}", [(30.0 * i + 10, 50.0) for i in range(k)], set="main") for k in range(1, 11)]
    ds = make_dataset(tmp_path / "ds", stims)
    recs = [record(f"e{k}", f"s{k}", [], answer=k, n=k, arm="direct", tools=()) for k in range(1, 11)]
    write_audit(recs, tmp_path / "audit", resolve=resolver(ds=ds), n_resamples=100)
    sm = pd.read_csv(tmp_path / "audit" / "summary.csv").iloc[0]
    assert pd.isna(sm.em_ci_low) and pd.isna(sm.r80_ci_low) and "one image per count level" in sm.ci_note


def test_contrast_small_and_varying() -> None:
    y = np.array([3, 4, 5])
    em, _ = paired_contrasts(y, y, y - 1)
    assert math.isnan(em.ci_low) and em.ci_note == "3 images, fewer than 5" and not em.ci_solid
    y = np.arange(1, 41)
    b = np.where(y % 3 == 0, y + 1, y)
    em, _ = paired_contrasts(y, y, b, n_resamples=500)
    assert em.ci_note is None and em.ci_low < em.difference < em.ci_high
