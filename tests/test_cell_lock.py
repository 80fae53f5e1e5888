"""One writer per cell: a second concurrent run of a cell never pays for its episodes again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from countgym.celllock import CellBusyError, cell_lock, lock_path_of
from countgym.cli import main
from countgym.logs import read_records
from countgym.runner import CellSpec, run_cell
from countgym.sweep import SweepConfig, expand, run_sweep

PLUGINS = str(Path(__file__).parent / "plugins")


@pytest.fixture(autouse=True)
def _plugins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(PLUGINS)


def _run_args(tiny_dataset, out: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(tiny_dataset.root), "--agent", "outside_policy:CentreTagger",
            "--agent-option", "delay=0.4", "--out", str(out), "--no-progress", *extra]  # fmt: skip


def _start(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": PLUGINS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "countgym", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _wait_for_lock(out: Path, proc: subprocess.Popen) -> Path:
    """The first process's lock file once it holds the lock (it writes its pid there)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for p in out.glob("*.lock") if out.is_dir() else []:
            if f"pid {proc.pid} " in p.read_text():
                return p
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the first run never took its lock")


@pytest.mark.slow
def test_second_concurrent_run_exits_2_with_one_line_and_nothing_runs_twice(tiny_dataset, tmp_path: Path, capsys) -> None:
    out = tmp_path / "runs"
    first = _start(_run_args(tiny_dataset, out))
    try:
        _wait_for_lock(out, first)
        capsys.readouterr()
        assert main(_run_args(tiny_dataset, out)) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "being run by another process" in err and f"pid {first.pid}" in err
    finally:
        stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    assert "3 episodes run" in stdout
    recs = read_records([out])
    assert sorted(r.stimulus_id for r in recs) == ["four", "row", "two"]  # each once


@pytest.mark.slow
def test_wait_flag_waits_then_resumes_without_rerunning(tiny_dataset, tmp_path: Path, capsys) -> None:
    out = tmp_path / "runs"
    first = _start(_run_args(tiny_dataset, out))
    try:
        _wait_for_lock(out, first)
        capsys.readouterr()
        assert main(_run_args(tiny_dataset, out, "--wait")) == 0
        assert "0 episodes run, 3 already done" in capsys.readouterr().out  # it waited for all 3
    finally:
        first.communicate(timeout=120)
    assert len(read_records([out])) == 3


@pytest.mark.slow
def test_lock_of_a_killed_run_does_not_block_resume(tiny_dataset, tmp_path: Path, capsys) -> None:
    out = tmp_path / "runs"
    first = _start(_run_args(tiny_dataset, out))
    lock = _wait_for_lock(out, first)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=60)
    assert lock.exists()  # the file stays; the kernel dropped the lock with the process
    assert main(_run_args(tiny_dataset, out)) == 0
    recs = read_records([out])
    assert sorted(r.stimulus_id for r in recs) == ["four", "row", "two"]


def test_held_lock_stops_run_cell_before_force_clears_the_log(tiny_dataset, tmp_path: Path) -> None:
    spec = CellSpec(dataset=str(tiny_dataset.root), agent="oracle")
    res = run_cell(spec, tmp_path, progress=False)
    before = res.log.read_text()
    with cell_lock(res.log) as path:
        assert path == lock_path_of(res.log)
        with pytest.raises(CellBusyError, match="being run by another process"):
            run_cell(spec, tmp_path, force=True, progress=False)
        assert res.log.read_text() == before  # --force of a busy cell deletes nothing
    assert run_cell(spec, tmp_path, force=True, progress=False).ran == 3  # released


def test_sweep_skips_a_busy_cell_and_runs_the_others(tiny_dataset, tmp_path: Path, capsys) -> None:
    cfg = SweepConfig(datasets=[str(tiny_dataset.root)], arms=["oracle", "blob-counter"], out=str(tmp_path / "sw"))
    busy, free = expand(cfg)
    with cell_lock(tmp_path / "sw" / busy.log_name()):
        results = run_sweep(cfg, progress=False)
    assert [r.log.name for r in results] == [free.log_name()] and results[0].ran == 3
    assert "skipped: cell" in capsys.readouterr().out
    assert not (tmp_path / "sw" / busy.log_name()).exists()
