"""The command line: user mistakes give one clear line and exit code 2; the main paths work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from countgym.cli import main

PLUGINS = str(Path(__file__).parent / "plugins")


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PLUGINS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "countgym", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "--data", "/nonexistent/folder", "--agent", "oracle"], "/nonexistent/folder"),
        (["run", "--data", "dotarrays", "--agent", "nosuchagent"], "unknown agent 'nosuchagent'"),
        (["run", "--data", "dotarrays", "--agent", "nosuchmod:Cls"], "cannot import agent module"),
        (["run", "--data", "dotarrays", "--agent", "nosuchmod:Cls"], "PYTHONPATH=. countgym"),
        (["run", "--data", "dotarrays", "--agent", "oracle", "--concurrency", "0"], "positive integer"),
        (["run", "--data", "dotarrays", "--agent", "oracle", "--agent-option", "novalue"], "KEY=VALUE"),
        (["scenes", "make", "nosuchbattery", "--out", "x"], "nosuchbattery"),
        (["audit", "/nonexistent/run", "--out", "x"], "no such log file or run folder"),
        (["replay", "/nonexistent.jsonl", "--episode", "e", "--out", "x.png"], "no such log file"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(args: list[str], needle: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        code = main(args)
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_bad_manifest_line_is_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "manifest.jsonl").write_text('{"id": "a", "n": 1, "obj": "dots", "obj_sing": "dot"}\n{"id": "b", "n": -3}\n')
    assert main(["run", "--data", str(tmp_path), "--agent", "oracle", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "manifest.jsonl:2: invalid manifest line" in err


@pytest.mark.slow
def test_run_audit_replay_roundtrip(tiny_dataset, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = run_cli("run", "--data", str(tiny_dataset.root), "--agent", "outside_policy:CentreTagger", "--out", str(runs), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "3 episodes run, 0 already done, 0 errors" in r.stdout
    r2 = run_cli("run", "--data", str(tiny_dataset.root), "--agent", "outside_policy:CentreTagger", "--out", str(runs), "--no-progress")
    assert "0 episodes run, 3 already done" in r2.stdout
    (log,) = runs.glob("*.jsonl")
    r = run_cli("replay", str(log), "--episode", "/four/r0", "--step", "1", "--out", str(tmp_path / "x.png"))
    assert r.returncode == 0, r.stderr and (tmp_path / "x.png").stat().st_size > 1000
    r = run_cli("replay", str(log), "--episode", "/four/r0", "--step", "9", "--out", str(tmp_path / "y.png"))
    assert r.returncode == 2 and "--step must be in [0, 2]" in r.stderr
    r = run_cli("audit", str(runs), "--out", str(tmp_path / "audit"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "audit" / "episodes.csv").is_file() and (tmp_path / "audit" / "summary.csv").is_file()


def test_bad_env_option_fails_before_any_episode(tiny_dataset, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "r"
    assert main(["run", "--data", str(tiny_dataset.root), "--agent", "oracle", "--tools", "tag", "bogus", "--out", str(out)]) == 2
    assert "unknown tools ['bogus']" in capsys.readouterr().err
    assert not list(out.glob("*.jsonl")) or all(p.stat().st_size == 0 for p in out.glob("*.jsonl"))


def test_unknown_cf_intervention_named(capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "--data", "countercount", "--agent", "cf-mcq+sparkle", "--model", "openai/x"]) == 2
    assert "unknown intervention(s) ['sparkle']" in capsys.readouterr().err


@pytest.mark.slow
def test_corrupt_log_warning_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "x.jsonl").write_text('{"broken": tru')
    r = run_cli("audit", str(tmp_path / "runs"), "--out", str(tmp_path / "a"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("countgym: warning:") and "x.jsonl:1" in lines[0]
    assert lines[-1].startswith("countgym: error: no valid episode records") and len(lines) == 2
