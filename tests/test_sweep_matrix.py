"""Every documented sweep key on every kind of arm: no internal error, one cell where a key does
not apply (said once, in one line), and no two cells of a sweep that would run the same episodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from countgym.agents.registry import agent_takes, runs_on
from countgym.cli import main
from countgym.errors import UserError
from countgym.logs import identity_options
from countgym.sweep import cell_options, expand, load_config
from countgym.tasks import env_class

IMAGE, CC, VIDEO = "dotarrays:common", "countercount", "countvideo:k1"
ALL = (IMAGE, CC, VIDEO)

ARMS = [
    "direct", "cot", "list", "tiles", "tag", "tag+crop", "full", "tag-1",  # the image arms
    "any_task_policy:AnswerSeven",  # a plug-in (tests/plugins), on every task
    "noisy-pointer", "noisy-counter",  # scripted: image only, and every task
    "video-p1", "cf-mcq", "cf-oe+blur", "cf-mcq+attn",  # CountVideoBench and CounterCount arms
]

# (documented key, values, sources): each value differs from the environments' defaults.
KEYS: list[tuple[str, list[Any], tuple[str, ...]]] = [
    ("tool_sets", [["tag"], ["crop", "tag"]], ALL),
    ("budgets", [3, 5], ALL),
    ("budget", [3], ALL),
    ("tools", [["tag", "crop"]], ALL),
    ("extra_tools", [["grid"]], ALL),
    ("verify", [False], ALL),
    ("numbered", [False], ALL),
    ("order", ["reverse"], ALL),
    ("perturb", ["remove"], ALL),
    ("one_point_per_call", [True], ALL),
    ("prompt", ["direct"], (IMAGE, CC)),
    ("prompt", ["P2"], (VIDEO, CC)),
    ("reward", ["neg_abs_error"], ALL),
    ("tool_cost", [0.25], ALL),
    ("thinking", [False], ALL),
    ("protocol", ["native"], ALL),
    ("question", ["oe"], ALL),
    ("cue", [True], ALL),
    ("generic", [True], ALL),
    ("blur", [True], ALL),
    ("blur_radius", [20.0], ALL),
    ("feather", [2.0], ALL),
    ("kind", ["cf"], ALL),
    ("attention", ["a2-b0-middle"], ALL),
    ("max_side", [256], ALL),
]
AXES = {"tool_sets": "tools", "budgets": "budget"}
PLUGINS = str(Path(__file__).parent / "plugins")


@pytest.fixture(autouse=True)
def _plugins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(PLUGINS)


def _config(tmp_path: Path, key: str, values: list[Any], sources: tuple[str, ...], arm: str) -> Path:
    body: dict[str, Any] = {"out": str(tmp_path / "runs"), "datasets": list(sources), "arms": [arm],
                            "models": ["openai/m"]}
    if key in AXES:
        body[key] = values
    else:
        body["ablations"] = [{}, *({key: v} for v in values)]
    p = tmp_path / "s.json.toml"
    lines = [f"{k} = {json.dumps(v)}" for k, v in body.items() if k != "ablations"]
    if "ablations" in body:
        lines.append("ablations = [" + ", ".join(_toml_table(a) for a in body["ablations"]) + "]")
    p.write_text("\n".join(lines) + "\n")
    return p


def _toml_table(a: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in a.items()) + "}"


def _same_episodes(cell: Any) -> str:
    return json.dumps([cell.env_id(), cell.dataset, cell.agent, cell.model, cell_options(cell),
                       identity_options(cell.agent_options)], sort_keys=True, default=str)


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize(("key", "values", "sources"), KEYS, ids=[f"{k}-{v[0]}" for k, v, _ in KEYS])
def test_every_key_on_every_arm(
    tmp_path: Path, key: str, values: list[Any], sources: tuple[str, ...], arm: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = load_config(_config(tmp_path, key, values, sources, arm))
    envs = {ds: env_class(cfg.sources()[i][0] or _env(ds)) for i, ds in enumerate(sources)}
    if not any(runs_on(arm, e.task) for e in envs.values()):
        with pytest.raises(UserError, match="runs on none"):
            expand(cfg)
        return
    if not any(AXES.get(key, key) in e.CELL_OPTIONS for e in envs.values()) and key != "thinking":
        with pytest.raises(UserError, match="applies to none"):
            expand(cfg)
        return
    notes: list[str] = []
    cells = expand(cfg, notes=notes)  # any exception here fails the test
    # No two cells would run the same episodes (nor share a log).
    assert len({_same_episodes(c) for c in cells}) == len(cells)
    assert len({c.log_name() for c in cells}) == len(cells)
    name = AXES.get(key, key)
    for ds, env in envs.items():
        if not runs_on(arm, env.task):
            continue
        mine = [c for c in cells if c.dataset == ds]
        applies = name in agent_takes(arm, env)
        said = [n for n in notes if f" to {arm} on the {env.task} task " in n]
        if not applies:
            assert len(mine) == 1, (ds, [cell_options(c) for c in mine])
            if name in env.CELL_OPTIONS or key in AXES or name == "thinking":
                assert len(said) == 1 and key in said[0], notes
        else:
            # Each value that changes the arm's options is its own cell (the default is one).
            assert len(mine) >= 2 or _is_default(arm, ds, name, values[0]), (ds, [cell_options(c) for c in mine])
            assert not [n for n in said if key in n.split("(")[0]], notes
    # The CLI's dry run takes the same config, says each note once and exits 0.
    assert main(["sweep", str(tmp_path / "s.json.toml"), "--dry-run", "--simulate"]) == 0
    out = capsys.readouterr().out
    for n in notes:
        assert out.count(n) == 1


def _env(ds: str) -> str:
    from countgym.tasks import env_for_dataset

    return env_for_dataset(ds)


def _is_default(arm: str, ds: str, name: str, value: Any) -> bool:
    """The value is the arm's own (``one_point_per_call = true`` on tag-1, crop on tag+crop)."""
    from countgym.cells import make_cell

    if name == "thinking":
        return False
    model = "" if ":" in arm or "noisy" in arm else "openai/m"
    base = make_cell(agent=arm, dataset=ds, model=model)
    varied = make_cell(agent=arm, dataset=ds, model=model, ablations={name: value})
    return base.display_options() == varied.display_options()


