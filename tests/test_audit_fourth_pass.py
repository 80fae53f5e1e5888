"""The audit's per-record work done once where it can be: arm-derived values once per option
set, stimuli parsed once when the log follows the manifest, the traversal tau's index pairs
once per tag count, the allowed tag-object pairs once per episode. Same results as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import countgym.stimulus as stimulus_mod
from countgym import matching
from countgym.analysis import arms as arms_mod  # noqa: I001 - the analysis package's module
from countgym.analysis import audit_episodes
from countgym.analysis.arms import ArmCells, ArmMemo, arm_labels, option_values, options_key
from countgym.analysis.correlation import kendall_tau_b
from countgym.analysis.order import traversal_tau
from countgym.analysis.stimuli import StimulusCache
from countgym.analysis.traces import condition_row
from countgym.logs import ArmSpec, EpisodeRecord, StepRecord, Truth
from countgym.matching import match_counts, match_tags, tau_for
from countgym.stimulus import Dataset, Stimulus, write_manifest

SIDE = 512


def _stim(i: int) -> Stimulus:
    pts = [(20.0 + 9 * k, 30.0 + 7 * (i % 40)) for k in range(20)]
    return Stimulus(id=f"s{i}", n=20, obj="dots", obj_sing="dot", image=f"s{i}.png", points=pts)


def _record(stim: Stimulus, options: dict, env: dict | None = None, k: int = 0) -> EpisodeRecord:
    tags = [(x + 1.0, y) for x, y in stim.points or []][:18]
    return EpisodeRecord(
        episode_id=f"c{k}/{stim.id}/r0", stimulus_id=stim.id, dataset="ds",
        arm=ArmSpec(name="tag", options=options), model="m", seed=0,
        env_options=env or {},
        image_size=(SIDE, SIDE), stimulus_size=(SIDE, SIDE),
        steps=[StepRecord(index=0, action={"tool": "tag"}, tags_added=tags)],
        tags=tags, answer=18, end="answer", truth=Truth(n=20), countgym_version="t",
        template_hash="h", started_at="", finished_at="",
    )  # fmt: skip


# Option sets that JSON tells apart but Python's == (and hash) would not: 1, 1.0 and True;
# a key order; a list and a string of tools.
OPTION_SETS = [
    {"tools": ["tag"], "budget": 3},
    {"budget": 3, "tools": ["tag"]},
    {"tools": ["tag"], "budget": 3.0},
    {"tools": ["tag"], "budget": True},
    {"tools": "tag grid", "budget": 1},
    {"tools": ["tag", "grid"], "budget": 1, "order": "reverse"},
    {"tools": ["tag"], "budget": 3, "provider": "x"},
]


def test_arm_memo_gives_the_unmemoised_values() -> None:
    recs = [_record(_stim(i), dict(OPTION_SETS[i % len(OPTION_SETS)]), k=i) for i in range(40)]
    recs.append(_record(_stim(0), {"tools": ["tag"]}, env={"task": "image", "budget": 2}, k=99))
    memo = ArmMemo()
    for rec in recs:
        for _ in range(2):  # the first time computes, the second remembers
            assert memo.option_values(rec) == option_values(rec)
            for ignore in ((), ("order",), ("perturb",)):
                assert memo.options_key(rec, ignore) == options_key(rec, ignore)
    # Labels through the memo equal labels of a fresh computation per record.
    plain = ArmCells(ArmMemo())
    plain._memo.cell = lambda rec: _fresh_cell(rec)  # type: ignore[method-assign]
    numbers = [plain.add(r) for r in recs]
    want = [plain.labels()[c] for c in numbers]
    assert arm_labels(recs) == want
    assert len(set(want)) > 3


def _fresh_cell(rec: EpisodeRecord) -> tuple:
    task = arms_mod.task_name(rec)
    opts = arms_mod._normalised(rec.arm.options, task)
    ref = arms_mod.reference_options(rec)
    return task, opts, ref, f"{rec.arm.name}|{arms_mod._canonical(opts)}|{arms_mod._canonical(ref)}"


def test_a_returned_option_dict_is_the_callers(monkeypatch: pytest.MonkeyPatch) -> None:
    memo = ArmMemo()
    rec = _record(_stim(0), {"tools": ["tag"], "budget": 3})
    memo.option_values(rec)["budget"] = 99
    assert memo.option_values(rec)["budget"] == 3


def test_options_json_is_written_once_per_option_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit of 60 records of 2 option sets writes each set's canonical JSON a few times,
    not several times per record (as it did: two per record for the arm cell, two more for
    the conditions table's option keys)."""
    stims = [_stim(i) for i in range(30)]
    write_manifest(tmp_path / "ds", stims)
    ds = Dataset(tmp_path / "ds")
    recs = [_record(s, {"tools": ["tag"], "budget": b}, k=b) for b in (3, 4) for s in stims]
    calls = {"n": 0}
    real = arms_mod._canonical

    def counted(*a: object, **kw: object) -> str:
        calls["n"] += 1
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(arms_mod, "_canonical", counted)
    df = audit_episodes(recs, resolve=lambda name: ds)
    assert calls["n"] <= 2 * 2, calls
    assert sorted(set(df["arm"])) == ["tag[budget=3]", "tag[budget=4]"]
    assert list(df["budget"]) == [3] * 30 + [4] * 30
    cache = StimulusCache(lambda name: ds)
    calls["n"] = 0
    memo = ArmMemo()
    rows = [condition_row(r, cache, memo=memo) for r in recs]
    assert calls["n"] <= 2 * 2, calls
    assert rows == [condition_row(r, cache) for r in recs]


