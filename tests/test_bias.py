"""Prediction-distribution bias metrics: hand-computed known answers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from countgym.analysis import bias as b


def test_support_and_perplexity_with_non_answers() -> None:
    p = [1, 1, 2, None]
    # p = (1/2, 1/4, 1/4 for the non-answer category): H = 1.5 bits, PP = 2^1.5.
    assert b.support_size(p) == 2
    assert b.prediction_perplexity(p) == pytest.approx(2**1.5)
    assert b.prediction_perplexity([7] * 9) == pytest.approx(1.0)
    assert b.prediction_perplexity([None, None]) == pytest.approx(1.0)
    assert b.support_size([None, None]) == 0
    assert math.isnan(b.prediction_perplexity([]))
    # Uniform over the 26 benchmark values (the Oracle): PP = 26.
    assert b.prediction_perplexity(list(range(26)) * 4) == pytest.approx(26.0)


def test_local_excess_and_deficit_by_hand() -> None:
    # N_20 = 5, N_21 = 1, N_22 = 3, N_23 = 0, N_24 = 4
    p = [20] * 5 + [21] + [22] * 3 + [24] * 4
    prof = b.local_profile(p).set_index("value")
    # k=20: L=max(N19,N18)=0, R=max(N21,N22)=3 -> excess 5-3=2, deficit 0-5=-5
    assert (prof.at[20, "excess"], prof.at[20, "deficit"]) == (2, -5)
    # k=21: L=5, R=max(3,0)=3 -> excess 1-5=-4, deficit 3-1=2
    assert (prof.at[21, "excess"], prof.at[21, "deficit"]) == (-4, 2)
    # k=23 is never predicted: not in the model's support, so not evaluated (CountVideoBench
    # Section 5.2: "across each model's support"), although a gap would score deficit 3 there.
    assert 23 not in prof.index and list(prof.index) == [20, 21, 22, 24]
    # k=24 (upper end): L=max(N23,N22)=3, R=0 -> excess 1
    assert prof.at[24, "excess"] == 1
    assert b.largest_local_excess(p) == b.LocalExtreme(amount=2, value=20)
    assert b.largest_local_deficit(p) == b.LocalExtreme(amount=2, value=21)


def test_local_extremes_ends_and_ties() -> None:
    # A single value: excess = N, deficit = -N.
    assert b.largest_local_excess([5, 5, 5]) == b.LocalExtreme(3, 5)
    assert b.largest_local_deficit([5, 5, 5]) == b.LocalExtreme(-3, 5)
    # Two isolated equal peaks: tie -> the smaller value. The valley between them (12) is a gap
    # of the histogram, outside the support: at 10 and 14, min(L, R) = 0, so the deficit is -2.
    p = [10, 10, 14, 14]
    assert b.largest_local_excess(p) == b.LocalExtreme(2, 10)
    assert b.largest_local_deficit(p) == b.LocalExtreme(-2, 10)
    # Non-answers are not a value.
    assert b.largest_local_excess([None, None]) is None
    assert b.local_profile([4, None]).shape[0] == 1


def test_local_extremes_over_the_support_with_gaps() -> None:
    # Predictions 5 x20, 1 x21, 6 x25, 2 x30, 7 x35, with gaps between: only 20 and 21 have a
    # predicted neighbour within two steps.
    p = [20] * 5 + [21] + [25] * 6 + [30] * 2 + [35] * 7
    prof = b.local_profile(p).set_index("value")
    assert list(prof.index) == [20, 21, 25, 30, 35]
    # k=21: L=5, R=max(N22,N23)=0 -> deficit min(5,0)-1=-1; an isolated value has deficit -N_k
    assert prof.at[21, "deficit"] == -1 and prof.at[30, "deficit"] == -2
    # the largest deficit is the least negative one; a gap (22..24, 26..29) is never reported
    assert b.largest_local_deficit(p) == b.LocalExtreme(-1, 21)
    assert b.largest_local_excess(p) == b.LocalExtreme(7, 35)
    # a dip within the support: 4 x40, 1 x41, 4 x42 -> deficit min(4, 4) - 1 = 3 at 41
    q = [40] * 4 + [41] + [42] * 4
    assert b.largest_local_deficit(q) == b.LocalExtreme(3, 41)


def test_class_table_by_shape_and_colour() -> None:
    import pandas as pd

    df = pd.DataFrame({
        "model": ["m"] * 4 + ["k"] * 2,
        "shape": ["cube", "cube", "sphere", "sphere", "cube", "sphere"],
        "color": ["red", "blue", "red", "blue", "purple", "purple"],
        "n_true": [5, 6, 7, 8, 9, 10],
        "answer": [5, 0, 7, None, 9, 1],
    })  # fmt: skip
    t = b.class_table(df).set_index("model")
    assert list(t.columns) == ["n_items", "cube", "sphere", "red", "green", "blue", "yellow", "purple"]
    assert (t.at["m", "cube"], t.at["m", "sphere"], t.at["m", "red"], t.at["m", "blue"]) == (50.0, 50.0, 100.0, 0.0)
    assert math.isnan(t.at["m", "green"]) and t.at["k", "purple"] == 50.0
    cells = b.class_table(df, cells=True).set_index("model")
    assert cells.at["m", "red cube"] == 100.0 and cells.at["m", "blue sphere"] == 0.0
    assert len(cells.columns) == 11


def test_preferred_values() -> None:
    p = [20] * 5 + [21] + [22] * 3 + [24] * 4 + [None] * 7
    # 13 answers, 80 % = 10.4: 20 (5) + 24 (4) = 9 < 10.4, + 22 (3) = 12.
    assert b.preferred_values(p) == (20, 24, 22)
    assert b.preferred_values(p, mass=0.3) == (20,)
    assert b.preferred_values([None]) == ()


def test_top3_share() -> None:
    assert b.top3_share([5, 5, 6, 7, 8, 8, 8]) == pytest.approx(6 / 7)
    # A balanced benchmark with k values: 3/k (the paper: 3/26 for CountVideoBench).
    assert b.top3_share(list(range(26)) * 100) == pytest.approx(3 / 26)


def test_bias_scores_known_answers() -> None:
    y = [5, 10, 20, 30]
    p = [5, 9, 22, None]
    s = b.bias_scores(y, p)
    assert s.exact_match == pytest.approx(1 / 4)
    # tau = floor(0.1 y) = 0, 1, 2, 3: 5 ok, 9 ok (|1| <= 1), 22 ok (|2| <= 2), None wrong.
    assert s.acc10 == pytest.approx(3 / 4)
    assert s.mae == pytest.approx((0 + 1 + 2) / 3)
    assert s.rmse == pytest.approx(math.sqrt((0 + 1 + 4) / 3))
    assert s.coverage == pytest.approx(3 / 4)
    assert s.support_size == 3
    assert s.perplexity == pytest.approx(4.0)  # four equally likely categories incl. NaN
    # Acc@10% equals EM below 10 (tau = 0).
    assert b.bias_scores([9], [8]).acc10 == 0.0


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": ["a"] * 4 + ["b"] * 4,
            "n_true": [5, 10, 20, 30] * 2,
            "answer": [5, 9, 20, None, 5, 10, 22, 30],
        }
    )


def test_bias_table_with_oracle() -> None:
    t = b.bias_table(_frame()).set_index("model")
    assert list(t.index) == ["a", "b", "Oracle"]
    assert t.at["a", "exact_match"] == pytest.approx(0.5)
    assert t.at["b", "coverage"] == pytest.approx(1.0)
    assert t.at["Oracle", "exact_match"] == 1.0 and t.at["Oracle", "support_size"] == 4
    assert t.at["Oracle", "perplexity"] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="lacks columns"):
        b.bias_table(_frame().drop(columns="answer"))


def test_human_rows(tmp_path: Path) -> None:
    rows = [
        # respondent r1: all right; r2: one wrong, one non-answer; r3: one wrong
        ("r1", "v1", 5), ("r1", "v2", 10), ("r1", "v3", 20),
        ("r2", "v1", 6), ("r2", "v2", None), ("r2", "v3", 20),
        ("r3", "v1", 6), ("r3", "v2", 10), ("r3", "v3", 19),
    ]  # fmt: skip
    path = tmp_path / "humans.csv"
    pd.DataFrame(rows, columns=["respondent", "stimulus_id", "response"]).to_csv(path, index=False)
    t = b.human_rows(path, truth={"v1": 5, "v2": 10, "v3": 20}).set_index("model")
    # EM per respondent: 3/3, 1/3, 1/3 -> mean 5/9; coverage 1, 2/3, 1 -> 8/9.
    assert t.at["Human baseline", "exact_match"] == pytest.approx(5 / 9)
    assert t.at["Human baseline", "coverage"] == pytest.approx(8 / 9)
    # |S| per respondent: 3, 2, 3 -> 8/3.
    assert t.at["Human baseline", "support_size"] == pytest.approx(8 / 3)
    # Majority vote: v1 -> 6 (two of three), v2 -> 10, v3 -> 20: EM 2/3.
    assert t.at["Human (majority vote)", "exact_match"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="n_true"):
        b.human_rows(path)
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"who": [1]}).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="missing columns"):
        b.read_human_responses(bad)


def test_cardinality_matrix_and_figures(tmp_path: Path) -> None:
    m = b.cardinality_matrix(_frame())
    assert m.loc["a", 30] == 0.0 and m.loc["b", 20] == 0.0 and m.loc["b", 30] == 100.0
    cov = b.cardinality_matrix(_frame(), metric="coverage")
    assert cov.loc["a", 30] == 0.0 and np.isclose(cov.loc["a", 5], 100.0)
    paths = b.bias_figures(_frame(), tmp_path / "fig")
    assert [p.name for p in paths] == [
        "exact_match_by_count.png",
        "coverage_by_count.png",
        "predictions_a.png",
        "predictions_b.png",
    ]
    assert all(p.stat().st_size > 1000 for p in paths)
