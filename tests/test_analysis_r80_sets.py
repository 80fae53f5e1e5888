"""R80 as Give the Model a Finger defines it (Section 4, Section 5.1, Appendix D, Table 7):
fitted on the main battery only, factor sets in their own rows, the extended main + XL curve,
and the pooled DotArrays + FSC-147 pointing-error row (Table 2)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from countgym.analysis.capacity import capacity_table
from countgym.analysis.pipeline import compute_tables
from countgym.logs import ArmSpec, EpisodeRecord, Truth
from countgym.scenes import resolve_dataset
from countgym.stimulus import Stimulus

TAG = {"tools": ["tag", "answer"], "budget": 6, "verify": True, "numbered": True, "one_point_per_call": False,
       "order": None, "perturb": None, "prompt": "tools", "reward": "exact", "tool_cost": 0.0}  # fmt: skip


def records(dataset: str, answer: Callable[[Stimulus], int | None], model: str = "m") -> list[EpisodeRecord]:
    ds = resolve_dataset(dataset)
    out = []
    for s in ds.stimuli:
        out.append(EpisodeRecord(
            episode_id=f"{dataset}/{model}/{s.id}", stimulus_id=s.id, dataset=dataset,
            arm=ArmSpec(name="direct", options=TAG | {"tools": ["answer"], "budget": 1, "verify": False, "prompt": "direct"}),
            env_options={}, model=model, seed=0, answer=answer(s), end="answer", truth=Truth(n=s.n),
            countgym_version="t", template_hash="t", started_at="", finished_at="",
        ))  # fmt: skip
    return out


def exact_on_main(s: Stimulus) -> int:
    return s.n if s.meta["set"] == "main" else s.n + 1


def tables(recs: list[EpisodeRecord], n_resamples: int = 200):
    return compute_tables(recs, n_resamples=n_resamples)


@pytest.mark.slow
def test_full_battery_r80_is_the_main_battery_s_and_factor_sets_get_rows() -> None:
    t = tables(records("dotarrays", exact_on_main))
    s = t.summary.set_index("set")
    assert s.loc["all", "n_episodes"] == 272 and s.loc["all", "scope"] == "dataset"
    assert s.loc["all", "em"] == pytest.approx(216 / 272)
    # the curve is the 216 main images over 18 levels: exact everywhere -> censored at 60
    assert s.loc["all", "r80"] == 60 and bool(s.loc["all", "r80_censored"]) and s.loc["all", "n_levels"] == 18
    assert s.loc["main", "r80"] == 60 and s.loc["main", "n_episodes"] == 216
    factor = ["dense", "distractor", "heterogeneous", "small"]
    for f in factor:
        assert s.loc[f, "scope"] == "set" and s.loc[f, "em"] == 0.0 and np.isnan(s.loc[f, "r80"])
    assert s.loc[factor, "n_episodes"].sum() == 56
    # accuracy vs n shows the main curve only (exact at every level)
    assert (t.accuracy_by_n["exact_match_score"] == 1.0).all() and t.accuracy_by_n["n_images"].sum() == 216


@pytest.mark.slow
def test_extended_range_fits_main_and_xl_as_one_curve() -> None:
    def xl_answer(s: Stimulus) -> int:
        return s.n if s.n <= 150 else s.n - 20

    recs = records("dotarrays-main", lambda s: s.n) + records("dotarrays-xl", xl_answer)
    t = tables(recs)
    r = t.counting_range.set_index("curve")
    assert r.loc["main", "r80"] == 60 and bool(r.loc["main", "r80_censored"])
    assert r.loc["main+xl", "r80"] == 150 and not bool(r.loc["main+xl", "r80_censored"])
    assert (r.loc["main+xl", "n_min"], r.loc["main+xl", "n_max"], r.loc["main+xl", "n_images"]) == (1, 200, 246)
    ext = t.accuracy_by_n[t.accuracy_by_n["dataset"] == "main+xl"]
    assert ext["n_true"].min() == 1 and ext["n_true"].max() == 200 and ext["n_images"].sum() == 246
    # the per-dataset XL row has no R80 of its own (it is not a curve from n = 1)
    xl_row = t.summary[t.summary["dataset"] == "dotarrays-xl"]
    assert np.isnan(xl_row["r80"].iloc[0])


@pytest.mark.slow
def test_extended_ci_can_start_at_a_main_level() -> None:
    # A dip at the last main level (4 of 12 images exact at n = 60) in front of an exact
    # extension (30 images): the pooled fit from 60 to 200 is (4 + 30) / 42 >= 0.8, so R80 is
    # censored at 200; resamples with at most 3 exact images at 60 (P ~ 0.39) stop at 50, a
    # main-battery level: CI [50, 200], the shape of the paper's Gemini 3.1 Pro interval.
    main = resolve_dataset("dotarrays-main")
    wrong60 = set(sorted(s.id for s in main.stimuli if s.n == 60)[:8])
    recs = records("dotarrays-main", lambda s: s.n + 1 if s.id in wrong60 else s.n) + records(
        "dotarrays-xl", lambda s: s.n
    )
    r = tables(recs, n_resamples=2000).counting_range.set_index("curve").loc["main+xl"]
    assert r["r80"] == 200 and bool(r["r80_censored"])
    assert (r["r80_ci_low"], r["r80_ci_high"]) == (50, 200)


def test_pointing_error_pooled_over_dotarrays_and_fsc147() -> None:
    def ep(battery: str, pe: float, ds: str) -> dict:
        return {"model": "m", "arm": "tag", "dataset": ds, "battery": battery, "audited": True, "n_true": 10,
                "on_target": 9, "duplicate": 0, "phantom": 1, "omission": 1, "pointing_error": pe,
                "cardinality_consistent": True, "tag_calls": 1, "revised": False, "tau": 15.0}  # fmt: skip

    rows = [ep("dotarrays", v, "dotarrays") for v in (1.0, 2.0, 3.0)]
    rows += [ep("fsc147", v, "fsc") for v in (10.0, 20.0)]
    rows += [ep("dotarrays-xl", 99.0, "dotarrays-xl"), ep("lattice", 99.0, "lattice")]
    cap = capacity_table(pd.DataFrame(rows), n_resamples=500).set_index("pool")
    assert list(cap.index) == ["dotarrays", "fsc147", "dotarrays+fsc147"]
    assert cap.loc["dotarrays", "pointing_error"] == 2.0 and cap.loc["fsc147", "pointing_error"] == 15.0
    assert cap.loc["dotarrays+fsc147", "pointing_error"] == 3.0  # median of 1, 2, 3, 10, 20
    assert cap.loc["dotarrays+fsc147", "n_audited"] == 5 and cap.loc["dotarrays+fsc147", "datasets"] == "dotarrays;fsc"
    lo, hi = cap.loc["dotarrays+fsc147", ["pointing_error_ci_low", "pointing_error_ci_high"]]
    assert 1.0 <= lo <= 3.0 <= hi <= 20.0


@pytest.mark.slow
def test_audit_writes_r80_and_capacity_tables(tmp_path) -> None:
    from countgym.analysis import write_audit_files

    recs = records("dotarrays-main", lambda s: s.n) + records("dotarrays-xl", lambda s: s.n if s.n < 200 else 150)
    files = write_audit_files(recs, tmp_path, n_resamples=100)
    r80 = pd.read_csv(files.tables["r80"])
    assert set(r80["curve"]) == {"main", "main+xl"}
    html = files.report.read_text()
    assert 'id="r80-table"' in html and "main+xl" in html
