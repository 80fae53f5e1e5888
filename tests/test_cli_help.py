"""Every option of every subcommand has help text; unknown names list every valid one."""

from __future__ import annotations

import argparse

import pytest

from countgym.cli import build_parser, main


def _options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("countgym",)):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, (*path, name))
        else:
            yield " ".join(path), action


def test_every_option_of_every_subcommand_has_help() -> None:
    missing = [f"{where} {a.option_strings or a.dest}" for where, a in _options(build_parser())
               if not a.help or a.help == argparse.SUPPRESS]
    assert not missing, f"options without help text: {missing}"


def test_the_walk_reaches_every_subcommand() -> None:
    wheres = {where for where, _ in _options(build_parser())}
    assert {"countgym run", "countgym sweep", "countgym audit", "countgym scenes make", "countgym replay",
            "countgym export", "countgym demo", "countgym list", "countgym scenes download"} <= wheres


ALL_DATASETS = ("dotarrays", "dotarrays-main", "dotarrays-xl", "lattice", "countercount", "countvideo",
                "fsc147", "pixmo", "countbench")


def _one_line_error(args: list[str], capsys: pytest.CaptureFixture) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_unknown_dataset_lists_every_task_and_photo_set(capsys: pytest.CaptureFixture) -> None:
    err = _one_line_error(["run", "--data", "dotarray", "--agent", "tag", "--model", "openai/m"], capsys)
    for name in ALL_DATASETS:
        assert name in err, name
    assert "countvideo:kK" in err and "fsc147:{common,ablation}" in err
    assert "did you mean 'dotarrays'?" in err


def test_unknown_battery_lists_every_battery(capsys: pytest.CaptureFixture, tmp_path) -> None:
    err = _one_line_error(["scenes", "make", "countvide", "--out", str(tmp_path / "x")], capsys)
    for name in ALL_DATASETS:
        assert name in err, name
    assert "did you mean 'countvideo'?" in err


def test_unknown_arm_lists_every_task_s_arms(capsys: pytest.CaptureFixture) -> None:
    err = _one_line_error(["run", "--data", "dotarrays", "--agent", "tga", "--model", "openai/m"], capsys)
    for name in ("direct", "cot", "list", "tag", "tag+crop", "full", "tiles", "tag-1", "cf-mcq", "cf-oe",
                 "video-p1", "video-p2", "video-p3", "oracle", "blob-counter", "noisy-pointer"):
        assert name in err, name


def test_unknown_env_lists_every_env(capsys: pytest.CaptureFixture) -> None:
    err = _one_line_error(["run", "--env", "countgym/Nope-v0", "--agent", "tag", "--model", "openai/m"], capsys)
    for env in ("DotArrays-v0", "DotArraysXL-v0", "Lattice-v0", "FSC147-v0", "PixMoCount-v0", "CountBench-v0",
                "CounterCount-v0", "CountVideo-v0"):
        assert f"countgym/{env}" in err, env


def test_unknown_subset_lists_every_name(capsys: pytest.CaptureFixture) -> None:
    err = _one_line_error(["run", "--data", "dotarrays:comon", "--agent", "oracle"], capsys)
    for name in ALL_DATASETS:
        assert name in err, name
    assert "did you mean dotarrays:common?" in err
