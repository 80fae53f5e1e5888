"""A newcomer's first hour: the mistakes people make first get one clear line and exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from countgym.cli import main


def _run(argv: list[str], capsys) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().err


def test_a_mistyped_battery_is_named_before_the_arm_check(tmp_path: Path, capsys) -> None:
    # docs/cli.md's own example: the nearest battery is suggested, not "the arm does not run here".
    rc, err = _run(["run", "--data", "countvide", "--agent", "video-p1", "--model", "openai/m",
                    "--out", str(tmp_path), "--no-progress"], capsys)
    assert rc == 2
    assert "unknown dataset 'countvide'" in err and "did you mean 'countvideo'?" in err
    assert "runs on the video task" not in err and len(err.strip().splitlines()) == 1


def test_a_mistyped_subset_suggests_the_subset(tmp_path: Path, capsys) -> None:
    rc, err = _run(["run", "--data", "dotarrays:comon", "--agent", "oracle", "--out", str(tmp_path),
                    "--no-progress"], capsys)
    assert rc == 2 and "did you mean dotarrays:common?" in err


@pytest.mark.parametrize(("option", "says"), [
    ("sigma=abc", "sigma must be a number, got 'abc'"),
    ("omission=3", "omission must be in [0, 1]"),
    ("bogus=1", "unknown option 'bogus'"),
    ("slip=true", "slip must be a number"),
])
def test_agent_option_mistakes_are_one_line_exit_2(option: str, says: str, tiny_dataset, tmp_path: Path,
                                                   capsys) -> None:
    rc, err = _run(["run", "--data", str(tiny_dataset.root), "--agent", "noisy-pointer", "--agent-option",
                    option, "--out", str(tmp_path), "--no-progress"], capsys)
    assert rc == 2, err
    assert says in err and "internal error" not in err
    assert len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.jsonl"))  # refused before any episode


def test_a_plugin_constructor_that_refuses_its_options_is_exit_2(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "picky_policy.py").write_text(
        "class Picky:\n"
        "    def __init__(self, level=1):\n"
        "        if level not in (1, 2):\n"
        "            raise ValueError(f'level must be 1 or 2, got {level}')\n"
        "    def reset(self, obs, task): pass\n"
        "    def act(self, obs): return '{\"tool\":\"answer\",\"count\":1}'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, err = _run(["run", "--data", "dotarrays:common", "--agent", "picky_policy:Picky", "--agent-option",
                    "level=7", "--out", str(tmp_path / "runs"), "--no-progress"], capsys)
    assert rc == 2 and "level must be 1 or 2, got 7" in err


def test_several_agent_options_after_one_flag(tiny_dataset, tmp_path: Path, capsys) -> None:
    # README: --agent-option sigma=3 omission=0.1 duplicate=0.05 phantom=0.05 slip=0.1
    out = tmp_path / "runs"
    rc = main(["run", "--data", str(tiny_dataset.root), "--agent", "noisy-pointer", "--agent-option", "sigma=3",
               "omission=0.1", "duplicate=0.05", "phantom=0.05", "slip=0.1", "--out", str(out), "--no-progress"])
    assert rc == 0
    from countgym.logs import read_records

    (rec, *_) = read_records(sorted(out.glob("*.jsonl")))
    assert rec.arm.options["omission"] == 0.1 and rec.arm.options["slip"] == 0.1


def test_readme_plugin_snippet_defines_every_class_it_runs() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme[readme.index("# my_policies.py"):]
    block = block[: block.index("```")]
    defined = set(re.findall(r"^class (\w+)", block, flags=re.M))
    used = set(re.findall(r"my_policies:(\w+)", readme))
    assert used and used <= defined


def test_readme_says_where_the_commands_are() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "`.venv/bin`" in readme and "source .venv/bin/activate" in readme


def test_countvideo_env_defaults_to_the_small_set() -> None:
    import gymnasium as gym

    import countgym  # noqa: F401

    spec = gym.spec("countgym/CountVideo-v0")
    assert spec.kwargs["dataset"] == "countvideo:k1"
    from countgym.scenes.video.dataset import _build_tip

    assert 'gym.make("countgym/CountVideo-v0", dataset="countvideo")' in _build_tip(1)
    assert "--data countvideo:k1" in _build_tip(None)
