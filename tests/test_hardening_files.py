"""Logs and files: a complete last line without its newline is kept, audit CSVs cannot run as
spreadsheet formulas, deeply nested configs and every path or disk mistake are one line and
exit 2, ``--out ""`` is refused, a video's total pixels and one record's audit work are bounded."""

from __future__ import annotations

import csv
import errno
import json
import os
import shutil
import time
import warnings
from pathlib import Path

import pytest

from countgym.cli import main
from countgym.logs import LogWriter, read_records
from countgym.stimulus import Dataset, write_manifest


def run_argv(data: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(data), "--agent", "oracle", "--out", str(out), "--no-progress", *extra]


def one_line_exit_2(capsys: pytest.CaptureFixture[str], rc: int) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert len(err) == 1 and "internal error" not in err[0] and "Traceback" not in err[0], err
    return err[0]


# --- the last log line --------------------------------------------------------------------------
def test_a_complete_last_line_without_newline_is_kept(tiny_dataset, tmp_path: Path, capsys) -> None:
    assert main(run_argv(tiny_dataset.root, tmp_path)) == 0
    log = next(tmp_path.glob("*.jsonl"))
    ids = sorted(r.episode_id for r in read_records([log]))
    log.write_bytes(log.read_bytes().rstrip(b"\n"))  # a writer killed before its newline
    capsys.readouterr()
    assert main(run_argv(tiny_dataset.root, tmp_path)) == 0
    assert "0 episodes run, 3 already done" in capsys.readouterr().out
    assert sorted(r.episode_id for r in read_records([log])) == ids
    assert log.read_bytes().endswith(b"\n") and log.read_bytes().count(b"\n") == 3


def test_a_truncated_last_line_is_still_cut(tiny_dataset, tmp_path: Path, capsys) -> None:
    assert main(run_argv(tiny_dataset.root, tmp_path)) == 0
    log = next(tmp_path.glob("*.jsonl"))
    log.write_bytes(log.read_bytes()[:-40])
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(run_argv(tiny_dataset.root, tmp_path)) == 0
    assert "1 episodes run, 2 already done" in capsys.readouterr().out
    assert len(read_records([log])) == 3


def test_log_writer_keeps_a_whole_record_without_newline(tiny_dataset, tmp_path: Path) -> None:
    assert main(run_argv(tiny_dataset.root, tmp_path / "a")) == 0
    src = next((tmp_path / "a").glob("*.jsonl"))
    lines = src.read_bytes().splitlines()
    log = tmp_path / "b.jsonl"
    log.write_bytes(lines[0])
    LogWriter(log)
    assert log.read_bytes() == lines[0] + b"\n"


# --- CSV formula injection ----------------------------------------------------------------------
HOSTILE_IDS = ["=HYPERLINK(\"http://x\",\"y\")", "+1+2", "-3+4", "@SUM(A1)", "\tcmd", "\rcmd"]


