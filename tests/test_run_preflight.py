"""Before and after a cell's episodes: the manifest is checked before the first episode (one
line, exit 2), scripted policies handle count-only data, a run whose episodes all failed exits
non-zero with one line, and the sweep's dry run names what distinguishes its cells."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from countgym.agents.scripted import Oracle
from countgym.cli import main
from countgym.logs import iter_records
from countgym.runner import CellSpec, run_cell
from countgym.stimulus import Dataset, write_manifest
from tests.conftest import make_tiny_dataset

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _count_only(root: Path) -> Dataset:
    """The tiny dataset with its points removed, as PixMo-Count has them (count only)."""
    ds = make_tiny_dataset(root)
    write_manifest(root, [s.model_copy(update={"points": None}) for s in ds])
    return Dataset(root)


def _one_line_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# --------------------------------------------------------------------------- count-only data


def test_oracle_answers_the_count_on_count_only_data(tmp_path: Path) -> None:
    ds = _count_only(tmp_path / "data")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run_cell(CellSpec(dataset=str(ds.root), agent="oracle"), tmp_path / "runs", dataset=ds, progress=False)
    assert res.errors == 0 and res.ran == 3
    recs = list(iter_records([res.log]))
    assert all(r.end == "answer" and r.answer == r.truth.n and not r.tags for r in recs)
    # It says, in its reply, that it cannot point; the announced count is still parsed.
    assert all("cannot point" in r.steps[-1].reply for r in recs)
    assert any("3 of 3 stimuli" in str(w.message) and "no ground-truth points" in str(w.message) for w in caught)


def test_oracle_with_points_still_tags_every_object(tiny_dataset: Dataset, tmp_path: Path) -> None:
    res = run_cell(CellSpec(dataset=str(tiny_dataset.root), agent="oracle"), tmp_path, dataset=tiny_dataset, progress=False)
    recs = list(iter_records([res.log]))
    assert all(r.answer == r.truth.n == len(r.tags) for r in recs)


def test_oracle_without_the_truth_says_so() -> None:
    with pytest.raises(RuntimeError, match="give_truth"):
        Oracle().reset({}, None)  # type: ignore[arg-type]


def test_noisy_pointer_refuses_count_only_data_before_any_episode(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ds = _count_only(tmp_path / "data")
    out = tmp_path / "runs"
    assert main(["run", "--data", str(ds.root), "--agent", "noisy-pointer", "--out", str(out), "--no-progress"]) == 2
    err = _one_line_error(capsys)
    assert "noisy-pointer" in err and "3 of 3 stimuli" in err and "'oracle'" in err
    assert not list(out.glob("*.jsonl"))


# --------------------------------------------------------------------------- the manifest


def test_missing_images_fail_before_any_episode(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ds = make_tiny_dataset(tmp_path / "data")
    (ds.root / "images" / "two.png").unlink()
    (ds.root / "images" / "row.png").unlink()
    out = tmp_path / "runs"
    assert main(["run", "--data", str(ds.root), "--agent", "blob-counter", "--out", str(out), "--no-progress"]) == 2
    err = _one_line_error(capsys)
    assert "2 of 3 stimuli cannot be loaded" in err and "images/two.png is missing" in err and "manifest.jsonl" in err
    assert not list(out.glob("*.jsonl"))
    # --limit 1 runs only "four", whose image is there.
    assert main(["run", "--data", str(ds.root), "--agent", "blob-counter", "--out", str(out), "--no-progress", "--limit", "1"]) == 0


def test_a_file_that_is_not_an_image_fails_before_any_episode(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ds = make_tiny_dataset(tmp_path / "data")
    ds.image_path(ds["row"]).write_text("<html>404 Not Found</html>")  # a dead link saved as the image
    assert main(["run", "--data", str(ds.root), "--agent", "oracle", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = _one_line_error(capsys)
    assert "1 of 3 stimuli cannot be loaded" in err and "images/row.png is not a readable image" in err


def test_image_task_on_a_manifest_without_images(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "manifest.jsonl").write_text(json.dumps({"id": "a", "n": 2, "obj": "dots", "obj_sing": "dot"}) + "\n")
    assert main(["run", "--data", str(root), "--agent", "oracle", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "'a' has no image" in _one_line_error(capsys)


# --------------------------------------------------------------------------- all episodes failed


def _undecodable(root: Path) -> Dataset:
    """Every image file is there but truncated: the check passes, every episode fails."""
    ds = make_tiny_dataset(root)
    for s in ds:
        p = ds.image_path(s)
        p.write_bytes(p.read_bytes()[:200])
    return ds


def test_run_whose_episodes_all_fail_exits_1_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ds = _undecodable(tmp_path / "data")
    out = tmp_path / "runs"
    assert main(["run", "--data", str(ds.root), "--agent", "blob-counter", "--out", str(out), "--no-progress"]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("countgym: error: all 3 episodes ended in error")
    assert "(first: " in err and str(out) in err
    (log,) = out.glob("*.jsonl")
    assert sum(1 for _ in iter_records([log])) == 3  # nothing lost: the errors are in the log
    # Resuming runs nothing and is not a failure.
    assert main(["run", "--data", str(ds.root), "--agent", "blob-counter", "--out", str(out), "--no-progress"]) == 0


def test_partial_failure_still_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ds = make_tiny_dataset(tmp_path / "data")
    p = ds.image_path(ds["two"])
    p.write_bytes(p.read_bytes()[:200])
    assert main(["run", "--data", str(ds.root), "--agent", "blob-counter", "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    assert "1 errors" in capsys.readouterr().out


def test_sweep_with_a_failed_cell_runs_the_others_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    good = make_tiny_dataset(tmp_path / "good")
    bad = _undecodable(tmp_path / "bad")
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'out = "{tmp_path / "runs"}"\ndatasets = ["{good.root}", "{bad.root}"]\narms = ["blob-counter"]\n')
    assert main(["sweep", str(cfg), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "1 of 2 cells failed entirely" in err and "all 3 episodes ended in error" in err
    logs = sorted((tmp_path / "runs").glob("*.jsonl"))
    assert len(logs) == 2 and all(sum(1 for _ in iter_records([p])) == 3 for p in logs)


# --------------------------------------------------------------------------- dry run


def test_dry_run_shows_every_option_that_differs(capsys: pytest.CaptureFixture) -> None:
    # The template's model ids are placeholders: the cells are listed, then the dry run refuses
    # them with one line, as the run would.
    assert main(["sweep", str(CONFIGS / "finger-thinking-off.toml"), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and "REPLACE:" in captured.err
    lines = captured.out.strip().splitlines()
    cells, summary = lines[:-1], lines[-1]
    assert len(cells) == 12 and summary.startswith("12 cells; common options: ")
    shown = [line.split("  ", 1)[1] for line in cells]  # without the log name
    assert len(set(shown)) == len(shown)  # no two cells look alike
    assert sum("thinking=False" in s for s in shown) == 6
    assert "prompt='direct'" in summary and "prompt=" not in " ".join(shown)


def test_dry_run_redacts_credentials(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text(
        'datasets = ["dotarrays"]\narms = ["direct"]\nmodels = ["openai/a", "openai/b"]\n'
        '[model_options."openai/a"]\napi_key = "sk-secret-123"\n'
        '[model_options."openai/b"]\napi_base = "http://127.0.0.1:1/v1"\n'  # a keyless local server
    )
    assert main(["sweep", str(cfg), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "sk-secret-123" not in out and "api_key=" in out


@pytest.mark.slow
def test_dry_run_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    cfg = tmp_path / "big.toml"
    # 3 arms x 400 seeds of budgets: far more output than a pipe buffer holds.
    budgets = ", ".join(str(b) for b in range(1, 401))
    cfg.write_text(f'datasets = ["dotarrays"]\narms = ["oracle", "blob-counter", "noisy-pointer"]\nbudgets = [{budgets}]\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "countgym", "sweep", str(cfg), "--dry-run"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=120)
    assert first.startswith(b"dotarrays__oracle__")
    assert err == "" and rc == 141


def test_video_dataset_with_an_image_agent_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from PIL import Image

    root = tmp_path / "video"
    (root / "frames").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "frames" / "f0.jpg")
    (root / "manifest.jsonl").write_text(
        json.dumps({"id": "v", "n": 2, "obj": "cubes", "obj_sing": "cube", "frames": ["frames/f0.jpg"]}) + "\n"
    )
    assert main(["run", "--data", str(root), "--agent", "blob-counter", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "runs on the image task" in _one_line_error(capsys) and not (tmp_path / "r").exists()
