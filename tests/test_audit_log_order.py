"""An audit depends on the episodes, not on the order the log lists them in.

Logs list episodes in the order they finished, which concurrent runs change from one run to the
next. The bootstrap used to resample in that order: the same episodes gave intervals a few tenths
apart, and a rehearsal's verdict flipped between runs. Every table the audit writes must now be
the same, byte for byte, for a log and the same log shuffled."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from countgym.cli import main
from tests.test_simulate import dots_dataset, write_profile


def _shuffled_copy(runs: Path, to: Path) -> Path:
    shutil.copytree(runs, to)
    for log in to.glob("*.jsonl"):
        lines = log.read_text().splitlines(keepends=True)
        assert len(lines) > 5
        before = list(lines)
        random.Random(3).shuffle(lines)
        assert lines != before
        log.write_text("".join(lines))
    return to


def _same_tables(runs: Path, tmp: Path) -> list[str]:
    """Audit ``runs`` and a shuffled copy; the CSV files written (relative paths), all equal."""
    shuffled = _shuffled_copy(runs, tmp / "shuffled")
    outs = []
    for i, r in enumerate((runs, shuffled)):
        out = tmp / f"audit{i}"
        assert main(["audit", str(r), "--out", str(out), "--viewer-episodes", "0", "--resamples", "300"]) == 0
        outs.append(out)
    names = sorted(str(p.relative_to(outs[0])) for p in outs[0].rglob("*.csv"))
    assert names == sorted(str(p.relative_to(outs[1])) for p in outs[1].rglob("*.csv"))
    for name in names:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    return names


def test_finger_tables_do_not_depend_on_log_order(tmp_path: Path) -> None:
    data = dots_dataset(tmp_path / "data", 8, counts=[4, 6, 8, 10, 12, 14, 16, 18])
    prof = write_profile(tmp_path / "p.toml", "[default]\nomission = 0.1\nphantom = 0.08\nduplicate = 0.05\n"
                                              "pointing_sigma = 4.0\n")
    runs = tmp_path / "runs"
    for agent in ("tag", "direct"):
        assert main(["run", "--data", str(data), "--agent", agent, "--model", "openai/sim-a", "--simulate", str(prof),
                     "--out", str(runs), "--repeats", "3", "--concurrency", "4", "--no-progress"]) == 0
    names = _same_tables(runs, tmp_path)
    assert {"summary.csv", "contrasts.csv", "episodes.csv"} <= set(names)


@pytest.mark.slow  # a CounterCount battery of 20 pairs drawn and run three times (about 15 s)
def test_countercount_tables_do_not_depend_on_log_order(tmp_path: Path) -> None:
    from countgym.scenes.make import make_dataset

    data = make_dataset("countercount", tmp_path / "cc", limit=20, progress=False)
    prof = write_profile(tmp_path / "p.toml", "[default]\ncanonical = 0.4\n")
    runs = tmp_path / "runs"
    assert main(["run", "--data", str(data), "--agent", "cf-oe", "--model", "REPLACE:vlm", "--simulate", str(prof),
                 "--out", str(runs), "--repeats", "3", "--concurrency", "4", "--no-progress"]) == 0
    names = _same_tables(runs, tmp_path)
    assert "countercount/cf_scores.csv" in names


@pytest.mark.slow  # the DotArrays common battery (built once per cache) through the noisy pointer
def test_lattice_and_battery_tables_do_not_depend_on_log_order(tmp_path: Path) -> None:
    """The demo's battery: its lattice table sums per-record scores, which it now takes in
    episode-id order (a shuffled log read its means differently in the last bit before)."""
    runs = tmp_path / "runs"
    for agent in ("noisy-pointer", "blob-counter"):
        assert main(["run", "--data", "dotarrays:common", "--agent", agent, "--out", str(runs), "--limit", "30",
                     "--repeats", "2", "--concurrency", "4", "--no-progress"]) == 0
    names = _same_tables(runs, tmp_path)
    assert "lattice.csv" in names
