"""The audit's fast paths give today's results, and the audit streams its logs.

The matcher is checked against the plain formulation of Give the Model a Finger, Section 4 and
Appendix E (one minimum-cost assignment over every tag and object, pairs farther than tau
forbidden), kept here as the reference; tau against the k-d tree nearest-neighbour formula.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.spatial import cKDTree

from countgym import matching
from countgym.analysis import audit_episodes, audit_tags, load_episodes
from countgym.logs import ArmSpec, EpisodeRecord, StepRecord, Truth
from countgym.matching import DENSE_MAX_POINTS, match_counts, match_tags, median_of, tau_for
from countgym.stimulus import Dataset, Stimulus, write_manifest

# --- the reference matcher ------------------------------------------------------------------------


def reference_tau(points: np.ndarray) -> float:
    if len(points) < 2:
        return 15.0
    d, _ = cKDTree(points).query(points, k=2)
    return max(15.0, 0.5 * float(np.median(d[:, 1])))


def reference_match(tags: np.ndarray, points: np.ndarray, tau: float) -> tuple[list[int], list[str]]:
    """Object per tag (-1 unmatched) and labels, from one global assignment."""
    n_t, n_p = len(tags), len(points)
    if n_t == 0 or n_p == 0:
        return [-1] * n_t, ["phantom"] * n_t
    d = np.sqrt(((tags[:, None, :] - points[None, :, :]) ** 2).sum(-1))
    allowed = d <= tau
    near = allowed.any(1)
    tag_obj = [-1] * n_t
    rows, cols = np.flatnonzero(near), np.flatnonzero(allowed.any(0))
    if len(rows):
        sub = np.where(allowed[np.ix_(rows, cols)], d[np.ix_(rows, cols)], 1e12)
        for r, c in zip(*linear_sum_assignment(sub), strict=True):
            if sub[r, c] < 1e12:
                tag_obj[rows[r]] = int(cols[c])
    labels = ["on_target" if o >= 0 else "duplicate" if near[i] else "phantom" for i, o in enumerate(tag_obj)]
    return tag_obj, labels


def _case(rng: np.random.Generator, kind: int) -> tuple[np.ndarray, np.ndarray]:
    n, m = int(rng.integers(0, 40)), int(rng.integers(0, 60))
    if kind == 0:  # noisy pointer: mostly isolated pairs, a few duplicates and phantoms
        p = rng.uniform(0, 500, (n, 2))
        k = min(m // 2, n)
        t = np.concatenate([p[:k] + rng.normal(0, 4, (k, 2)), rng.uniform(0, 500, (m - k, 2))])
    elif kind == 1:  # crowded clusters: large contested components
        c = rng.uniform(0, 100, (3, 2))
        p = c[rng.integers(0, 3, n)] + rng.normal(0, 8, (n, 2))
        t = c[rng.integers(0, 3, m)] + rng.normal(0, 8, (m, 2))
    else:  # integer pixels on a lattice: exact ties in distance
        p = rng.integers(0, 10, (n, 2)).astype(float) * 10
        t = rng.integers(0, 10, (m, 2)).astype(float) * 10 + rng.integers(-3, 4, (m, 2))
    return t.reshape(-1, 2), p.reshape(-1, 2)


@pytest.mark.parametrize("kind", [0, 1, 2])
def test_matcher_equals_the_global_assignment(kind: int) -> None:
    rng = np.random.default_rng(kind)
    for _ in range(300):
        t, p = _case(rng, kind)
        tau = tau_for(p)
        assert tau == reference_tau(p)
        taus = [tau, tau * 0.75, tau * 1.5]
        counts = match_counts(t, p, taus)
        for i, tt in enumerate(taus):
            obj, labels = reference_match(t, p, tt)
            m = match_tags(t, p, tau=tt)
            # match_tags is the global assignment itself, ties included.
            assert list(m.tag_object) == obj and list(m.tag_label) == labels
            c = counts[i]
            want = (labels.count("on_target"), labels.count("duplicate"), labels.count("phantom"))
            assert (c.on_target, c.duplicate, c.phantom) == want
            assert c.omission == len(p) - want[0]
            if i == 0:  # the audit's own tau: the same pairs, hence the same pointing error
                assert c.distances == m.distances


def test_match_counts_known_answer() -> None:
    # Objects A(0,0), B(100,0), C(300,0), D(600,0); tau = 20.
    # Tag 0 sits alone on A (an isolated pair); tags 1 and 2 both reach B (one on-target, one
    # duplicate); tag 3 reaches C only; tag 4 is 50 px from everything (phantom); D is omitted.
    p = np.array([[0, 0], [100, 0], [300, 0], [600, 0]], dtype=float)
    t = np.array([[3, 4], [100, 6], [101, 0], [288, 0], [450, 0]], dtype=float)
    full, tight = match_counts(t, p, [20.0, 5.5])
    assert (full.on_target, full.duplicate, full.phantom, full.omission) == (3, 1, 1, 1)
    assert full.distances == (5.0, 1.0, 12.0)  # tag order: 0 -> A, 2 -> B (closer), 3 -> C
    # At 5.5 px only tags 0 (5 px), 2 (1 px) reach an object; tag 1 (6 px) is a phantom now.
    assert (tight.on_target, tight.duplicate, tight.phantom, tight.omission) == (2, 0, 3, 2)
    m = match_tags(t, p, tau=20.0)
    assert m.tag_label == ("on_target", "duplicate", "on_target", "on_target", "phantom")
    assert m.tag_object == (0, -1, 1, 2, -1) and m.omitted == (3,)


def test_tau_beyond_the_dense_limit_and_with_coincident_points() -> None:
    rng = np.random.default_rng(5)
    big = rng.uniform(0, 5000, (DENSE_MAX_POINTS + 7, 2))
    assert tau_for(big) == reference_tau(big)
    twins = np.array([[10.0, 10.0], [10.0, 10.0], [400.0, 10.0]])
    assert tau_for(twins) == reference_tau(twins) == 15.0


@pytest.mark.parametrize("n", [1, 2, 3, 8, 51])
def test_median_of_equals_numpy(n: int) -> None:
    v = np.random.default_rng(n).uniform(0, 100, n).tolist()
    assert median_of(v) == float(np.median(v))


def test_audit_tags_pointing_error_from_the_exact_pairs() -> None:
    p = np.array([[0, 0], [100, 0], [300, 0], [600, 0]], dtype=float)
    t = np.array([[3, 4], [100, 6], [101, 0], [288, 0], [450, 0]], dtype=float)
    a = audit_tags(t, p, shorter_side=1000.0, tau=20.0)
    assert a.pointing_error == 5.0  # median of 5, 1, 12 px, per thousand of 1000 px
    sens = dict(a.sensitivity)
    assert sens[0.75] == (3, 1, 1, 1)  # tau 15: tag 3 (12 px) still on C, tag 1 (6 px) near B
    assert sens[1.5] == (3, 1, 1, 1)  # tau 30: tag 4 is 150 px from C, still a phantom


# --- streaming ------------------------------------------------------------------------------------

SIDE = 768


def _stim(i: int) -> Stimulus:
    pts = [(20.0 + 14 * k, 30.0 + 9 * (i % 50)) for k in range(50)]
    return Stimulus(id=f"s{i}", n=50, obj="dots", obj_sing="dot", image=f"s{i}.png", points=pts)


def _record(stim: Stimulus, reply: str = "") -> EpisodeRecord:
    tags = [(x + 1.0, y) for x, y in stim.points or []][:45]
    return EpisodeRecord(
        episode_id=f"c/{stim.id}/r0", stimulus_id=stim.id, dataset="ds",
        arm=ArmSpec(name="tag", options={"tools": ["tag"]}), model="m", seed=0,
        image_size=(SIDE, SIDE), stimulus_size=(SIDE, SIDE),
        steps=[StepRecord(index=0, reply=reply, action={"tool": "tag"}, tags_added=tags)],
        tags=tags, answer=45, end="answer", truth=Truth(n=50), countgym_version="t",
        template_hash="h", started_at="", finished_at="",
    )  # fmt: skip


class _Counted(EpisodeRecord):
    """An episode record that counts its living instances."""

    alive: ClassVar[int] = 0

    def __init__(self, **data: object) -> None:
        super().__init__(**data)
        type(self).alive += 1

    def __del__(self) -> None:
        type(self).alive -= 1


def test_audit_holds_no_records(tmp_path: Path) -> None:
    """``audit_episodes`` over an iterator keeps no record once its row is made: when the
    iterator makes the next record, at most the previous one is still alive."""
    n = 300
    stims = [_stim(i) for i in range(n)]
    write_manifest(tmp_path / "ds", stims)
    ds = Dataset(tmp_path / "ds")
    most_alive = 0

    def records() -> Iterator[EpisodeRecord]:
        nonlocal most_alive
        for s in stims:
            most_alive = max(most_alive, _Counted.alive)
            yield _Counted.model_validate(_record(s).model_dump())

    df = audit_episodes(records(), resolve=lambda name: ds)
    assert len(df) == n and df["audited"].all() and (df["on_target"] == 45).all()
    assert most_alive <= 1


def test_points_array_is_numpys_array_of_the_pairs() -> None:
    from countgym.analysis.audit import points_array

    pts = [(1.5, 2.25), (1e-300, -3.0), (0.1, 0.2), (767.9999999999999, 1e308)]
    got = points_array(pts)
    assert got.dtype == np.float64 and got.shape == (4, 2)
    assert np.array_equal(got, np.asarray(pts, dtype=float))
    assert points_array([]).shape == (0, 2)
    assert np.array_equal(points_array(np.array(pts)), got)
    with pytest.raises(ValueError):
        points_array([(1.0, 2.0, 3.0)])  # not pairs: numpy's own error
    with pytest.raises(ValueError):
        points_array([("a", 1.0)])


def test_the_audit_leaves_no_reference_cycles_per_record(tmp_path: Path) -> None:
    """Each record's matching is freed when its row is made, with no reference cycle left for
    the garbage collector (a recursive closure in the matcher left about 40 objects per
    record): the garbage of 60 records with duplicate tags is that of 10."""
    stims = [_stim(i) for i in range(60)]
    write_manifest(tmp_path / "ds", stims)
    ds = Dataset(tmp_path / "ds")

    def doubled(stim: Stimulus) -> EpisodeRecord:
        rec = _record(stim)
        tags = [*rec.tags, *((x + 0.5, y) for x, y in rec.tags[:20])]  # 20 duplicates
        return rec.model_copy(update={"tags": tags})

    def garbage(k: int) -> int:
        records = [doubled(s) for s in stims[:k]]
        gc.collect()
        gc.disable()
        try:
            df = audit_episodes(records, resolve=lambda name: ds)
            assert (df["duplicate"] > 0).all()
            return gc.collect()
        finally:
            gc.enable()

    # The objects alive now (the test session's modules and fixtures) are moved out of the
    # collector's way, so each collection below walks only what the audits made.
    gc.collect()
    gc.freeze()
    try:
        garbage(10)  # warm caches (imports, memoised pairs) first
        assert garbage(60) - garbage(10) < 25
    finally:
        gc.unfreeze()


@pytest.mark.slow
def test_load_episodes_memory_does_not_grow_with_the_log(tmp_path: Path) -> None:
    """A log of 600 episodes with 40 KB replies (24 MB of text) audits in a few MB: the
    records stream through instead of being held."""
    n = 600
    stims = [_stim(i) for i in range(n)]
    write_manifest(tmp_path / "ds", stims)
    ds = Dataset(tmp_path / "ds")
    log = tmp_path / "log.jsonl"
    reply = "x" * 40_000
    with log.open("w", encoding="utf-8") as f:
        for s in stims:
            f.write(_record(s, reply).model_dump_json() + "\n")
    tracemalloc.start()
    try:
        df = load_episodes([log], resolve=lambda name: ds)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(df) == n and df["audited"].all()
    assert peak < 8_000_000, f"peak {peak / 1e6:.1f} MB while auditing {n * len(reply) / 1e6:.0f} MB of replies"


def test_streamed_and_listed_records_give_the_same_table(tmp_path: Path) -> None:
    stims = [_stim(i) for i in range(40)]
    write_manifest(tmp_path / "ds", stims)
    ds = Dataset(tmp_path / "ds")
    recs = [_record(s) for s in stims] + [_record(stims[0])]  # one duplicate id
    with pytest.warns(UserWarning, match="1 duplicate episode ids"):
        listed = audit_episodes(recs, resolve=lambda name: ds)
    with pytest.warns(UserWarning, match="1 duplicate episode ids"):
        streamed = audit_episodes(iter(recs), resolve=lambda name: ds)
    assert listed.to_csv() == streamed.to_csv()
    assert json.loads(listed.iloc[0].to_json())["on_target"] == 45


def test_ground_truth_cache_eviction_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Images come back after leaving the bounded ground-truth cache: same rows."""
    from countgym.analysis import audit as audit_mod

    stims = [_stim(i) for i in range(6)]
    write_manifest(tmp_path / "ds", stims)
    ds = Dataset(tmp_path / "ds")
    recs = [
        _record(s).model_copy(update={"episode_id": f"c/{s.id}/r{r}", "repeat": r})
        for r in range(3) for s in stims
    ]  # fmt: skip
    full = audit_episodes(recs, resolve=lambda name: ds)
    monkeypatch.setattr(audit_mod, "GT_CACHE_SIZE", 2)
    assert audit_episodes(recs, resolve=lambda name: ds).to_csv() == full.to_csv()


@pytest.mark.parametrize("limit", [0, 10**9])
def test_sensitivity_counts_by_python_matching_and_by_the_solver_agree(monkeypatch, limit: int) -> None:
    # The sensitivity counts come from a maximum matching in Python up to SMALL_SHARED_EDGES
    # contested pairs, from the solver above it: both must equal the global assignment's counts,
    # on crowded clusters and integer ties alike.
    monkeypatch.setattr(matching, "SMALL_SHARED_EDGES", limit)
    for kind in (1, 2):
        rng = np.random.default_rng(100 + kind)
        for _ in range(150):
            t, p = _case(rng, kind)
            tau = tau_for(p)
            for tt, c in zip([tau * 0.75, tau * 1.5], match_counts(t, p, [tau, tau * 0.75, tau * 1.5])[1:], strict=True):
                _, labels = reference_match(t, p, tt)
                want = (labels.count("on_target"), labels.count("duplicate"), labels.count("phantom"))
                assert (c.on_target, c.duplicate, c.phantom, c.omission) == (*want, len(p) - want[0])