# --- known answers ------------------------------------------------------------------------------
def _cells(tmp_path: Path, text: str, notes: list[str] | None = None) -> list[Any]:
    p = tmp_path / "k.toml"
    p.write_text(f'out = "{tmp_path / "runs"}"\nmodels = ["openai/m"]\n' + text)
    return expand(load_config(p), notes=notes)


def test_the_issue_configs(tmp_path: Path) -> None:
    # budget or tools as ablation keys on tag: one cell each, as the axes give them
    cells = _cells(tmp_path, 'datasets = ["dotarrays:common"]\narms = ["tag"]\n'
                             'ablations = [{budget = 3}, {tools = ["tag", "crop"]}]\n')
    assert [(c.env_options["budget"], c.env_options["tools"]) for c in cells] == [(3, ["tag"]), (6, ["tag", "crop"])]
    # an ablation's budget is the axis's budget: the same cell, not a second one
    cells = _cells(tmp_path, 'datasets = ["dotarrays:common"]\narms = ["tag"]\nbudgets = [3, 4]\n'
                             'ablations = [{}, {budget = 3}]\n')
    assert sorted(c.env_options["budget"] for c in cells) == [3, 4]
    # tool sets x direct: one direct cell, said once
    notes: list[str] = []
    cells = _cells(tmp_path, 'datasets = ["dotarrays:common"]\narms = ["direct", "tag"]\n'
                             'tool_sets = [["tag"], ["tag", "crop"], ["crop", "tag"]]\n', notes)
    assert [c.agent for c in cells].count("direct") == 1 and [c.agent for c in cells].count("tag") == 2
    assert notes == ["note: tool_sets does not apply to direct on the image task (nothing it sends or does "
                     "would change): no cell per value for it there"]


