"""A cell is (environment, policy, options): the task comes from the environment, never from the
agent's name; agents that declare their tasks are refused on another task before any episode."""

from __future__ import annotations

from pathlib import Path

import pytest

from countgym.cells import CellSpec, make_cell
from countgym.cli import main
from countgym.logs import EpisodeRecord, read_records

PLUGINS = str(Path(__file__).parent / "plugins")


@pytest.fixture(autouse=True)
def _plugins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(PLUGINS)


def _run(*args: str) -> int:
    return main(["run", *args, "--no-progress"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "task", "env_id", "n"),
    [
        ("data-cc", "countercount", "countgym/CounterCount-v0", 4),
        ("env-cc", "countercount", "countgym/CounterCount-v0", 4),
        ("data-cv", "video", "countgym/CountVideo-v0", 2),
        ("env-cv", "video", "countgym/CountVideo-v0", 2),
    ],
)
def test_a_plugin_runs_the_task_of_its_environment(
    how: str, task: str, env_id: str, n: int, tiny_countercount: Path, tiny_countvideo: Path, tmp_path: Path
) -> None:
    data = str(tiny_countercount if how.endswith("cc") else tiny_countvideo)
    where = ["--env", env_id, "--data", data] if how.startswith("env") else ["--data", data]
    assert _run(*where, "--agent", "any_task_policy:AnswerSeven", "--out", str(tmp_path)) == 0
    recs = read_records([tmp_path])
    assert len(recs) == n
    assert {r.env_options.get("task") for r in recs} == {task}
    assert {r.env for r in recs} == {env_id}
    assert {r.answer for r in recs} == {7} and {r.end for r in recs} == {"answer"}


def test_naming_the_env_or_its_dataset_is_the_same_cell(tiny_countercount: Path) -> None:
    by_data = make_cell(agent="any_task_policy:AnswerSeven", dataset=str(tiny_countercount))
    by_env = make_cell(agent="any_task_policy:AnswerSeven", env="countgym/CounterCount-v0",
                       dataset=str(tiny_countercount))
    assert by_data.log_name() == by_env.log_name() and by_env.env == ""
    default = make_cell(agent="any_task_policy:AnswerSeven", env="countgym/CounterCount-v0")
    assert default.dataset == "countercount" and default.task() == "countercount"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--agent", "blob-counter"], "'blob-counter' runs on the image task, but countgym/CounterCount-v0 is the countercount task"),
        (["--agent", "any_task_policy:VideoOnly"], "runs on the video task"),
        (["--agent", "video-p1", "--model", "openai/x"], "runs on the video task"),
    ],
)
def test_an_agent_on_the_wrong_task_is_one_line_before_any_episode(
    args: list[str], needle: str, tiny_countercount: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    assert _run("--data", str(tiny_countercount), *args, "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not out.exists()


def test_a_model_arm_on_another_task_and_unknown_envs_are_user_errors(
    tiny_dataset, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run("--data", str(tiny_dataset.root), "--agent", "cf-mcq", "--model", "openai/x") == 2
    assert "'cf-mcq' runs on the countercount task" in capsys.readouterr().err
    assert _run("--env", "countgym/Nope-v0", "--agent", "oracle") == 2
    assert "unknown environment 'countgym/Nope-v0'" in capsys.readouterr().err
    assert _run("--agent", "oracle") == 2
    assert "--env ID" in capsys.readouterr().err


def test_single_step_options_for_plugins_are_validated_by_the_environment(tiny_countercount: Path) -> None:
    cell = make_cell(agent="any_task_policy:AnswerSeven", dataset=str(tiny_countercount),
                     ablations={"question": "oe", "cue": True})
    assert cell.env_options == {"question": "oe", "cue": True}
    from countgym.errors import UserError

    with pytest.raises(UserError, match="CounterCount takes only"):
        make_cell(agent="any_task_policy:AnswerSeven", dataset=str(tiny_countercount), budget=3)


def test_logs_without_an_env_field_still_read(tiny_countercount: Path, tmp_path: Path) -> None:
    from countgym.runner import run_cell

    res = run_cell(CellSpec(dataset=str(tiny_countercount), agent="any_task_policy:AnswerSeven", limit=1),
                   tmp_path, progress=False)
    line = res.log.read_text().splitlines()[0]
    import json

    old = json.loads(line)
    assert old.pop("env") == "countgym/CounterCount-v0"
    assert EpisodeRecord.model_validate(old).env is None


def test_a_released_root_without_manifest_asks_for_its_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "release"
    root.mkdir()
    (root / "metadata.jsonl").write_text("{}\n")
    assert _run("--data", str(root), "--agent", "any_task_policy:AnswerSeven", "--out", str(tmp_path / "r")) == 2
    err = capsys.readouterr().err
    assert "has no manifest.jsonl" in err and "--env (countgym/CounterCount-v0, countgym/CountVideo-v0)" in err
