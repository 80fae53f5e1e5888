"""What a study can detect: each headline contrast's CI half-width, read from the audit tables."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from countgym.detectable import HEADLINES, detectable, detectable_rows, print_detectable


def _audits(tmp_path: Path) -> list[Path]:
    finger, cc, video = (tmp_path / f"{p}-audit" for p in ("finger", "countercount", "countvideo"))
    for d in (finger, cc / "countercount", video):
        d.mkdir(parents=True)
    pd.DataFrame([
        # tag - direct on the common subset: 0.10 and 0.20 wide intervals -> 5 and 10 pp.
        {"dataset": "dotarrays:common", "model": "m1", "arm_a": "direct", "arm_b": "tag",
         "metric": "exact_match_score", "ci_low": -0.02, "ci_high": 0.08},
        {"dataset": "dotarrays:common", "model": "m2", "arm_a": "direct", "arm_b": "tag",
         "metric": "exact_match_score", "ci_low": 0.0, "ci_high": 0.2},
        # the full battery is not the paper's subset when the subset ran: ignored
        {"dataset": "dotarrays", "model": "m1", "arm_a": "direct", "arm_b": "tag",
         "metric": "exact_match_score", "ci_low": 0.0, "ci_high": 0.02},
        # MAE contrasts are not the EM row
        {"dataset": "dotarrays:common", "model": "m1", "arm_a": "direct", "arm_b": "tag",
         "metric": "mean_absolute_error", "ci_low": -9.0, "ci_high": 9.0},
        {"dataset": "dotarrays:common", "model": "m1", "arm_a": "list", "arm_b": "tag",
         "metric": "exact_match_score", "ci_low": -0.3, "ci_high": 0.1},
    ]).to_csv(finger / "contrasts.csv", index=False)
    pd.DataFrame([
        {"dataset": "dotarrays-main", "model": "m1", "arm": "direct", "r80_ci_low": 5, "r80_ci_high": 11},
        {"dataset": "dotarrays-main", "model": "m1", "arm": "tag+crop", "r80_ci_low": 12, "r80_ci_high": 20},
    ]).to_csv(finger / "summary.csv", index=False)
    pd.DataFrame([
        {"model": "m1", "format": "mcq", "intervention": "baseline", "bias_rate_low": 0.30, "bias_rate_high": 0.36},
        {"model": "m1", "format": "oe", "intervention": "baseline", "bias_rate_low": 0.30, "bias_rate_high": 0.40},
        {"model": "m1", "format": "mcq", "intervention": "cue", "bias_rate_low": 0.0, "bias_rate_high": 0.9},
    ]).to_csv(cc / "countercount" / "cf_scores.csv", index=False)
    pd.DataFrame([
        {"model": "m1", "format": "mcq", "level": "cue", "bias_rate_delta_low": -0.07, "bias_rate_delta_high": -0.01},
        {"model": "m1", "format": "mcq", "level": "blur(r=8,f=4)", "bias_rate_delta_low": -1, "bias_rate_delta_high": 1},
        {"model": "m1", "format": "mcq", "level": "blur", "bias_rate_delta_low": -0.05, "bias_rate_delta_high": 0.03},
    ]).to_csv(cc / "countercount" / "cf_deltas.csv", index=False)
    pd.DataFrame([
        {"dataset": "countvideo", "model": "a", "arm": "video-p1", "em_ci_low": 0.25, "em_ci_high": 0.28},
        {"dataset": "countvideo", "model": "b", "arm": "video-p1", "em_ci_low": 0.10, "em_ci_high": 0.14},
        {"dataset": "countvideo", "model": "a", "arm": "video-p2", "em_ci_low": 0.0, "em_ci_high": 1.0},
    ]).to_csv(video / "summary.csv", index=False)
    return [finger, cc, video]


def _by_name(results):
    return {r.headline.name: r for r in results}


def test_half_widths_known_answers(tmp_path: Path) -> None:
    got = _by_name(detectable(_audits(tmp_path)))
    assert got["Table 1/3: tag - direct, EM, DotArrays"].half_widths == pytest.approx((5.0, 10.0))
    assert got["Table 1/3: tag - direct, EM, DotArrays"].median == pytest.approx(7.5)
    assert got["Table 24: tag - list, EM, DotArrays"].half_widths == pytest.approx((20.0,))
    assert got["R80: tag+crop - direct, DotArrays main"].half_widths == pytest.approx((math.hypot(3, 4),))
    assert got["bias rate, MCQ (baseline)"].half_widths == pytest.approx((3.0,))
    assert got["bias rate, open-ended (baseline)"].half_widths == pytest.approx((5.0,))
    assert got["cue - baseline, bias rate, MCQ"].half_widths == pytest.approx((3.0,))
    assert got["blur - baseline, bias rate, MCQ"].half_widths == pytest.approx((4.0,))  # not the sweep's level
    assert got["EM per model (P1)"].half_widths == pytest.approx((1.5, 2.0))
    assert got["EM difference between two models (P1)"].half_widths == pytest.approx((2.5,))
    # Not run (FSC-147 and PixMo need a download; no thinking cells): no interval, not a zero.
    for name in ("Table 1/3: cot - direct, EM, FSC-147", "Table 1/3: tag - direct, EM, PixMo-Count",
                 "thinking - baseline, bias rate, MCQ"):
        assert got[name].half_widths == () and got[name].median is None


def test_every_paper_has_headlines_with_reported_effects() -> None:
    assert {h.paper for h in HEADLINES} == {"finger", "countercount", "countvideo"}
    assert all(h.reported for h in HEADLINES)


def test_printed_table_puts_reach_beside_the_paper(tmp_path: Path, capsys) -> None:
    print_detectable(_audits(tmp_path), scale="full")
    text = capsys.readouterr().out
    assert "95 % CI half-width" in text
    line = next(x for x in text.splitlines() if "Table 1/3: tag - direct, EM, DotArrays" in x)
    assert "Flash-Lite +14.0 pp [+4, +26]" in line and "+/-7.5 pp [5.0-10.0]" in line
    fsc = next(x for x in text.splitlines() if "FSC-147" in x)
    assert "not run here" in fsc


def test_rows_without_an_interval_read_as_too_few(tmp_path: Path) -> None:
    d = tmp_path / "countercount-audit" / "countercount"
    d.mkdir(parents=True)
    pd.DataFrame([{"model": "m", "format": "mcq", "intervention": "baseline", "bias_rate_low": float("nan"),
                   "bias_rate_high": float("nan")}]).to_csv(d / "cf_scores.csv", index=False)
    rows = {r[1]: r[3] for r in detectable_rows(detectable([d.parent]))}
    assert rows["bias rate, MCQ (baseline)"] == "no interval (too few items)"
    assert rows["bias rate, open-ended (baseline)"] == "- (not run here)"


def test_missing_or_broken_tables_read_as_not_run(tmp_path: Path) -> None:
    d = tmp_path / "finger-audit"
    d.mkdir()
    (d / "contrasts.csv").write_text("not,a\n\x00broken")
    rows = detectable_rows(detectable([d, tmp_path / "countercount-audit"]))
    assert all(r[3] == "- (not run here)" for r in rows)