def test_a_prompt_no_environment_takes_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "p.toml"
    p.write_text(f'out = "{tmp_path}"\ndatasets = ["dotarrays:common"]\narms = ["tag"]\nmodels = ["openai/m"]\n'
                 'ablations = [{prompt = "hi"}]\n')
    assert main(["sweep", str(p), "--dry-run", "--simulate"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "prompt = 'hi'" in err and "'direct'" in err and "Traceback" not in err


def test_keys_that_apply_make_cells(tmp_path: Path) -> None:
    cells = _cells(tmp_path, 'datasets = ["countercount"]\narms = ["cf-oe+blur", "cf-mcq"]\n'
                             'ablations = [{}, {blur_radius = 20.0}]\n')
    assert [(c.agent, c.env_options["blur_radius"]) for c in cells] == [
        ("cf-oe+blur", 48.0), ("cf-oe+blur", 20.0), ("cf-mcq", 48.0)]
    cells = _cells(tmp_path, 'datasets = ["countvideo:k1"]\narms = ["video-p1"]\nbudgets = [2, 3]\n'
                             'ablations = [{}, {max_side = 256}]\n')
    assert [c.env_options.get("max_side") for c in cells] == [None, 256]
    cells = _cells(tmp_path, 'datasets = ["dotarrays:common"]\narms = ["any_task_policy:AnswerSeven"]\n'
                             'ablations = [{}, {prompt = "direct"}]\n')
    assert [c.env_options.get("prompt") for c in cells] == [None, "direct"]
    cells = _cells(tmp_path, 'datasets = ["dotarrays:common"]\narms = ["tag-1"]\n'
                             'ablations = [{}, {one_point_per_call = false}]\n')
    assert [c.display_options()["one_point_per_call"] for c in cells] == [True, False]


# --- the same configs run ------------------------------------------------------------------------
def test_issue_sweep_runs_under_simulate(tmp_path: Path, tiny_dataset, capsys: pytest.CaptureFixture[str]) -> None:
    from countgym.logs import iter_records

    p = tmp_path / "run.toml"
    p.write_text(
        f'out = "{tmp_path / "runs"}"\ndatasets = ["{tiny_dataset.root}"]\nmodels = ["openai/m"]\nlimit = 1\n'
        'arms = ["direct", "tag", "any_task_policy:AnswerSeven"]\ntool_sets = [["tag"], ["tag", "crop"]]\n'
        'ablations = [{budget = 3}, {prompt = "direct"}]\n')
    assert main(["sweep", str(p), "--simulate", "--no-progress"]) == 0
    out = capsys.readouterr().out
    # tag: 2 tool sets x (budget 3, the arm as defined: prompt does not apply to it); the
    # plug-in: 2 tool sets x (budget 3, prompt direct); direct: one cell.
    logs = sorted((tmp_path / "runs").glob("*.jsonl"))
    assert len(logs) == 4 + 4 + 1
    recs = list(iter_records(logs))
    assert len(recs) == 9 and not [r for r in recs if r.end == "error"]
    assert sorted(r.env_options["budget"] for r in recs if r.arm.name == "tag") == [3, 3, 6, 6]
    assert sum(line.startswith("note: ") for line in out.splitlines()) == 2  # tag and direct, once each


@pytest.mark.slow  # a rehearsal runs and audits its folder (about 30 s idle)
def test_issue_ablations_rehearse(tmp_path: Path, tiny_dataset, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "ablate.toml").write_text(
        f'out = "runs/ablate"\ndatasets = ["{tiny_dataset.root}"]\narms = ["direct", "tag"]\n'
        'models = ["REPLACE:model-a"]\ntool_sets = [["tag"], ["tag", "crop"]]\n'
        'ablations = [{budget = 3}, {tools = ["tag", "crop"]}]\n')
    assert main(["rehearse", "--configs", str(folder), "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    # direct: one cell; tag: (tag, budget 3), (tag+crop, budget 3), (tag+crop, budget 6)
    assert len(list((tmp_path / "r" / "runs" / "ablate").glob("*.jsonl"))) == 1 + 3
    assert sum("not apply to direct" in line for line in text.splitlines()) == 1
