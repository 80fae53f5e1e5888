"""A limit K in the evaluation frameworks (``vf-eval -n K``, ``--env.taskset.limit K``,
lmms-eval's ``--limit K`` and the lmms task writer's ``--limit K``) picks the stratified K of
``countgym run --limit K`` (``countgym.cells.limited_ids``), not the first K in manifest order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from countgym.cells import limited_ids
from countgym.integrations import lmms_tasks, selection
from countgym.scenes import resolve_dataset
from countgym.stimulus import Dataset, Stimulus, write_manifest

COMMON = "dotarrays:common"


@pytest.fixture(scope="module")
def common() -> Dataset:
    return resolve_dataset(COMMON)


@pytest.fixture(scope="module")
def by_count(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """24 small images, three at each count 1..8, the manifest sorted by count."""
    from PIL import Image, ImageDraw

    root = tmp_path_factory.mktemp("bycount")
    (root / "images").mkdir()
    stims = []
    for i in range(24):
        n = 1 + i // 3
        im = Image.new("RGB", (96, 96), "white")
        for j in range(n):
            x, y = 8 + (j % 4) * 22, 8 + (j // 4) * 22
            ImageDraw.Draw(im).ellipse([x, y, x + 10, y + 10], fill="black")
        im.save(root / "images" / f"c{i:02d}.png")
        stims.append(Stimulus(id=f"c{i:02d}", n=n, obj="dots", obj_sing="dot", image=f"images/c{i:02d}.png"))
    write_manifest(root, stims)
    return Dataset(root)


def _counts(ds: Dataset, ids: list[str]) -> set[int]:
    return {ds[i].n for i in ids}


def test_the_first_rows_cover_the_range_of_counts(common) -> None:
    order = selection.stratified_order(common.stimuli)
    assert sorted(order) == sorted(common.ids())  # every stimulus once
    assert _counts(common, common.ids()[:6]) == {1, 2}  # what first-K-in-manifest-order gave
    first = _counts(common, order[:6])
    assert len(first) == 6 and max(first) >= 25 and min(first) <= 5


@pytest.mark.parametrize("k", [1, 6, 11, 25])
def test_a_limit_is_limited_ids(common, k) -> None:
    got = selection.limited(common.stimuli, k)
    assert sorted(got) == sorted(limited_ids(common.stimuli, k))
    assert got == [i for i in selection.stratified_order(common.stimuli) if i in set(got)]
    assert selection.limited(common.stimuli, None) == selection.stratified_order(common.stimuli)


def test_the_first_k_rows_are_countgym_runs_selection_for_every_k(common) -> None:
    # Selections nest, so the first K rows are exactly `countgym run --limit K`'s stimuli, for
    # every K: `-n K` and `--limit K` agree.
    from countgym.cells import limited_ids

    stims = list(common.stimuli)
    order = selection.stratified_order(stims)
    assert sorted(order) == sorted(s.id for s in stims)
    for k in range(1, len(stims) + 1):
        assert set(order[:k]) == set(limited_ids(stims, k)), k


def test_the_function_is_countgym_runs_own() -> None:
    import countgym.cells

    assert selection.limited_ids is countgym.cells.limited_ids


def test_a_negative_limit_is_a_user_error(common) -> None:
    from countgym.errors import UserError

    with pytest.raises(UserError, match="non-negative"):
        selection.limited(common.stimuli, -1)


# --------------------------------------------------------------------------------- verifiers
def _vf_ids(env: Any, n: int | None = None) -> list[str]:
    """The stimulus ids of the first ``n`` rows (``vf-eval -n``) of a verifiers env."""
    from countgym.integrations import verifiers as cv

    if cv.API == "v1":
        tasks = list(env.taskset.take(n) if n else env.taskset)
        return [t.data.stimulus_id for t in tasks]
    rows = env.get_eval_dataset(n=n or -1)
    return [r["info"]["stimulus_id"] for r in rows]


def test_vf_eval_n_and_the_taskset_limit_are_stratified(common) -> None:
    pytest.importorskip("verifiers")
    pytest.importorskip("datasets")
    from countgym.integrations.verifiers import load_environment

    env = load_environment(COMMON, arm="tag")
    assert _vf_ids(env) == selection.stratified_order(common.stimuli)
    first = _vf_ids(env, 6)
    assert len(_counts(common, first)) == 6 and _counts(common, first) != {1, 2}
    limited_env = load_environment(COMMON, arm="tag", limit=6)  # --env.taskset.limit 6
    assert sorted(_vf_ids(limited_env)) == sorted(limited_ids(common.stimuli, 6))


# --------------------------------------------------------------------------------- lmms-eval
def test_lmms_documents_come_in_stratified_order(by_count, tmp_path) -> None:
    root = str(by_count.root)
    assert lmms_tasks.main(["--out", str(tmp_path / "all"), "--dotarrays", root]) == 0
    docs = [json.loads(x) for x in (tmp_path / "all" / "data" / "countgym_dotarrays_direct.jsonl").read_text().splitlines()]
    ids = [d["stimulus_id"] for d in docs]
    assert ids == selection.stratified_order(by_count.stimuli)  # lmms-eval's --limit K: the first K
    assert _counts(by_count, by_count.ids()[:6]) == {1, 2}
    assert len(_counts(by_count, ids[:6])) == 6

    assert lmms_tasks.main(["--out", str(tmp_path / "six"), "--dotarrays", root, "--limit", "6"]) == 0
    six = [json.loads(x)["stimulus_id"] for x in (tmp_path / "six" / "data" / "countgym_dotarrays_direct.jsonl").read_text().splitlines()]
    assert sorted(six) == sorted(limited_ids(by_count.stimuli, 6))


def test_lmms_limit_on_pairs_keeps_whole_pairs(tiny_countercount: Path, tmp_path) -> None:
    ds = Dataset(tiny_countercount)
    docs = lmms_tasks.documents("countgym/CounterCount-v0", "cf-mcq", str(tiny_countercount), limit=1)
    assert sorted(d["stimulus_id"] for d in docs) == sorted(limited_ids(ds.stimuli, 1))
    assert len({ds[d["stimulus_id"]].meta["pair_id"] for d in docs}) == 1 and len(docs) == 2


def test_lmms_negative_limit_is_one_line(by_count, capsys, tmp_path) -> None:
    assert lmms_tasks.main(["--out", str(tmp_path), "--dotarrays", str(by_count.root), "--limit", "-2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "non-negative" in err