def test_stimuli_read_in_manifest_order_are_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a dataset keeps its first stimuli parsed (the log usually asks for them first):
    with room for 4 of 10, reading all 10 in order parses 6 again (it parsed all 10 again when
    the last 4 were kept, those being evicted before they were asked for)."""
    stims = [_stim(i) for i in range(10)]
    write_manifest(tmp_path / "ds", stims)
    monkeypatch.setattr(stimulus_mod, "STIMULUS_CACHE_SIZE", 4)
    ds = Dataset(tmp_path / "ds")
    parsed = {"n": 0}
    real = stimulus_mod._fast_parse

    def counted(line: str | bytes) -> Stimulus | None:
        parsed["n"] += 1
        return real(line)

    monkeypatch.setattr(stimulus_mod, "_fast_parse", counted)
    assert [ds[f"s{i}"] for i in range(10)] == stims
    assert parsed["n"] == 6
    assert [ds[f"s{i}"] for i in (9, 8, 7, 6)] == stims[9:5:-1] and parsed["n"] == 6


@pytest.mark.parametrize("n", [5, 6, 50, 255, 256, 257, 400])
def test_traversal_tau_equals_kendall_tau_b(n: int) -> None:
    rng = np.random.default_rng(n)
    for ties in (False, True):
        y = rng.integers(0, 8, n).astype(float) if ties else rng.uniform(0, 500, n)
        tags = np.column_stack([rng.uniform(0, 500, n), y])
        want = kendall_tau_b(np.arange(n), y)
        assert traversal_tau(tags) == pytest.approx(want, abs=1e-12)
    flat = np.column_stack([np.arange(n, dtype=float), np.full(n, 7.0)])
    assert np.isnan(traversal_tau(flat))


def test_match_counts_with_unordered_and_equal_taus() -> None:
    """The allowed pairs are taken once at the largest tau and filtered for the others: taus
    in any order, repeated, or NaN give what ``match_tags`` gives at each."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        p = rng.uniform(0, 200, (int(rng.integers(1, 30)), 2))
        t = np.concatenate([p[: len(p) // 2] + rng.normal(0, 5, (len(p) // 2, 2)), rng.uniform(0, 200, (5, 2))])
        tau = tau_for(p)
        taus = [tau * 1.5, tau, tau * 0.75, tau, float("nan")]
        for tt, c in zip(taus, match_counts(t, p, taus), strict=True):
            m = match_tags(t, p, tau=tt)
            assert (c.on_target, c.duplicate, c.phantom, c.omission) == (m.on_target, m.duplicate, m.phantom, m.omission)
    assert match_counts(np.zeros((0, 2)), np.ones((3, 2)), [1.0]) == [matching.MatchCounts(0, 0, 0, 3, ())]
    assert match_counts(np.ones((2, 2)), np.ones((3, 2)), []) == []


def test_the_solver_is_scipys_and_matching_imports_no_scipy_optimize() -> None:
    """The assignment comes from SciPy's own compiled solver, loaded without importing the
    whole of ``scipy.optimize`` (0.4 s of CPU an audit paid for one function)."""
    from scipy.optimize import linear_sum_assignment

    solver = matching._solver()
    assert solver is linear_sum_assignment or solver.__name__ == "linear_sum_assignment"
    sub = np.array([[4.0, 1.0, 3.0], [2.0, 0.0, 5.0], [3.0, 2.0, 2.0]])
    assert all((a == b).all() for a, b in zip(solver(sub), linear_sum_assignment(sub), strict=True))


@pytest.mark.slow
def test_matching_in_a_fresh_process_leaves_scipy_optimize_unimported() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from countgym.analysis import audit_tags\n"
        "a = audit_tags([(0, 0), (1, 0), (9, 9), (50, 50)], [(0, 0), (2, 0), (10, 10)], tau=5.0)\n"
        "print(a.on_target, a.duplicate, a.phantom, a.omission, 'scipy.optimize' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["3", "0", "1", "0", "False"]  # (1, 0) takes the object at (2, 0)


@pytest.mark.slow
def test_importing_the_agents_leaves_the_blob_detectors_scipy_unimported() -> None:
    """``countgym audit`` imports the agents for their audit hooks; the blob detector's
    ``scipy.ndimage`` (0.2 s of CPU) loads only when something detects blobs."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np; import countgym.agents, countgym.agents.blobs as b\n"
        "before = 'scipy.ndimage' in sys.modules\n"
        "img = np.full((40, 40, 3), 255, np.uint8); img[5:12, 5:12] = 0; img[25:32, 25:32] = 0\n"
        "print(before, len(b.detect_blobs(img)), 'scipy.ndimage' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "2", "True"]


def test_the_audit_runs_with_fewer_collections_and_restores_the_collector(tmp_path: Path) -> None:
    """While ``write_audit_files`` runs, the objects alive before it are frozen and young
    collections come every ``YOUNG_THRESHOLD`` allocations; after, the collector is as it was."""
    import gc

    from countgym.analysis import bundle, write_audit_files

    stims = [_stim(i) for i in range(6)]
    write_manifest(tmp_path / "ds", stims)
    ds = Dataset(tmp_path / "ds")
    seen: list[tuple[int, int]] = []

    def resolve(name: str) -> Dataset:
        seen.append((gc.get_freeze_count(), gc.get_threshold()[0]))
        return ds

    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    write_audit_files([_record(s, {"tools": ["tag"]}) for s in stims], tmp_path / "audit", resolve=resolve, report=False)
    assert seen and all(n > 1000 and t == bundle.YOUNG_THRESHOLD for n, t in seen)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
