"""One cell, one experiment: ``--limit`` growth reuses the prefix it already ran, a smaller limit
says what the cell holds, and an edited plug-in policy is a new cell (never a mix in one log)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from countgym.cells import limited_ids, make_cell, policy_version, selection_text, stratified_order
from countgym.cli import main
from countgym.logs import read_records
from countgym.stimulus import Dataset, Stimulus, write_manifest


@pytest.fixture(scope="module")
def levels_dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """Twelve count-only stimuli over four count levels (no images needed by the policy below)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("levels")
    (root / "images").mkdir()
    Image.new("RGB", (64, 64), "white").save(root / "images" / "blank.png")
    stims = [Stimulus(id=f"n{n}-{j}", n=n, obj="dots", obj_sing="dot", image="images/blank.png")
             for n in (1, 2, 3, 4) for j in range(3)]
    write_manifest(root, stims)
    return Dataset(root)


POLICY = '''
class P:
    """Answers {answer}."""

    def reset(self, first_observation, task):
        pass

    def act(self, observation):
        return 'ok\\n{{"tool": "answer", "count": {answer}}}'
'''


def _write_policy(folder: Path, answer: int, version: str | None = None) -> None:
    text = POLICY.format(answer=answer)
    if version is not None:
        text += f"\nP.version = {version!r}\n"
    (folder / "editedpol.py").write_text(text)


def _run(data: Path, out: Path, *extra: str) -> int:
    return main(["run", "--data", str(data), "--agent", "editedpol:P", "--out", str(out), "--no-progress", *extra])


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "plugin"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    sys.modules.pop("editedpol", None)


def _reload() -> None:
    sys.modules.pop("editedpol", None)


def test_limit_growth_reuses_the_first_episodes(levels_dataset: Dataset, plugin: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _write_policy(plugin, 5)
    out = tmp_path / "runs"
    assert _run(levels_dataset.root, out, "--limit", "3") == 0
    (log,) = out.glob("*.jsonl")
    first = {r.stimulus_id: r.episode_id + str(r.finished_at) for r in read_records([log])}
    assert list(first) == limited_ids(levels_dataset.stimuli, 3)
    capsys.readouterr()
    assert _run(levels_dataset.root, out, "--limit", "6") == 0
    text = capsys.readouterr().out
    assert "3 episodes run, 3 already done" in text
    assert "the cell holds first 6 of the stratified order (of 12)" in text
    assert "stimuli: first 6 of the stratified order (of 12)" in text  # the results table says it too
    (log,) = out.glob("*.jsonl")  # still one cell
    recs = read_records([log])
    assert [r.stimulus_id for r in recs] == limited_ids(levels_dataset.stimuli, 6)
    # the first three records are the ones the first run wrote, untouched
    assert {r.stimulus_id: r.episode_id + str(r.finished_at) for r in recs[:3]} == first
    # a smaller limit runs nothing and says the cell holds more than it asked for
    assert _run(levels_dataset.root, out, "--limit", "2") == 0
    text = capsys.readouterr().out
    assert "0 episodes run, 2 already done" in text
    assert "the cell holds first 6 of the stratified order (of 12): more than this run's --limit 2" in text
    assert "  " + levels_dataset.root.name in text and " 6 " in text.split("EM", 1)[1]  # the table's n is 6


def test_selection_text_names_what_a_log_holds() -> None:
    stims = [Stimulus(id=f"n{n}-{j}", n=n, obj="dots", obj_sing="dot") for n in (1, 2, 3) for j in range(2)]
    order = stratified_order(stims)
    assert selection_text(set(limited_ids(stims, 4)), order) == "first 4 of the stratified order (of 6)"
    assert selection_text({s.id for s in stims}, order) == "all 6"
    # an older rule's pick (disjoint draws of two limits) is said to be no prefix
    assert selection_text({"n1-0", "n1-1"}, order) == "2 of 6, not a prefix of the stratified order"


def test_edited_plugin_is_a_new_cell(levels_dataset: Dataset, plugin: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    _write_policy(plugin, 5)
    before = policy_version("editedpol:P")
    assert before is not None and before.startswith("src:")
    assert _run(levels_dataset.root, out, "--limit", "3") == 0
    _write_policy(plugin, 7)
    _reload()
    assert policy_version("editedpol:P") not in (None, before)
    with pytest.warns(UserWarning, match=r"editedpol:P: its code changed \(src:\w+ -> src:\w+\), so this is a new cell"):
        assert _run(levels_dataset.root, out, "--limit", "6") == 0
    logs = sorted(out.glob("*.jsonl"))
    assert len(logs) == 2  # a new cell: the old log is not extended by the new code
    answers = sorted(tuple(sorted({r.answer for r in read_records([log])})) for log in logs)
    assert answers == [(5,), (7,)]  # never both versions in one log
    counts = sorted(len(read_records([log])) for log in logs)
    assert counts == [3, 6]
    versions = {r.arm.options["policy_version"] for r in read_records(logs)}
    assert len(versions) == 2


def test_declared_version_is_the_identity(levels_dataset: Dataset, plugin: Path, tmp_path: Path) -> None:
    _write_policy(plugin, 5, version="1.0")
    assert policy_version("editedpol:P") == "v:1.0"
    one = make_cell(agent="editedpol:P", dataset=str(levels_dataset.root)).log_name()
    _write_policy(plugin, 5, version="1.0")
    (plugin / "editedpol.py").write_text((plugin / "editedpol.py").read_text() + "# a comment\n")
    _reload()
    assert make_cell(agent="editedpol:P", dataset=str(levels_dataset.root)).log_name() == one  # same version
    _write_policy(plugin, 7, version="2.0")
    _reload()
    assert make_cell(agent="editedpol:P", dataset=str(levels_dataset.root)).log_name() != one
    # built-in arms have no code identity in their cell (their cells resume across versions)
    assert policy_version("tag") is None and policy_version("oracle") is None
