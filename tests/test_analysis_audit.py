"""Point-level audit: hand-computed cases, matcher properties, injected-error recovery, log I/O."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countgym.analysis import (
    CONTRACT_COLUMNS,
    audit_episodes,
    audit_tags,
    load_episodes,
    scale_points,
    summarize,
    write_audit,
)
from countgym.errors import UserError
from countgym.logs import ArmSpec, EpisodeRecord, LogLineError, StepRecord, Truth
from countgym.matching import match_tags, tau_for
from countgym.stimulus import Dataset, Stimulus, write_manifest

Pt = tuple[float, float]


# --- fixtures -----------------------------------------------------------------------------------


def stimulus(
    sid: str, points: Sequence[Pt] | None, n: int | None = None, **meta: object
) -> Stimulus:
    n = len(points) if points is not None else n
    return Stimulus(
        id=sid, n=n, obj="dots", obj_sing="dot", image=f"{sid}.png", points=points, meta=meta
    )


def make_dataset(root: Path, stimuli: Sequence[Stimulus]) -> Dataset:
    write_manifest(root, stimuli)
    return Dataset(root)


def resolver(**datasets: Dataset) -> Callable[[str], Dataset]:
    def resolve(name: str) -> Dataset:
        if name not in datasets:
            raise UserError(f"unknown dataset {name!r}")
        return datasets[name]

    return resolve


def record(
    eid: str,
    sid: str,
    tag_calls: Sequence[Sequence[Pt]] = (),
    *,
    answer: int | None,
    n: int | None,
    dataset: str = "ds",
    arm: str = "tag",
    tools: Sequence[str] = ("tag",),
    image_size: tuple[int, int] | None = (768, 768),
    stimulus_size: tuple[int, int] | None = (768, 768),
    extra_steps: Sequence[StepRecord] = (),
    end: str = "answer",
) -> EpisodeRecord:
    """An episode whose tag calls add the given tags in order (final tags = all of them)."""
    steps = [
        StepRecord(
            index=i, action={"tool": "tag", "points": [list(p) for p in pts]}, tags_added=list(pts)
        )
        for i, pts in enumerate(tag_calls)
    ]
    steps += [s.model_copy(update={"index": len(steps) + j}) for j, s in enumerate(extra_steps)]
    tags = [p for pts in tag_calls for p in pts]
    return EpisodeRecord(
        episode_id=eid,
        stimulus_id=sid,
        dataset=dataset,
        arm=ArmSpec(name=arm, options={"tools": list(tools)}),
        env_options={"tools": list(tools)},
        model="m",
        seed=0,
        image_size=image_size,
        stimulus_size=stimulus_size,
        steps=steps,
        tags=tags,
        answer=answer,
        end=end,
        truth=Truth(n=n) if n is not None else None,
        countgym_version="0.1.0",
        template_hash="h",
        started_at="2025-01-01T00:00:00",
        finished_at="2025-01-01T00:00:01",
    )


def one(df: pd.DataFrame, eid: str) -> pd.Series:
    return df.set_index("episode_id").loc[eid]


# --- hand-computed cases ------------------------------------------------------------------------


def test_three_objects_on_target_duplicate_phantom_omission(tmp_path: Path) -> None:
    # P0, P1, P2: nearest-neighbour distances 100, 100, 200 -> median 100 -> tau = 50.
    pts = [(100.0, 100.0), (200.0, 100.0), (100.0, 300.0)]
    ds = make_dataset(tmp_path / "ds", [stimulus("s", pts)])
    tags = [
        (100.0, 100.0),  # exactly on P0: on-target, distance 0
        (105.0, 100.0),  # 5 px from the already matched P0 (95 px from P1): duplicate
        (350.0, 550.0),  # far from every object: phantom
        (103.0, 304.0),  # 5 px from P2: on-target, distance 5
    ]  # P1 is never tagged: omission
    rec = record("e", "s", [tags], answer=4, n=3, image_size=(400, 600), stimulus_size=(400, 600))
    row = one(audit_episodes([rec], resolve=resolver(ds=ds)), "e")
    assert (row.on_target, row.duplicate, row.phantom, row.omission) == (2, 1, 1, 1)
    assert row.tau == pytest.approx(50.0)
    # Per-image median of the on-target distances (0, 5) = 2.5 px over the shorter side 400.
    assert row.pointing_error == pytest.approx(2.5 / 400 * 1000)
    assert row.n_tags == 4 and row.n_true == 3 and row.answer == 4
    assert bool(row.cardinality_consistent) is True
    assert bool(row.correct) is False and row.abs_error == 1.0 and row.signed_error == 1.0
    assert bool(row.audited) is True and row.tag_calls == 1 and bool(row.revised) is False


def test_tau_floor_and_sensitivity(tmp_path: Path) -> None:
    # Nearest-neighbour distances 10, 10, ~410 -> half the median is 5 -> the 15 px floor holds.
    pts = [(100.0, 100.0), (110.0, 100.0), (400.0, 400.0)]
    assert tau_for(np.array(pts)) == 15.0
    ds = make_dataset(tmp_path / "ds", [stimulus("s", pts)])
    tags = [
        (100.0, 100.0),  # 0 px from P0 (10 from P1): on-target at every scale
        (128.0, 100.0),  # 18 px from P1: phantom at tau 15 and 11.25, on-target at 22.5
        (400.0, 420.0),  # 20 px from P2: phantom at tau 15 and 11.25, on-target at 22.5
    ]
    rec = record("e", "s", [tags], answer=3, n=3)
    row = one(audit_episodes([rec], resolve=resolver(ds=ds)), "e")
    assert row.tau == 15.0
    assert (row.on_target, row.duplicate, row.phantom, row.omission) == (1, 0, 2, 2)
    assert (row.on_target_t075, row.duplicate_t075, row.phantom_t075, row.omission_t075) == (
        1,
        0,
        2,
        2,
    )
    assert (row.on_target_t150, row.duplicate_t150, row.phantom_t150, row.omission_t150) == (
        3,
        0,
        0,
        0,
    )
    assert row.pointing_error == 0.0


def test_phantom_becomes_duplicate_as_tau_grows() -> None:
    # Two objects 300 px apart: NN 300 -> tau 150. A second tag 120 px from the tagged object
    # (323 px from the other) is a duplicate at tau 150 and 225 and a phantom at 112.5.
    pts = [(0.0, 0.0), (300.0, 0.0)]
    tags = [(0.0, 0.0), (0.0, 120.0), (300.0, 0.0)]
    a = audit_tags(tags, pts, shorter_side=768)
    assert a.tau == 150.0
    assert (a.on_target, a.duplicate, a.phantom, a.omission) == (2, 1, 0, 0)
    sens = dict(a.sensitivity)
    assert sens[0.75] == (2, 0, 1, 0)
    assert sens[1.5] == (2, 1, 0, 0)


def test_hungarian_beats_greedy_nearest(tmp_path: Path) -> None:
    # NN distances 30, 30, 70, 70 -> median 50 -> tau 25.
    pts = [(100.0, 100.0), (130.0, 100.0), (300.0, 300.0), (370.0, 300.0)]
    ds = make_dataset(tmp_path / "ds", [stimulus("s", pts)])
    # t1 is nearest to A (8 px) but also within tau of B (22 px); t2 reaches only A (12 px).
    # Greedy nearest (in tag order or by smallest distance) gives t1 -> A, leaving t2 a
    # duplicate and B an omission; the minimum-cost one-to-one assignment gives t1 -> B, t2 -> A.
    t1, t2 = (108.0, 100.0), (88.0, 100.0)
    rec = record("e", "s", [[t1, t2]], answer=2, n=4)
    row = one(audit_episodes([rec], resolve=resolver(ds=ds)), "e")
    assert row.tau == 25.0
    assert (row.on_target, row.duplicate, row.phantom, row.omission) == (2, 0, 0, 2)
    assert row.pointing_error == pytest.approx(np.median([22.0, 12.0]) / 768 * 1000)


def test_points_are_scaled_into_the_seen_image(tmp_path: Path) -> None:
    # Stored image 800 x 600, the policy saw 400 x 300: ground truth halves.
    pts = [(200.0, 200.0), (600.0, 400.0)]
    np.testing.assert_allclose(scale_points(pts, (800, 600), (400, 300)), [(100, 100), (300, 200)])
    ds = make_dataset(tmp_path / "ds", [stimulus("s", pts)])
    tags = [(100.0, 100.0), (302.0, 200.0)]
    rec = record("e", "s", [tags], answer=2, n=2, image_size=(400, 300), stimulus_size=(800, 600))
    row = one(audit_episodes([rec], resolve=resolver(ds=ds)), "e")
    assert (row.on_target, row.phantom, row.omission) == (2, 0, 0)
    assert row.tau == pytest.approx(0.5 * math.hypot(200, 100))  # measured in the seen frame
    assert row.pointing_error == pytest.approx(1.0 / 300 * 1000)  # median of 0 and 2 px, side 300


def test_cardinality_consistency_and_revision(tmp_path: Path) -> None:
    pts = [(100.0, 100.0), (300.0, 100.0), (500.0, 100.0)]
    ds = make_dataset(tmp_path / "ds", [stimulus("s", pts, set="main", arrangement="regular")])
    crop = StepRecord(index=0, action={"tool": "crop", "box": [0, 0, 500, 500]})
    bad = StepRecord(index=0, action=None, parse_error="no JSON")
    recs = [
        record("one-call", "s", [pts], answer=3, n=3, extra_steps=[crop, bad]),
        record("revised", "s", [pts[:2], pts[2:]], answer=2, n=3),  # says 2 with 3 tags
        record("no-answer", "s", [pts], answer=None, n=3, end="invalid"),
        record("direct", "s", [], answer=3, n=3, tools=()),
    ]
    df = audit_episodes(recs, resolve=resolver(ds=ds)).set_index("episode_id")
    assert df["tag_calls"].to_dict() == {"one-call": 1, "revised": 2, "no-answer": 1, "direct": 0}
    assert df["revised"].drop("direct").to_dict() == {
        "one-call": False,
        "revised": True,
        "no-answer": False,
    } and pd.isna(df.loc["direct", "revised"])  # a point-level rate: empty for an arm that cannot point
    cc = df["cardinality_consistent"]
    assert bool(cc["one-call"]) is True
    assert not bool(cc["revised"]) and not bool(cc["no-answer"])
    assert pd.isna(cc["direct"])
    assert bool(df.loc["direct", "audited"]) is False and pd.isna(df.loc["direct", "omission"])
    assert bool(df.loc["direct", "correct"]) is True  # counting metrics still count
    assert df.loc["one-call", "set"] == "main" and df.loc["one-call", "arrangement"] == "regular"
    assert df.loc["one-call", "n_steps"] == 3
    s = summarize(df.reset_index(), n_resamples=50).iloc[0]
    assert s["revision_rate"] == pytest.approx(1 / 3)
    assert s["cardinality_consistency"] == pytest.approx(1 / 3)
    assert s["n_audited"] == 3 and s["n_objects"] == 9


def test_missing_point_truth_keeps_metrics(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stimulus("s", None, n=7)])
    rec = record("e", "s", [[(10.0, 10.0)]], answer=7, n=7)
    row = one(audit_episodes([rec], resolve=resolver(ds=ds)), "e")
    assert bool(row.audited) is False
    for col in ("on_target", "duplicate", "phantom", "omission", "on_target_t075"):
        assert pd.isna(row[col])
    assert math.isnan(row.tau) and math.isnan(row.pointing_error)
    assert bool(row.correct) is True and row.abs_error == 0.0


def test_unknown_dataset_and_missing_stimulus_warn(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stimulus("s", [(1.0, 1.0)])])
    recs = [
        record("a", "s", [[(1.0, 1.0)]], answer=1, n=1, dataset="elsewhere"),
        record("b", "gone", [[(1.0, 1.0)]], answer=1, n=1),
    ]
    with pytest.warns(UserWarning) as w:
        df = audit_episodes(recs, resolve=resolver(ds=ds))
    text = " ".join(str(x.message) for x in w)
    assert "'elsewhere'" in text and "not found in dataset 'ds'" in text
    assert not df["audited"].any()
    assert df["correct"].tolist() == [True, True]


def test_truth_mismatch_skips_audit(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stimulus("s", [(1.0, 1.0), (100.0, 1.0)])])
    with pytest.warns(UserWarning, match="truth.n different"):
        df = audit_episodes(
            [record("e", "s", [[(1.0, 1.0)]], answer=3, n=3)], resolve=resolver(ds=ds)
        )
    assert not df["audited"].any()


def test_duplicate_episode_ids_counted_once(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stimulus("s", [(1.0, 1.0)])])
    r = record("e", "s", [[(1.0, 1.0)]], answer=1, n=1)
    with pytest.warns(UserWarning, match="duplicate episode ids"):
        df = audit_episodes([r, r], resolve=resolver(ds=ds))
    assert len(df) == 1


def test_columns_follow_the_contract(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stimulus("s", [(1.0, 1.0)])])
    df = audit_episodes([record("e", "s", [[(1.0, 1.0)]], answer=1, n=1)], resolve=resolver(ds=ds))
    assert tuple(df.columns[: len(CONTRACT_COLUMNS)]) == CONTRACT_COLUMNS
    empty = audit_episodes([], resolve=resolver(ds=ds))
    assert list(empty.columns) == list(df.columns) and len(empty) == 0


def test_audit_tags_validation() -> None:
    with pytest.raises(ValueError, match="shorter_side"):
        audit_tags([(0, 0)], [(0, 0)], shorter_side=0)
    with pytest.raises(ValueError, match="tau_scales"):
        audit_episodes([], tau_scales=(0.0,), resolve=resolver())
    with pytest.raises(ValueError, match="meta_keys.*'seed'"):
        audit_episodes([], meta_keys=("set", "seed"), resolve=resolver())


# --- properties of the matcher (hypothesis) -----------------------------------------------------

coord = st.floats(min_value=0, max_value=400, allow_nan=False, allow_infinity=False)
point_lists = st.lists(st.tuples(coord, coord), min_size=0, max_size=25)


@settings(max_examples=150, deadline=None)
@given(tags=point_lists, points=point_lists, data=st.data())
def test_match_counts_are_consistent(tags: list[Pt], points: list[Pt], data: st.DataObject) -> None:
    m = match_tags(tags, points)
    assert m.on_target <= min(len(tags), len(points))
    assert m.on_target + m.duplicate + m.phantom == len(tags)
    assert m.on_target + m.omission == len(points)
    objs = [o for o in m.tag_object if o >= 0]
    assert len(objs) == len(set(objs)) == m.on_target  # one-to-one
    assert all(d <= m.tau for d in m.distances)
    perm = data.draw(st.permutations(range(len(tags))))
    mp = match_tags([tags[i] for i in perm], points)
    assert (mp.on_target, mp.duplicate, mp.phantom, mp.omission) == (
        m.on_target,
        m.duplicate,
        m.phantom,
        m.omission,
    )


@settings(max_examples=100, deadline=None)
@given(points=point_lists)
def test_tags_on_the_points_are_all_on_target(points: list[Pt]) -> None:
    m = match_tags(points, points)
    assert m.on_target == len(points)
    assert m.omission == m.duplicate == m.phantom == 0
    assert all(d == 0 for d in m.distances)


# --- injected-error recovery --------------------------------------------------------------------

SIDE = 768
P_OMIT, P_DUP, P_PHANTOM, SIGMA = 0.10, 0.05, 0.08, 2.0


def _layout(rng: np.random.Generator) -> np.ndarray:
    """Random non-overlapping points (min gap 60 px) whose every nearest neighbour lies beyond
    tau + 10 px, so a tag (within about 8 px of its object) can only reach its own object and
    the injected errors are exactly what the audit should see."""
    while True:
        n = int(rng.integers(10, 41))
        pts: list[np.ndarray] = []
        for _ in range(20 * n):
            q = rng.uniform(40, SIDE - 40, 2)
            if all(np.hypot(*(q - p)) >= 60 for p in pts):
                pts.append(q)
                if len(pts) == n:
                    break
        if len(pts) < n:
            continue
        arr = np.array(pts)
        d = np.hypot(*(arr[:, None, :] - arr[None, :, :]).transpose(2, 0, 1))
        np.fill_diagonal(d, np.inf)
        if d.min() > tau_for(arr) + 10:
            return arr


def _noisy_tags(pts: np.ndarray, rng: np.random.Generator) -> tuple[list[Pt], dict[str, int]]:
    n = len(pts)
    omit = rng.random(n) < P_OMIT
    # Duplicates among tagged objects, at a rate that makes 5 per 100 objects overall.
    dup = ~omit & (rng.random(n) < P_DUP / (1 - P_OMIT))
    tags = pts[~omit] + rng.normal(0, SIGMA, (int((~omit).sum()), 2))
    r = 3 * np.sqrt(rng.random(int(dup.sum())))
    ang = rng.uniform(0, 2 * np.pi, int(dup.sum()))
    dups = pts[dup] + np.stack([r * np.cos(ang), r * np.sin(ang)], 1)
    tau = tau_for(pts)
    phantoms = []
    for _ in range(int(rng.binomial(n, P_PHANTOM))):
        while True:  # far from every object, even at tau x 1.5
            q = rng.uniform(0, SIDE, 2)
            if np.hypot(*(pts - q).T).min() > 2 * tau:
                phantoms.append(q)
                break
    allt = np.concatenate([tags, dups, np.array(phantoms).reshape(-1, 2)])
    allt = allt[rng.permutation(len(allt))]
    truth = {"omission": int(omit.sum()), "duplicate": int(dup.sum()), "phantom": len(phantoms)}
    return [(float(x), float(y)) for x, y in allt], truth


def test_injected_errors_are_recovered(tmp_path: Path) -> None:
    rng = np.random.default_rng(2024)
    n_images = 300
    stims, recs, injected = [], [], []
    for i in range(n_images):
        pts = _layout(rng)
        stims.append(stimulus(f"s{i}", [tuple(p) for p in pts.tolist()]))
        tags, truth = _noisy_tags(pts, rng)
        recs.append(record(f"e{i}", f"s{i}", [tags], answer=len(tags), n=len(pts)))
        injected.append(truth)
    ds = make_dataset(tmp_path / "ds", stims)
    df = audit_episodes(recs, resolve=resolver(ds=ds))
    assert df["audited"].all()
    # Per image, the audit finds exactly what was injected.
    for lab in ("omission", "duplicate", "phantom"):
        assert df[lab].tolist() == [t[lab] for t in injected]
    # Pooled, the per-100 rates come back within sampling error (4 binomial SEs).
    s = summarize(df, n_resamples=100).iloc[0]
    n_obj = int(df["n_true"].sum())
    for lab, p in (("omission", P_OMIT), ("duplicate", P_DUP), ("phantom", P_PHANTOM)):
        se = 100 * math.sqrt(p * (1 - p) / n_obj)
        assert abs(s[f"{lab}_per100"] - 100 * p) < 4 * se, lab
    assert abs(s["on_target_per100"] - 100 * (1 - P_OMIT)) < 4 * 100 * math.sqrt(0.09 / n_obj)
    # Gaussian pointing noise: distances are Rayleigh(sigma) with median sigma * sqrt(2 ln 2).
    expected_pe = SIGMA * math.sqrt(2 * math.log(2)) / SIDE * 1000
    assert s["pointing_error"] == pytest.approx(expected_pe, rel=0.08)
    assert s["cardinality_consistency"] == 1.0
    # Phantoms are placed beyond 2 tau, so they stay phantoms at both tau scales.
    assert s["phantom_per100_t075"] == s["phantom_per100_t150"] == s["phantom_per100"]


# --- logs on disk -------------------------------------------------------------------------------


def _write_log(path: Path, recs: Sequence[EpisodeRecord], corrupt_at: int | None = None) -> None:
    lines = [r.model_dump_json() for r in recs]
    if corrupt_at is not None:
        lines.insert(corrupt_at, '{"episode_id": "broken", "trunc')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_corrupt_log_line_reported_and_rest_loads(tmp_path: Path) -> None:
    pts = [(100.0, 100.0), (300.0, 300.0)]
    ds = make_dataset(tmp_path / "ds", [stimulus("s", pts)])
    recs = [record(f"e{i}", "s", [pts], answer=2, n=2) for i in range(3)]
    log = tmp_path / "run" / "cell" / "episodes.jsonl"
    _write_log(log, recs, corrupt_at=1)  # the bad line is line 2
    errors: list[LogLineError] = []
    with pytest.warns(UserWarning, match=r"episodes\.jsonl:2: skipped invalid log line"):
        df = load_episodes([tmp_path / "run"], resolve=resolver(ds=ds), errors=errors)
    assert sorted(df["episode_id"]) == ["e0", "e1", "e2"]
    assert [(Path(e.file).name, e.line) for e in errors] == [("episodes.jsonl", 2)]


@pytest.mark.slow
def test_write_audit_tables(tmp_path: Path) -> None:
    pts = [(100.0, 100.0), (300.0, 300.0)]
    ds = make_dataset(tmp_path / "ds", [stimulus("s", pts)])
    recs = [
        record(f"e{i}", "s", [pts], answer=2 + (i == 0), n=2, arm=a) for i, a in enumerate("ab")
    ]
    log = tmp_path / "run" / "log.jsonl"
    _write_log(log, recs, corrupt_at=2)
    with pytest.warns(UserWarning, match=r"log\.jsonl:3"):
        # The folder and the file name the same log; it is read once.
        out = write_audit(
            [tmp_path / "run", log], tmp_path / "out", resolve=resolver(ds=ds), n_resamples=50
        )
    assert set(out) == {"episodes", "summary", "log_errors"}
    ep = pd.read_csv(out["episodes"])
    assert tuple(ep.columns[: len(CONTRACT_COLUMNS)]) == CONTRACT_COLUMNS
    assert len(ep) == 2
    sm = pd.read_csv(out["summary"])
    assert sm["arm"].tolist() == ["a", "b"] and sm["em"].tolist() == [0.0, 1.0]
    assert pd.read_csv(out["log_errors"])["line"].tolist() == [3]
    # Records in memory work the same way and need no log file.
    out2 = write_audit(recs, tmp_path / "out2", resolve=resolver(ds=ds), n_resamples=50)
    assert set(out2) == {"episodes", "summary"}
    pd.testing.assert_frame_equal(pd.read_csv(out2["summary"]), sm)


def test_write_audit_without_records_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    with pytest.raises(UserError, match="no valid episode records"):
        write_audit([tmp_path / "run"], tmp_path / "out", resolve=resolver())


def test_default_resolver_reads_a_dataset_folder(tmp_path: Path) -> None:
    # With no resolver, records naming a folder go through countgym.scenes.resolve_dataset.
    root = tmp_path / "ds"
    make_dataset(root, [stimulus("s", [(100.0, 100.0), (300.0, 300.0)])])
    rec = record("e", "s", [[(100.0, 100.0)]], answer=1, n=2, dataset=str(root))
    row = one(audit_episodes([rec]), "e")
    assert (row.on_target, row.omission) == (1, 1)


@pytest.mark.slow
def test_benchmark_script_smoke() -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_audit.py"
    res = subprocess.run(
        [sys.executable, str(script), "20"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    # Measured in a subprocess: the audit's CPU seconds and the process's peak RSS.
    assert out["rows"] == 20 and out["audited"]
    assert out["cpu_s"] > 0 and out["peak_rss_mib"] >= out["base_rss_mib"] > 0
