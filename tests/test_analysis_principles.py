"""Principle tests: rank correlations vs SciPy, order irrelevance, transforms, the perturbation
probe, tags vs direct answers and the lattice control, on hand-computed cases."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau, spearmanr

from countgym.analysis import (
    agreement,
    arm_labels,
    audit_episodes,
    departures_table,
    kendall_tau_b,
    offset_stats,
    principle_tables,
    probe_outcome,
    spearman_rho,
    tags_vs_direct_table,
    traversal_tau,
)
from countgym.analysis.stimuli import StimulusCache
from countgym.logs import ArmSpec, EpisodeRecord, StepRecord, Truth
from countgym.stimulus import Dataset, Stimulus, write_manifest

Pt = tuple[float, float]
PTS: list[Pt] = [(100.0, 100.0), (300.0, 300.0), (500.0, 500.0)]


def make_dataset(root: Path, stimuli: Sequence[Stimulus]) -> Dataset:
    write_manifest(root, stimuli)
    return Dataset(root)


def stim(sid: str, points: Sequence[Pt] = PTS, **meta: Any) -> Stimulus:
    return Stimulus(id=sid, n=len(points), obj="dots", obj_sing="dot", image=f"{sid}.png",
                    points=list(points), meta=meta)  # fmt: skip


def step(i: int, tags: Sequence[Pt] = (), **kw: Any) -> StepRecord:
    action = {"tool": "tag", "points": [list(p) for p in tags]} if tags or kw.get("tags_cleared") else {"tool": "answer"}
    return StepRecord(index=i, action=action, tags_added=list(tags), **kw)


def rec(
    eid: str,
    sid: str,
    steps: Sequence[StepRecord],
    *,
    answer: int | None,
    n: int = 3,
    dataset: str = "ds",
    arm: str = "tag",
    model: str = "m",
    repeat: int = 0,
    **options: Any,
) -> EpisodeRecord:
    opts = {"tools": ["tag"], **options}
    tags: list[Pt] = []
    for s in steps:
        if s.tags_cleared:
            tags = []
        tags.extend(s.tags_added)
        pert = s.perturbation or {}
        if pert.get("kind") == "remove" and "index" in pert:
            del tags[pert["index"]]
        elif pert.get("kind") == "add" and "xy" in pert:
            tags.append(tuple(pert["xy"]))
    return EpisodeRecord(
        episode_id=eid, stimulus_id=sid, dataset=dataset, arm=ArmSpec(name=arm, options=opts),
        env_options=opts, model=model, seed=0, repeat=repeat, image_size=(768, 768),
        stimulus_size=(768, 768), steps=list(steps), tags=tags, answer=answer, end="answer",
        truth=Truth(n=n), countgym_version="test", template_hash="t", started_at="", finished_at="",
    )  # fmt: skip


def resolver(**datasets: Dataset):
    from countgym.errors import UserError

    def resolve(name: str) -> Dataset:
        if name not in datasets:
            raise UserError(f"unknown dataset {name!r}")
        return datasets[name]

    return resolve


# --- rank correlations against SciPy ------------------------------------------------------------


def test_kendall_and_spearman_match_scipy() -> None:
    rng = np.random.default_rng(5)
    for _ in range(100):
        k = int(rng.integers(2, 40))
        x = rng.integers(0, 6, k).astype(float)  # many ties
        y = rng.normal(size=k).round(1)
        ref_tau = kendalltau(x, y).statistic
        ref_rho = spearmanr(x, y).statistic
        if np.isnan(ref_tau):
            assert math.isnan(kendall_tau_b(x, y))
        else:
            assert kendall_tau_b(x, y) == pytest.approx(ref_tau, abs=1e-12)
        if np.isnan(ref_rho):
            assert math.isnan(spearman_rho(x, y))
        else:
            assert spearman_rho(x, y) == pytest.approx(ref_rho, abs=1e-12)


def test_traversal_tau_hand_computed() -> None:
    rows = [(50.0 * i, 10.0 * i) for i in range(6)]
    assert traversal_tau(rows) == pytest.approx(1.0)  # top to bottom
    assert traversal_tau(rows[::-1]) == pytest.approx(-1.0)  # bottom to top
    assert math.isnan(traversal_tau(rows[:4]))  # fewer than 5 tags
    # y = (1, 2, 2, 3, 1): concordant 5, discordant 3, ties in y 2 -> (5-3)/sqrt(10*8).
    tags = [(0.0, y) for y in (1, 2, 2, 3, 1)]
    assert traversal_tau(tags) == pytest.approx(2 / math.sqrt(80))


# --- order irrelevance --------------------------------------------------------------------------


def test_agreement_hand_computed() -> None:
    # s1: same order always agrees (repeat 0), opposite orders always differ (cross 1).
    # s2: repeats differ in both orders (repeat 1); opposite pairs differ in 2 of 4 (cross 0.5).
    a = {"s1": [3, 3], "s2": [5, 6]}
    b = {"s1": [4, 4], "s2": [5, 6]}
    ag = agreement(a, b, n_resamples=200)
    assert ag.n_stimuli == 2
    assert ag.repeat_disagreement == pytest.approx(0.5)
    assert ag.cross_disagreement == pytest.approx(0.75)
    assert ag.cross_agreement == pytest.approx(0.25)
    assert ag.effect == pytest.approx(0.25)
    assert math.isnan(ag.effect_ci_low) and math.isnan(ag.effect_ci_high)  # 2 stimuli: too few for a CI
    wide = agreement({f"{k}{s}": v for k in range(3) for s, v in a.items()},
                     {f"{k}{s}": v for k in range(3) for s, v in b.items()}, n_resamples=200)
    assert wide.effect == pytest.approx(0.25) and wide.effect_ci_low <= wide.effect <= wide.effect_ci_high
    # Without repeats the repeat control and the effect are undefined.
    single = agreement({"s": [3]}, {"s": [None]})
    assert single.cross_disagreement == 1.0 and math.isnan(single.effect)
    # "No answer" equals itself.
    assert agreement({"s": [None, None]}, {"s": [None]}).cross_disagreement == 0.0


def test_order_effect_table_from_logs(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stim("s1"), stim("s2")])
    tags = [[(100.0, 100.0), (300.0, 300.0), (500.0, 500.0)]]
    answers = {("reading", "s1"): [3, 3], ("reverse", "s1"): [2, 2],
               ("reading", "s2"): [3, 2], ("reverse", "s2"): [3, 2]}  # fmt: skip
    recs = []
    for (order, sid), ans in answers.items():
        for r, a in enumerate(ans):
            recs.append(rec(f"{order}/{sid}/r{r}", sid, [step(0, tags[0]), step(1)], answer=a,
                            repeat=r, order=order))  # fmt: skip
    ep = audit_episodes(recs, resolve=resolver(ds=ds))
    tabs = principle_tables(recs, ep, resolve=resolver(ds=ds))
    oe = tabs["order_effect"].iloc[0]
    assert (oe["arm_a"], oe["arm_b"]) == ("tag[order=reading]", "tag[order=reverse]")
    assert oe["n_stimuli"] == 2
    assert oe["repeat_disagreement"] == pytest.approx(0.5)
    assert oe["cross_disagreement"] == pytest.approx(0.75)
    assert oe["order_effect"] == pytest.approx(0.25)
    assert oe["exact_match_a"] == pytest.approx(3 / 4) and oe["exact_match_b"] == pytest.approx(1 / 4)
    assert "traversal" not in tabs  # 3 tags per trajectory: below the 5-tag minimum


def test_transform_consistency_by_suffix_and_meta(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stim("s1"), stim("s2")])
    moved = make_dataset(
        tmp_path / "moved",
        [stim("s1-rot180"), stim("m2", transform_of="s2", transform="mirror")],
    )
    res = resolver(ds=ds, moved=moved)
    recs = [
        rec("o1", "s1", [step(0)], answer=3),
        rec("o2", "s2", [step(0)], answer=3),
        rec("t1", "s1-rot180", [step(0)], answer=2, dataset="moved"),
        rec("t2", "m2", [step(0)], answer=3, dataset="moved"),
    ]
    ep = audit_episodes(recs, resolve=res)
    tc = principle_tables(recs, ep, resolve=res)["transform_consistency"]
    tc = tc.set_index("transform")
    assert set(tc.index) == {"rot180", "mirror"}
    assert tc.loc["rot180", "disagreement"] == 1.0 and tc.loc["rot180", "agreement"] == 0.0
    assert tc.loc["mirror", "agreement"] == 1.0
    assert tc.loc["rot180", "dataset"] == "ds" and tc.loc["rot180", "dataset_transformed"] == "moved"
    assert math.isnan(tc.loc["rot180", "effect"])  # no repeats: no repeat control


# --- tag perturbation ---------------------------------------------------------------------------


def _perturbation_records() -> list[EpisodeRecord]:
    a, b, c = PTS
    remove = {"perturb": "remove"}
    add = {"perturb": "add"}
    return [
        # remove the tag on b; the model re-tags b and announces the 3 visible tags (repaired)
        rec("rm0", "s", [step(0, [a, b, c], perturbation={"kind": "remove", "index": 1}),
                         step(1, [(302.0, 301.0)]), step(2)], answer=3, **remove),
        # remove the tag on a; the model announces the 2 visible tags (not repaired)
        rec("rm1", "s", [step(0, [a, b, c], perturbation={"kind": "remove", "index": 0}),
                         step(1)], answer=2, repeat=1, **remove),
        # add a tag on c; the model starts over with three tags (repaired, not discriminating)
        rec("ad0", "s", [step(0, [a, b], perturbation={"kind": "add", "xy": [500.0, 500.0]}),
                         step(1, [a, b, c], tags_cleared=True), step(2)], answer=3, **add),
        # add a tag on c; the model announces its own 2 tags (emitted count)
        rec("ad1", "s", [step(0, [a, b], perturbation={"kind": "add", "xy": [500.0, 500.0]}),
                         step(1)], answer=2, repeat=1, **add),
        # the harness found nothing to add
        rec("ad2", "s", [step(0, [a, b, c], perturbation={"kind": "add", "skipped": "none"}),
                         step(1)], answer=3, repeat=2, **add),
        # unperturbed runs of the same arm
        rec("u0", "s", [step(0, [a, b, c]), step(1)], answer=3, perturb=None),
        rec("u1", "s", [step(0, [a, b, c]), step(1)], answer=3, repeat=1, perturb=None),
    ]  # fmt: skip


def test_probe_outcomes(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stim("s")])
    cache = StimulusCache(resolver(ds=ds))
    out = {r.episode_id: probe_outcome(r, cache) for r in _perturbation_records()}
    assert out["rm0"].repaired is True and (out["rm0"].visible, out["rm0"].emitted) == (3, 4)
    assert out["rm1"].repaired is False and (out["rm1"].visible, out["rm1"].emitted) == (2, 3)
    assert out["ad0"].repaired is True and (out["ad0"].visible, out["ad0"].emitted) == (3, 3)
    assert out["ad1"].repaired is False and (out["ad1"].visible, out["ad1"].emitted) == (3, 2)
    assert out["ad2"].applied is False
    assert out["u0"] is None


def test_perturbation_table(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stim("s")])
    recs = _perturbation_records()
    ep = audit_episodes(recs, resolve=resolver(ds=ds))
    t = principle_tables(recs, ep, resolve=resolver(ds=ds))["perturbation"].set_index("kind")
    rm, ad = t.loc["remove"], t.loc["add"]
    assert rm["arm"] == "tag[perturb=remove]" and rm["arm_unperturbed"] == "tag"
    assert (rm["n_trajectories"], rm["n_skipped"], rm["repair_rate"]) == (2, 0, 0.5)
    assert (rm["n_discriminating"], rm["visible_share"], rm["emitted_share"]) == (2, 1.0, 0.0)
    # Shifts vs the unperturbed answer 3: repaired 3 - 3 = 0, unrepaired 2 - 3 = -1.
    assert rm["answer_shift_mean"] == -0.5
    assert (rm["answer_shift_repaired_mean"], rm["answer_shift_unrepaired_mean"]) == (0.0, -1.0)
    assert (ad["n_trajectories"], ad["n_skipped"], ad["repair_rate"]) == (2, 1, 0.5)
    assert (ad["n_discriminating"], ad["visible_share"], ad["emitted_share"]) == (1, 0.0, 1.0)


# --- tags vs direct answers ---------------------------------------------------------------------


def _frame(rows: list[tuple]) -> pd.DataFrame:
    cols = ["dataset", "model", "arm", "stimulus_id", "repeat", "n_true", "answer", "n_tags",
            "tag_calls"]  # fmt: skip
    return pd.DataFrame(rows, columns=cols).astype({"n_true": "Int64", "answer": "Int64"})


def test_tags_vs_direct_hand_computed() -> None:
    truth = [10, 20, 30, 40]
    tags = [10, 18, 33, 35]
    direct = [10, 15, 31, None]
    rows = [("d", "m", "tag", f"s{i}", 0, n, t, t, 1) for i, (n, t) in enumerate(zip(truth, tags, strict=True))]
    rows += [("d", "m", "direct", f"s{i}", 0, n, a, 0, 0) for i, (n, a) in enumerate(zip(truth, direct, strict=True))]
    t = tags_vs_direct_table(_frame(rows)).iloc[0]
    assert (t["arm"], t["arm_direct"], t["n_pairs"]) == ("tag", "direct", 4)
    assert t["tag_direct_agreement"] == 0.25  # only s0: 10 == 10
    # Errors over the 3 pairs with a direct answer: tags (0, -2, 3), direct (0, -5, 1).
    assert t["n_rho"] == 3
    assert t["error_spearman_rho"] == pytest.approx(spearmanr([0, -2, 3], [0, -5, 1]).statistic)


def test_departures_hand_computed() -> None:
    rows = [
        ("d", "m", "tag", "s0", 0, 10, 10, 10, 1),  # no departure
        ("d", "m", "tag", "s1", 0, 10, 10, 9, 1),  # departs toward the truth
        ("d", "m", "tag", "s2", 0, 10, 12, 11, 1),  # departs away from it
        ("d", "m", "tag", "s3", 0, 10, 11, 9, 1),  # departs, equally far: neither
        ("d", "m", "tag", "s4", 0, 10, None, 9, 1),  # no answer: left out
        ("d", "m", "tag", "s5", 0, 10, 3, 0, 0),  # no tag call: left out
    ]
    d = departures_table(_frame(rows)).iloc[0]
    assert (d["n_trajectories"], d["n_departures"]) == (4, 3)
    assert d["departure_rate"] == 0.75
    assert d["closer_share"] == pytest.approx(1 / 3) and d["farther_share"] == pytest.approx(1 / 3)
    assert d["mean_departure"] == pytest.approx((1 + 1 + 2) / 3)


# --- lattice control ----------------------------------------------------------------------------


def test_offset_stats_hand_computed() -> None:
    cells = np.array([[100.0, 100.0], [200.0, 100.0], [100.0, 200.0], [200.0, 200.0]])
    off = np.array([[5.0, -3.0], [-4.0, 6.0], [2.0, 2.0], [-6.0, -1.0]])
    dots = cells + off
    on_dots = offset_stats(dots + [1.0, 0.0], dots, cells)
    assert on_dots["offset_slope"] == pytest.approx(1.0)
    assert on_dots["median_dot_distance"] == pytest.approx(1.0)
    d_cell = np.hypot(*(off + [1.0, 0.0]).T)
    assert on_dots["median_cell_distance"] == pytest.approx(np.median(d_cell))
    assert on_dots["cell_over_dot_ratio"] == pytest.approx(np.median(d_cell))
    assert on_dots["share_closer_to_dot"] == 1.0
    on_grid = offset_stats(cells, dots, cells)
    assert on_grid["offset_slope"] == pytest.approx(0.0)
    assert on_grid["share_closer_to_dot"] == 0.0
    with pytest.raises(ValueError, match="match in length"):
        offset_stats(cells[:2], dots, cells)


def test_lattice_table(tmp_path: Path) -> None:
    cells = [(100.0, 100.0), (300.0, 100.0), (100.0, 300.0)]
    dots = [(106.0, 97.0), (296.0, 104.0), (103.0, 305.0)]
    ds = make_dataset(tmp_path / "ds", [stim("s", dots, cells=[list(c) for c in cells],
                                             arrangement="regular")])  # fmt: skip
    recs = [
        rec("on", "s", [step(0, dots), step(1)], answer=3, model="dots"),
        rec("grid", "s", [step(0, cells), step(1)], answer=3, model="grid"),
    ]
    ep = audit_episodes(recs, resolve=resolver(ds=ds))
    lt = principle_tables(recs, ep, resolve=resolver(ds=ds))["lattice"].set_index("model")
    assert lt.loc["dots", "offset_slope"] == pytest.approx(1.0)
    assert lt.loc["grid", "offset_slope"] == pytest.approx(0.0)
    assert lt.loc["dots", "arrangement"] == "regular" and lt.loc["dots", "n_tags"] == 3


# --- applicability and arm labels ---------------------------------------------------------------


def test_principle_tables_skip_what_does_not_apply(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stim("s")])
    recs = [rec("d0", "s", [step(0)], answer=3, arm="direct", tools=[])]
    ep = audit_episodes(recs, resolve=resolver(ds=ds))
    assert principle_tables(recs, ep, resolve=resolver(ds=ds)) == {}


def test_arm_labels_tell_variants_apart() -> None:
    recs = [
        rec("a", "s", [], answer=1),
        rec("b", "s", [], answer=1, order="reverse"),
        rec("c", "s", [], answer=1, order="reverse", omission=0.3),
        rec("d", "s", [], answer=1, arm="direct", tools=[]),
    ]
    assert arm_labels(recs) == ["tag", "tag[order=reverse]", "tag[order=reverse;omission=0.3]",
                                "direct"]  # fmt: skip