def test_audit_csvs_escape_formula_cells(tiny_dataset, tmp_path: Path) -> None:
    from countgym.analysis import write_audit

    data = tmp_path / "data"
    shutil.copytree(tiny_dataset.root / "images", data / "images")
    stims = [s.model_copy(update={"id": HOSTILE_IDS[i], "meta": {"set": HOSTILE_IDS[-1 - i]}})
             for i, s in enumerate(tiny_dataset.stimuli)]
    write_manifest(data, stims)
    assert main(run_argv(data, tmp_path / "runs")) == 0
    log = next((tmp_path / "runs").glob("*.jsonl"))
    recs = read_records([log])
    # A model id and an error text that start like formulas too.
    text = "".join(r.model_copy(update={"model": "=cmd|' /C calc'!A0", "error": "@boom"}).model_dump_json() + "\n"
                   for r in recs)
    log.write_text(text)
    out = tmp_path / "audit"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_audit([tmp_path / "runs"], out, resolve=lambda name: Dataset(data))
    csvs = list(out.rglob("*.csv"))
    assert any(p.name == "episodes.csv" for p in csvs)
    seen_escaped = False
    for path in csvs:
        with path.open(newline="", encoding="utf-8") as f:
            for row in csv.reader(f):
                for cell in row:
                    assert not cell.lstrip(" ").startswith(("=", "+", "@", "\t", "\r", "\n")), (path.name, cell)
                    assert not (cell.startswith("-") and not _is_number(cell)), (path.name, cell)
                    seen_escaped |= cell.startswith("'=")
    assert seen_escaped  # the ids are still there, escaped


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_safe_cell_leaves_numbers_and_plain_text() -> None:
    import pandas as pd

    from countgym.analysis.csvout import csv_safe

    df = pd.DataFrame({"x": [-1.5, 2.0], "s": ["-x", "ok"], "=h": ["a", "\uff1dSUM(1)"]})
    out = csv_safe(df)
    assert list(out.columns) == ["x", "s", "'=h"]
    assert out["x"].tolist() == [-1.5, 2.0]
    assert out["s"].tolist() == ["'-x", "ok"]
    assert out["'=h"].tolist() == ["a", "'\uff1dSUM(1)"]


# --- nested configs -----------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_deeply_nested_sweep_config_is_one_line(tmp_path: Path, capsys, suffix: str) -> None:
    depth = 5000
    cfg = tmp_path / f"s{suffix}"
    if suffix == ".toml":
        cfg.write_text('arms = ["oracle"]\ndatasets = ["x"]\nout = "o"\n[agent_options]\noracle = { a = '
                       + "[" * depth + "]" * depth + " }\n")
    else:
        cfg.write_text("arms: [oracle]\ndatasets: [x]\nagent_options:\n  oracle:\n    a: " + "[" * depth + "]" * depth + "\n")
    line = one_line_exit_2(capsys, main(["sweep", str(cfg), "--dry-run"]))
    assert "nested more than 32 levels" in line


