"""The video battery build: parallel workers, resuming an interrupted build, SIGTERM clean-up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from countgym.errors import UserError
from countgym.scenes import cache as cache_mod
from countgym.scenes.video import dataset as vd

SIZE = (48, 32)


def _manifest(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "manifest.jsonl").read_text().splitlines()]


@pytest.mark.slow  # renders videos (about a second of CPU each)
def test_workers_give_the_same_videos_as_one_process(tmp_path: Path) -> None:
    one = vd.make_countvideo(tmp_path / "one", limit=5, size=SIZE, progress=False, workers=1)
    two = vd.make_countvideo(tmp_path / "two", limit=5, size=SIZE, progress=False, workers=2)
    assert _manifest(one) == _manifest(two)
    for st in _manifest(one):
        for rel in st["frames"]:
            assert (one / rel).read_bytes() == (two / rel).read_bytes()


def test_bad_worker_count_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--workers"):
        vd.make_countvideo(tmp_path / "x", limit=2, size=SIZE, progress=False, workers=0)


@pytest.mark.slow  # renders videos (about a second of CPU each)
def test_an_interrupted_build_resumes_where_it_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = vd._make_one
    calls: list[str] = []

    def interrupted(task):  # the fourth video is interrupted half-way through its frames
        if len(calls) == 3:
            folder = Path(task[2]) / "frames" / task[0].stimulus_id
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "f000.jpg").write_bytes(b"half")
            raise KeyboardInterrupt
        calls.append(task[0].stimulus_id)
        return real(task)

    out = tmp_path / "build"
    monkeypatch.setattr(vd, "_make_one", interrupted)
    with pytest.raises(KeyboardInterrupt):
        vd.make_countvideo(out, limit=6, size=SIZE, progress=False, workers=1)
    assert not (out / "manifest.jsonl").exists()
    kept = sorted(p.name for p in (out / "frames").iterdir())
    assert kept == sorted(calls)  # finished videos kept, the half-written one removed

    rendered: list[str] = []
    monkeypatch.setattr(vd, "_make_one", lambda task: rendered.append(task[0].stimulus_id) or real(task))
    vd.make_countvideo(out, limit=6, size=SIZE, progress=False, workers=1)
    assert len(rendered) == 3 and not set(rendered) & set(calls)
    monkeypatch.setattr(vd, "_make_one", real)
    fresh = vd.make_countvideo(tmp_path / "fresh", limit=6, size=SIZE, progress=False, workers=1)
    assert _manifest(out) == _manifest(fresh)


@pytest.mark.slow  # renders videos (about a second of CPU each)
def test_a_finished_video_of_other_parameters_is_rendered_again(tmp_path: Path) -> None:
    out = vd.make_countvideo(tmp_path / "b", limit=2, size=SIZE, progress=False, workers=1)
    first = _manifest(out)
    vd.make_countvideo(out, limit=2, size=(64, 36), progress=False, workers=1)
    assert [m["meta"]["render_size"] for m in _manifest(out)] == [[64, 36]] * 2
    assert first[0]["meta"]["render_size"] == [48, 32]


@pytest.mark.slow  # renders videos (about a second of CPU each)
def test_a_corrupt_done_file_means_not_finished(tmp_path: Path) -> None:
    out = vd.make_countvideo(tmp_path / "c", limit=2, size=SIZE, progress=False, workers=1)
    sid = _manifest(out)[0]["id"]
    (out / "frames" / sid / vd.DONE_FILE).write_text("{not json")
    (out / "frames" / sid / "f000.jpg").unlink(missing_ok=True)
    vd.make_countvideo(out, limit=2, size=SIZE, progress=False, workers=1)
    assert all((out / rel).is_file() for m in _manifest(out) for rel in m["frames"])


_SIGTERM_BUILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from countgym.scenes.video.dataset import cached_countvideo
    cached_countvideo(per_level=1, size=(96, 54), progress=False, cache_root=Path(sys.argv[1]), workers=2)
    """
)


