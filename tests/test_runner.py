"""The run loop: logs, resume without duplicates after SIGKILL, errors recorded, plug-ins."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from countgym.logs import LogWriter, iter_records, read_records
from countgym.runner import CellSpec, run_cell

PLUGINS = str(Path(__file__).parent / "plugins")


@pytest.fixture(autouse=True)
def _plugins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(PLUGINS)


def test_run_cell_writes_one_record_per_episode_and_resumes(tiny_dataset, tmp_path: Path) -> None:
    spec = CellSpec(dataset=str(tiny_dataset.root), agent="oracle", repeats=2)
    res = run_cell(spec, tmp_path, progress=False)
    assert res.ran == 6 and res.errors == 0
    recs = read_records([res.log])
    assert sorted((r.stimulus_id, r.repeat) for r in recs) == sorted((s, r) for s in ("four", "two", "row") for r in (0, 1))
    assert all(r.answer == r.truth.n and r.end == "answer" for r in recs)
    again = run_cell(spec, tmp_path, progress=False)
    assert again.ran == 0 and again.skipped == 6
    assert len(read_records([res.log])) == 6
    forced = run_cell(spec, tmp_path, force=True, progress=False)
    assert forced.ran == 6 and len(read_records([res.log])) == 6


def test_episode_provenance_fields(tiny_dataset, tmp_path: Path) -> None:
    from countgym import __version__
    from countgym.envs.templates import TEMPLATE_HASH

    res = run_cell(CellSpec(dataset=str(tiny_dataset.root), agent="blob-counter", limit=1), tmp_path, progress=False)
    (rec,) = read_records([res.log])
    assert rec.countgym_version == __version__ and rec.template_hash == TEMPLATE_HASH
    assert rec.stimulus_hash == tiny_dataset.content_hash(tiny_dataset[rec.stimulus_id])
    assert rec.arm.name == "blob-counter" and rec.arm.options["tools"] == ["tag", "answer"]
    assert rec.image_size == (768, 768) and rec.stimulus_size == (768, 768)
    raw = res.log.read_text()
    assert "base64" not in raw and len(raw) < 20_000  # images are referenced, never embedded


def test_policy_crash_is_recorded_and_run_goes_on(tiny_dataset, tmp_path: Path) -> None:
    res = run_cell(CellSpec(dataset=str(tiny_dataset.root), agent="outside_policy:Crashes"), tmp_path, progress=False)
    assert res.ran == 3 and res.errors == 3
    recs = read_records([res.log])
    assert all(r.end == "error" and "ValueError: boom" in r.error for r in recs)


def test_concurrent_run_matches_sequential(tiny_dataset, tmp_path: Path) -> None:
    spec = CellSpec(dataset=str(tiny_dataset.root), agent="noisy-pointer", repeats=4)
    a = run_cell(spec, tmp_path / "seq", progress=False)
    b = run_cell(spec, tmp_path / "par", concurrency=4, progress=False)
    key = lambda r: (r.stimulus_id, r.repeat)  # noqa: E731
    ra = {key(r): (r.answer, r.tags) for r in read_records([a.log])}
    rb = {key(r): (r.answer, r.tags) for r in read_records([b.log])}
    assert ra == rb and len(ra) == 12


def test_truncated_last_line_is_skipped_then_repaired(tiny_dataset, tmp_path: Path) -> None:
    spec = CellSpec(dataset=str(tiny_dataset.root), agent="oracle")
    res = run_cell(spec, tmp_path, progress=False)
    lines = res.log.read_bytes().splitlines(keepends=True)
    res.log.write_bytes(b"".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # killed mid-write
    with pytest.warns(UserWarning, match=r":3: skipped invalid log line"):
        assert len(list(iter_records([res.log]))) == 2
    again = run_cell(spec, tmp_path, progress=False)
    assert again.ran == 1
    recs = read_records([res.log])
    assert len(recs) == 3 and len({r.episode_id for r in recs}) == 3


def test_log_writer_appends_whole_lines(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"partial": tru')
    LogWriter(p)
    assert p.read_bytes() == b""


def _cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    e = {**os.environ, "PYTHONPATH": PLUGINS + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "countgym", *args], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_clean_set(tiny_dataset, tmp_path: Path) -> None:
    args = ["run", "--data", str(tiny_dataset.root), "--agent", "outside_policy:CentreTagger",
            "--agent-option", "delay=0.01", "--repeats", "12", "--concurrency", "3", "--no-progress"]
    clean = _cli(*args, "--out", str(tmp_path / "clean"))
    assert clean.wait(120) == 0
    rng = random.Random(1)
    killed_out = tmp_path / "killed"
    for _ in range(4):
        p = _cli(*args, "--out", str(killed_out))
        time.sleep(rng.uniform(1.0, 2.5))
        p.send_signal(signal.SIGKILL)
        p.wait(30)
    final = _cli(*args, "--out", str(killed_out))
    assert final.wait(120) == 0, final.stderr.read().decode()
    (clean_log,) = (tmp_path / "clean").glob("*.jsonl")
    (killed_log,) = killed_out.glob("*.jsonl")
    for line in killed_log.read_text().splitlines():
        json.loads(line)  # no truncated or merged records left behind
    c = sorted((r.stimulus_id, r.repeat, r.answer, tuple(r.tags)) for r in read_records([clean_log]))
    k = sorted((r.stimulus_id, r.repeat, r.answer, tuple(r.tags)) for r in read_records([killed_log]))
    assert k == c and len(c) == 36
