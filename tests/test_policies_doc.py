"""Every example policy of docs/policies.md runs, as written, through `countgym run` on its
environment, and the audit shows its own answers."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pytest

from countgym.cli import main
from countgym.logs import read_records

DOC = Path(__file__).resolve().parent.parent / "docs" / "policies.md"
EXAMPLE = re.compile(r"^### .*?\(`(countgym/[\w-]+)`\)\n\n```python\n(.*?)^```", re.S | re.M)


def _examples() -> dict[str, str]:
    return dict(EXAMPLE.findall(DOC.read_text()))


def test_the_doc_has_one_example_per_task() -> None:
    assert set(_examples()) == {"countgym/DotArrays-v0", "countgym/CounterCount-v0", "countgym/CountVideo-v0"}


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["countgym/DotArrays-v0", "countgym/CounterCount-v0", "countgym/CountVideo-v0"])
def test_example_policy_runs_and_is_audited(
    env_id: str, tiny_dataset, tiny_countercount: Path, tiny_countvideo: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code = _examples()[env_id]
    module = f"doc_policy_{env_id.split('/')[1].split('-')[0].lower()}"
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = re.search(r"^class (\w+)", code, re.M).group(1)  # type: ignore[union-attr]
    data = {"countgym/DotArrays-v0": tiny_dataset.root, "countgym/CounterCount-v0": tiny_countercount,
            "countgym/CountVideo-v0": tiny_countvideo}[env_id]
    runs, audit = tmp_path / "runs", tmp_path / "audit"
    agent = f"{module}:{cls}"
    assert main(["run", "--env", env_id, "--data", str(data), "--agent", agent, "--out", str(runs), "--no-progress"]) == 0
    recs = read_records([runs])
    assert recs and all(r.end == "answer" and r.error is None for r in recs)
    if env_id == "countgym/DotArrays-v0":
        # Black discs on white: the blob tagger finds each one, so its answers are the truth.
        assert all(r.answer == r.truth.n and len(r.tags) == r.truth.n for r in recs)
    if env_id == "countgym/CounterCount-v0":
        canonical = sys.modules[module].CANONICAL
        assert all(r.answer == canonical.get(_obj_sing(r), 2) for r in recs)
    assert main(["audit", str(runs), "--out", str(audit), "--resamples", "50"]) == 0
    with open(audit / "episodes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {row["arm"] for row in rows} == {agent}
    assert sorted(int(row["answer"]) for row in rows) == sorted(r.answer for r in recs)


def _obj_sing(record) -> str:
    from countgym.stimulus import Dataset

    return Dataset(Path(record.dataset))[record.stimulus_id].obj_sing