def test_moderately_nested_config_past_the_limit_is_one_line(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "s.yaml"
    cfg.write_text("arms: [oracle]\ndatasets: [x]\nagent_options:\n  oracle:\n    a: " + "[" * 60 + "]" * 60 + "\n")
    line = one_line_exit_2(capsys, main(["sweep", str(cfg), "--dry-run"]))
    assert "nested more than" in line


def test_deeply_nested_agent_option_is_one_line(tiny_dataset, tmp_path: Path, capsys) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    rc = main(run_argv(tiny_dataset.root, tmp_path, "--agent-option", f"x={deep}"))
    assert "nested more than 32 levels" in one_line_exit_2(capsys, rc)


# --- paths, disks, options ----------------------------------------------------------------------
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_full_disk_and_read_only_folder_are_one_line(tiny_dataset, tmp_path: Path, capsys, monkeypatch, code) -> None:
    import countgym.runner as runner

    def fail(path: Path, *a: object, **k: object) -> None:
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(runner, "write_cell_header", fail)
    line = one_line_exit_2(capsys, main(run_argv(tiny_dataset.root, tmp_path)))
    assert ("space" in line) if code == errno.ENOSPC else ("read-only" in line)


def test_full_disk_while_appending_is_one_line(tiny_dataset, tmp_path: Path, capsys, monkeypatch) -> None:
    import countgym.logs as logs

    def fail(self: LogWriter, record: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    monkeypatch.setattr(logs.LogWriter, "append", fail)
    assert "space" in one_line_exit_2(capsys, main(run_argv(tiny_dataset.root, tmp_path)))


def test_nul_in_a_manifest_path_is_one_line(tiny_dataset, tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    shutil.copytree(tiny_dataset.root, data)
    lines = (data / "manifest.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["image"] = "images/a\u0000.png"
    (data / "manifest.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    line = one_line_exit_2(capsys, main(run_argv(data, tmp_path / "out")))
    assert "NUL" in line


@pytest.mark.parametrize("out", ["", "  "])
def test_empty_out_is_refused(tiny_dataset, tmp_path: Path, capsys, monkeypatch, out: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:  # argparse's own one-line error
        main(["run", "--data", str(tiny_dataset.root), "--agent", "oracle", "--out", out, "--no-progress"])
    one_line_exit_2(capsys, e.value.code)
    assert not list(tmp_path.glob("*.jsonl"))


def test_unknown_option_of_a_scripted_agent_is_one_line(tiny_dataset, tmp_path: Path, capsys) -> None:
    rc = main(run_argv(tiny_dataset.root, tmp_path, "--agent-option", "x=1"))
    assert "oracle" in one_line_exit_2(capsys, rc)


def test_empty_out_in_a_sweep_is_refused(tiny_dataset, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "s.yaml"
    cfg.write_text(f"out: ''\narms: [oracle]\ndatasets: [{json.dumps(str(tiny_dataset.root))}]\n")
    one_line_exit_2(capsys, main(["sweep", str(cfg)]))
    one_line_exit_2(capsys, main(["sweep", str(cfg), "--dry-run"]))
    assert not list(tmp_path.glob("*.jsonl"))


def test_library_run_cell_refuses_empty_out(tiny_dataset, tmp_path: Path, monkeypatch) -> None:
    from countgym.errors import UserError

    monkeypatch.chdir(tmp_path)
    from countgym.runner import CellSpec, run_cell

    with pytest.raises(UserError, match="--out"):
        run_cell(CellSpec(dataset=str(tiny_dataset.root), agent="oracle"), "", progress=False)


def test_dry_run_validates_what_the_run_validates(tiny_dataset, tmp_path: Path, capsys) -> None:
    # A dataset whose manifest names a missing image: the run refuses it before any episode.
    data = tmp_path / "data"
    shutil.copytree(tiny_dataset.root, data)
    next((data / "images").iterdir()).unlink()
    cfg = tmp_path / "s.yaml"
    cfg.write_text(f"out: {json.dumps(str(tmp_path / 'runs'))}\narms: [oracle]\ndatasets: [{json.dumps(str(data))}]\n")
    dry = one_line_exit_2(capsys, main(["sweep", str(cfg), "--dry-run"]))
    run = one_line_exit_2(capsys, main(["sweep", str(cfg), "--no-progress"]))
    assert dry == run and "missing" in dry


# --- bounds -------------------------------------------------------------------------------------
def test_video_total_pixels_are_bounded(tiny_countvideo: Path, monkeypatch) -> None:
    import countgym.stimulus as stimulus
    from countgym.envs.video_env import load_frames
    from countgym.errors import UserError

    ds = Dataset(tiny_countvideo)
    stim = ds.stimuli[0]
    assert load_frames(ds, stim).shape[0] == len(stim.frames)
    per_frame = 64 * 36
    monkeypatch.setattr(stimulus, "MAX_VIDEO_PIXELS", per_frame * 3, raising=False)
    with pytest.raises(UserError, match="MP"):
        load_frames(ds, stim)


def test_video_pixel_bound_reads_headers_only(tmp_path: Path) -> None:
    from PIL import Image

    from countgym.envs.video_env import load_frames
    from countgym.errors import UserError
    from countgym.stimulus import Stimulus

    # Ten frames of 8000 x 4000 (32 MP each, under the per-frame limit): 320 MP in all.
    (tmp_path / "f").mkdir()
    rels = []
    for i in range(10):
        rel = f"f/{i}.png"
        Image.new("1", (8000, 4000)).save(tmp_path / rel)
        rels.append(rel)
    write_manifest(tmp_path, [Stimulus(id="v", n=1, obj="things", obj_sing="thing", frames=rels)])
    ds = Dataset(tmp_path)
    t0 = time.perf_counter()
    with pytest.raises(UserError, match="MP"):
        load_frames(ds, ds["v"])
    assert time.perf_counter() - t0 < 2  # refused from the headers, nothing decoded


def test_audit_cuts_a_record_with_too_many_tags(tiny_dataset, tmp_path: Path) -> None:
    import pandas as pd

    from countgym.analysis.audit import audit_episodes

    assert main(run_argv(tiny_dataset.root, tmp_path)) == 0
    recs = sorted(read_records([tmp_path]), key=lambda r: r.episode_id)
    crafted = recs[0].model_copy(update={"tags": [(float(i % 700), float(i // 700)) for i in range(6000)]})
    huge = recs[1].model_copy(update={"tags": [(1.0, 1.0)] * 20_000})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        df = audit_episodes([crafted, huge, recs[2]], resolve=lambda name: tiny_dataset)
        took = time.perf_counter() - t0
    assert took < 5
    cut = df.set_index("episode_id")["audit_cut"]
    assert "6000 tags" in cut[crafted.episode_id] and "20000 tags" in cut[huge.episode_id]
    assert pd.isna(cut[recs[2].episode_id])
    assert df.set_index("episode_id")["audited"].tolist() == [False, False, True]
    lines = [str(w.message) for w in caught if "not point-audited" in str(w.message)]
    assert len(lines) == 1 and crafted.episode_id in lines[0] and huge.episode_id in lines[0]


def test_traversal_tau_memory_is_bounded_and_exact() -> None:
    import tracemalloc

    import numpy as np

    from countgym.analysis.correlation import kendall_tau_b
    from countgym.analysis.order import traversal_tau

    rng = np.random.default_rng(3)
    for n in (257, 700):  # past the cached pairs: the blocked sum gives the same float
        y = rng.integers(0, 40, n).astype(float)
        assert traversal_tau(np.c_[np.zeros(n), y]) == kendall_tau_b(np.arange(n), y)
    tags = np.c_[np.zeros(6000), rng.random(6000)]
    tracemalloc.start()
    try:
        traversal_tau(tags)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200e6, f"{peak / 1e6:.0f} MB for 6,000 tags"


@pytest.mark.slow  # a whole audit and report under tracemalloc (about 7 s of CPU)
def test_whole_audit_of_a_record_with_20000_tags_is_bounded(tiny_dataset, tmp_path: Path) -> None:
    import tracemalloc

    from countgym.analysis import write_audit

    assert main(run_argv(tiny_dataset.root, tmp_path / "runs")) == 0
    log = next((tmp_path / "runs").glob("*.jsonl"))
    recs = sorted(read_records([log]), key=lambda r: r.episode_id)
    recs[0] = recs[0].model_copy(update={"tags": [(float(i % 700), float(i // 700)) for i in range(20_000)]})
    log.write_text("".join(r.model_dump_json() + "\n" for r in recs))
    tracemalloc.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            write_audit([tmp_path / "runs"], tmp_path / "audit", resolve=lambda name: tiny_dataset)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 600e6, f"{peak / 1e6:.0f} MB"
    assert any("not point-audited" in str(w.message) and recs[0].episode_id in str(w.message) for w in caught)
    with (tmp_path / "audit" / "episodes.csv").open(newline="") as f:
        rows = {r["episode_id"]: r for r in csv.DictReader(f)}
    assert rows[recs[0].episode_id]["audit_cut"].startswith("20000 tags")
    assert rows[recs[1].episode_id]["audit_cut"] == ""


def test_unwritable_out_is_refused_by_dry_run_and_run_alike(tiny_dataset, tmp_path: Path, capsys, monkeypatch) -> None:
    import countgym.runner as runner

    real = os.access
    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setattr(runner.os, "access", lambda p, mode: False if Path(p) == ro else real(p, mode))
    cfg = tmp_path / "s.yaml"
    cfg.write_text(f"out: {json.dumps(str(ro / 'runs'))}\narms: [oracle]\ndatasets: [{json.dumps(str(tiny_dataset.root))}]\n")
    dry = one_line_exit_2(capsys, main(["sweep", str(cfg), "--dry-run"]))
    run = one_line_exit_2(capsys, main(["sweep", str(cfg), "--no-progress"]))
    assert dry == run and "not writable" in dry
    assert not (ro / "runs").exists()
