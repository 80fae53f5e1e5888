"""``--limit K`` is stratified by true count; cell ids name a dataset folder by its name."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from countgym.cells import dataset_label, limited_ids, make_cell
from countgym.cli import main
from countgym.logs import read_records
from countgym.stimulus import Stimulus


def _stims(levels: dict[int, int], pairs: bool = False) -> list[Stimulus]:
    out = []
    for n, k in levels.items():
        for j in range(k):
            out.append(Stimulus(id=f"n{n}-{j}", n=n, obj="dots", obj_sing="dot", meta={}))
    return out


def test_limit_takes_every_level_its_share_spread_within_the_level() -> None:
    stims = _stims({1: 3, 2: 3, 3: 3, 4: 3})
    # one per level, the middle of each level's three, the levels in a spread order (middle first)
    assert limited_ids(stims, 4) == ["n3-1", "n1-1", "n4-1", "n2-1"]
    # 2 of 4 levels: two apart; then the levels' first and last of three
    assert limited_ids(stims, 2) == ["n3-1", "n1-1"]
    assert limited_ids(stims, 8) == ["n3-1", "n1-1", "n4-1", "n2-1", "n3-0", "n1-0", "n4-0", "n2-0"]
    assert limited_ids(stims, None) == [s.id for s in stims]
    assert sorted(limited_ids(stims, 99)) == sorted(s.id for s in stims)


def test_limits_nest() -> None:
    stims = _stims({n: 7 for n in range(1, 14)}) + _stims({20: 2})
    whole = limited_ids(stims, len(stims))
    assert sorted(whole) == sorted(s.id for s in stims)
    for k in range(1, len(stims) + 1):
        got = limited_ids(stims, k)
        assert got == whole[:k]  # a limit is a prefix of one fixed order
        sizes = [7] * 13 + [2]
        per_level = [sum(i.startswith(f"n{n}-") for i in got) for n in [*range(1, 14), 20]]
        # the levels share k equally (within one); a level that has given all it has drops out
        open_levels = [p for p, c in zip(per_level, sizes, strict=True) if p < c]
        assert not open_levels or max(per_level) - min(open_levels) <= 1, (k, per_level)


def test_a_short_level_gives_all_it_has_and_the_rest_is_shared_again() -> None:
    stims = _stims({1: 1, 2: 6, 3: 6})
    got = limited_ids(stims, 7)
    assert len(got) == 7 and "n1-0" in got
    assert sum(i.startswith("n2") for i in got) == 3 and sum(i.startswith("n3") for i in got) == 3
    assert got == limited_ids(list(stims), 7)  # deterministic


def test_pairs_stay_whole(tiny_countercount: Path) -> None:
    from countgym.stimulus import Dataset

    ds = Dataset(tiny_countercount)
    got = limited_ids(ds.stimuli, 1)
    assert len(got) == 2 and got[0].rsplit("-", 1)[0] == got[1].rsplit("-", 1)[0]


def test_run_limit_is_stratified_by_count(tiny_dataset, tmp_path: Path) -> None:
    # the tiny set has n = 4 ("four"), 2 ("two"), 10 ("row") in manifest order; the stratified
    # order takes the middle count first, then the lowest, then the highest.
    out = tmp_path / "runs"
    assert main(["run", "--data", str(tiny_dataset.root), "--agent", "oracle", "--limit", "1", "--out", str(out),
                 "--no-progress"]) == 0
    (log,) = out.glob("*.jsonl")
    assert [r.stimulus_id for r in read_records([log])] == ["four"]
    assert limited_ids(tiny_dataset.stimuli, 3) == ["four", "two", "row"]


def test_limit_on_countvideo_builds_only_a_balanced_subset() -> None:
    # The environment's default is already the 26-video set: nothing to narrow, nothing said.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cell = make_cell(agent="video-p1", env="countgym/CountVideo-v0", model="openai/m", limit=2)
    assert cell.dataset == "countvideo:k1" and cell.env_id() == "countgym/CountVideo-v0"
    assert not [w for w in caught if "countvideo" in str(w.message)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cell = make_cell(agent="video-p1", dataset="countvideo", model="openai/m", limit=2)
    assert cell.dataset == "countvideo:k1" and cell.env_id() == "countgym/CountVideo-v0"
    assert any("countvideo:k1" in str(w.message) and "not from all of countvideo" in str(w.message)
               for w in caught)
    assert make_cell(agent="video-p1", dataset="countvideo", model="openai/m", limit=60).dataset == "countvideo:k3"
    assert make_cell(agent="video-p1", dataset="countvideo", model="openai/m").dataset == "countvideo"


@pytest.mark.parametrize(("given", "label"), [
    ("/tmp/u/cc", "cc"), ("/tmp/u/cc/", "cc"), ("/tmp/u/cc:common", "cc:common"),
    ("/tmp/u/cc:ablation+rot180", "cc:ablation+rot180"), ("dotarrays:common", "dotarrays:common"),
    ("countvideo:k1", "countvideo:k1"), ("fsc147:ablation+mirror", "fsc147:ablation+mirror"),
])
def test_dataset_label(given: str, label: str) -> None:
    assert dataset_label(given) == label


def test_cell_ids_name_a_folder_by_its_name(tiny_dataset, tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "u" / "mydots"
    shutil.copytree(tiny_dataset.root, data)
    out = tmp_path / "runs"
    assert main(["run", "--data", str(data), "--agent", "oracle", "--out", str(out), "--no-progress"]) == 0
    (log,) = out.glob("*.jsonl")
    assert log.name.startswith("mydots__oracle__oracle__"), log.name
    assert str(tmp_path.name) not in log.name and "tmp" not in log.name
    # A relative path names the same cell, and the log records the folder absolutely.
    monkeypatch.chdir(data.parent)
    assert main(["run", "--data", "mydots", "--agent", "oracle", "--out", str(out), "--no-progress"]) == 0
    assert [p.name for p in out.glob("*.jsonl")] == [log.name]
    assert {r.dataset for r in read_records([log])} == {str(data)}
    # Another folder of the same name is another cell.
    other = tmp_path / "v" / "mydots"
    shutil.copytree(tiny_dataset.root, other)
    assert main(["run", "--data", str(other), "--agent", "oracle", "--out", str(out), "--no-progress"]) == 0
    names = sorted(p.name for p in out.glob("*.jsonl"))
    assert len(names) == 2 and all(n.startswith("mydots__") for n in names)


def test_dry_run_cell_ids_use_the_folder_name(tiny_dataset, tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'datasets = ["{tiny_dataset.root}"]\narms = ["oracle"]\nout = "{tmp_path / "r"}"\n')
    assert main(["sweep", str(cfg), "--dry-run"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{tiny_dataset.root.name}__oracle__oracle__")