@pytest.mark.slow  # renders videos (about a second of CPU each)
def test_sigterm_keeps_finished_videos_and_stops_the_workers(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _SIGTERM_BUILD, str(tmp_path)], stderr=subprocess.PIPE, text=True)
    partial = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = list(tmp_path.glob(f".*.partial/frames/*/{vd.DONE_FILE}"))
        if len(found) >= 2:
            partial = found[0].parents[2]
            break
        time.sleep(0.05)
    assert partial is not None, "no video finished within 60 s"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert "next run resumes" in err
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    for folder in (partial / "frames").iterdir():
        assert (folder / vd.DONE_FILE).is_file(), f"half-written video {folder.name} left behind"
    kept = len(list((partial / "frames").iterdir()))
    # No render worker outlives the build.
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True, text=True)
    assert ps.stdout.strip() == ""
    # The next build resumes: it ends with the whole set and renders only the missing videos.
    out = vd.cached_countvideo(per_level=1, size=(96, 54), progress=False, cache_root=tmp_path, workers=2)
    assert len(_manifest(out)) == 26 and kept >= 2
    assert not partial.exists()


_SIGTERM_PLAIN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from countgym.scenes.cache import build_once
    def build(tmp):
        (tmp / "big.bin").write_bytes(b"x" * 1000)
        print("started", flush=True)
        time.sleep(60)
    build_once(Path(sys.argv[1]) / "thing", build, items=1, seconds_per_item=1.0)
    """
)


def test_sigterm_removes_the_temp_folder_of_a_plain_build(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _SIGTERM_PLAIN, str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    assert list(tmp_path.glob(".thing.*.tmp"))
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert not list(tmp_path.glob(".thing.*")) or all(p.suffix == ".lock" for p in tmp_path.glob(".thing.*"))
    assert not (tmp_path / "thing").exists()


def test_sigterm_handler_is_restored(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with cache_mod.sigterm_as_interrupt():
        assert signal.getsignal(signal.SIGTERM) is not before
        with pytest.raises(cache_mod.Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) == before


def _tamper(out: Path, sid: str, how: str) -> None:
    folder = out / "frames" / sid
    done = folder / vd.DONE_FILE
    frame = out / json.loads(done.read_text())["stimulus"]["frames"][0]
    if how == "empty frame":
        frame.write_bytes(b"")
    elif how == "cut frame":
        data = frame.read_bytes()
        frame.write_bytes(data[: len(data) // 2])
    elif how == "other frame":  # same size, other bytes
        data = bytearray(frame.read_bytes())
        data[len(data) // 2] ^= 0xFF
        frame.write_bytes(bytes(data))
    elif how == "missing frame":
        frame.unlink()
    elif how in ("wrong count", "no hashes", "other frame list"):
        saved = json.loads(done.read_text())
        if how == "wrong count":
            saved["stimulus"]["n"] += 1
        elif how == "no hashes":  # a record written before hashes were recorded
            del saved["files"]
        else:
            saved["stimulus"]["frames"] = saved["stimulus"]["frames"][:-1]
            del saved["files"][next(iter(saved["files"]))]
        done.write_text(json.dumps(saved))
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["empty frame", *(pytest.param(h, marks=pytest.mark.slow) for h in (
    "cut frame", "other frame", "missing frame", "wrong count", "no hashes", "other frame list"))])
def test_a_resumed_build_checks_every_file_it_keeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    how: str) -> None:
    out = vd.make_countvideo(tmp_path / "v", limit=2, size=SIZE, progress=False, workers=1)
    good = _manifest(out)
    frames = {rel: (out / rel).read_bytes() for m in good for rel in m["frames"]}
    (out / "manifest.jsonl").unlink()  # as an interrupted build leaves it
    bad, kept = good[0]["id"], good[1]["id"]
    _tamper(out, bad, how)
    real = vd._make_one
    rendered: list[str] = []
    monkeypatch.setattr(vd, "_make_one", lambda task: rendered.append(task[0].stimulus_id) or real(task))
    vd.make_countvideo(out, limit=2, size=SIZE, progress=False, workers=1)
    assert rendered == [bad]  # the intact video is kept, the damaged one rendered again
    assert _manifest(out) == good and kept not in rendered
    assert {rel: (out / rel).read_bytes() for m in good for rel in m["frames"]} == frames
