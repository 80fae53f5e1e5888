"""Profile and config files an editor got wrong (a byte-order mark, UTF-16, a value nested past
Python's recursion limit) are one clear line and exit 2, never a traceback or a parser's
confusing complaint about line 1."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from countgym.cli import main

GOOD_PROFILE = "[default]\nomission = 0.1\n"
GOOD_CONFIG = 'out = "runs"\ndatasets = ["dotarrays"]\narms = ["direct"]\nmodels = ["m"]\n'

BAD = {
    "utf-8 bom": (lambda good: codecs.BOM_UTF8 + good.encode(), "byte-order mark"),
    "utf-16": (lambda good: good.encode("utf-16"), "byte-order mark"),
    "deep list": (lambda good: (good + "count_sigma = " + "[" * 5000 + "]" * 5000 + "\n").encode(),
                  "nested more than 32 levels"),
    "deep table": (lambda good: (good + "count_sigma = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n").encode(),
                   "nested more than 32 levels"),
    "deep but parseable": (lambda good: (good + "count_sigma = " + "[" * 100 + "]" * 100 + "\n").encode(),
                           "nested more than 32 levels"),
}


def _one_line(capsys: pytest.CaptureFixture[str], needle: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("countgym: error: ") and needle in err, err
    assert "Traceback" not in err and "RecursionError" not in err and "line 1, column 1" not in err
    return err


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_profile_is_one_line(tmp_path: Path, tiny_dataset, capsys, case: str) -> None:
    make, needle = BAD[case]
    prof = tmp_path / "p.toml"
    prof.write_bytes(make(GOOD_PROFILE))
    rc = main(["run", "--data", str(tiny_dataset.root), "--agent", "direct", "--model", "m",
               "--simulate", str(prof), "--out", str(tmp_path / "run"), "--no-progress"])
    assert rc == 2
    _one_line(capsys, needle)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").rglob("*.jsonl"))


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
@pytest.mark.parametrize("case", ["utf-8 bom", "utf-16"])
def test_a_config_with_a_byte_order_mark_is_one_line(tmp_path: Path, capsys, case: str, suffix: str) -> None:
    make, needle = BAD[case]
    good = GOOD_CONFIG if suffix == ".toml" else "out: runs\ndatasets: [dotarrays]\narms: [direct]\nmodels: [m]\n"
    cfg = tmp_path / f"c{suffix}"
    cfg.write_bytes(make(good))
    assert main(["sweep", str(cfg), "--dry-run"]) == 2
    _one_line(capsys, needle)


def test_a_config_nested_past_the_recursion_limit_is_one_line(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(GOOD_CONFIG + "limit = " + "[" * 5000 + "]" * 5000 + "\n")
    assert main(["sweep", str(cfg), "--dry-run"]) == 2
    _one_line(capsys, "nested more than 32 levels")


def test_the_same_files_without_the_mistake_load(tmp_path: Path) -> None:
    from countgym.sweep import load_config
    from countgym.testing.profiles import load_profiles

    (tmp_path / "p.toml").write_text(GOOD_PROFILE)
    (tmp_path / "c.toml").write_text(GOOD_CONFIG)
    assert load_profiles(tmp_path / "p.toml").default == {"omission": 0.1}
    assert load_config(tmp_path / "c.toml").arms == ["direct"]
