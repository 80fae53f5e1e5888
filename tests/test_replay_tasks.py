"""Replay shows exactly what the policy saw, for every task (CounterCount, video, image loop)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from countgym.cli import main
from countgym.envs.replay import contact_sheet, encode_png, replay_observation
from countgym.logs import read_records
from countgym.registration import IMAGE_ENVS, SINGLE_STEP_ENVS
from countgym.runner import CellSpec, run_cell
from countgym.stimulus import Dataset


class Recorder:
    """Answers at once; subclasses keep the observation they were shown."""

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        pass

    def act(self, observation: dict[str, Any]) -> str:
        return "I count 3."


@pytest.fixture(scope="module")
def cf_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cfr") / "cc"
    assert main(["scenes", "make", "countercount", "--out", str(out), "--limit", "2", "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def video_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cvr") / "cv"
    assert main(["scenes", "make", "countvideo", "--out", str(out), "--limit", "2", "--size", "64x36", "--no-progress"]) == 0
    return out


def _run(data: Path, agent: str, env_options: dict[str, Any], out: Path) -> list[tuple[Any, np.ndarray]]:
    """Run the cell with a recording policy; (record, observation seen) per episode."""
    seen: list[np.ndarray] = []

    class Rec(Recorder):
        def reset(self, first_observation: dict[str, Any], task: Any) -> None:
            key = "frames" if "frames" in first_observation else "image"
            seen.append(first_observation[key].copy())

    spec = CellSpec(dataset=str(data), agent=agent, env_options=env_options)
    res = run_cell(spec, out, policy_factory=Rec, concurrency=1, progress=False)
    recs = read_records([res.log])
    assert len(recs) == len(seen) > 0
    return list(zip(recs, seen, strict=True))


# Every CounterCount option that changes pixels (blur, its radius, its feathering), and options
# that change none (cue, generic names) as controls.
CF_OPTIONS = [
    {},
    {"blur": True},
    {"blur": True, "blur_radius": 12.0, "feather": 0.0},
    {"blur": True, "blur_radius": 80.0, "feather": 16.0},
    {"blur": True, "cue": True, "generic": True},
]


@pytest.mark.slow
@pytest.mark.parametrize("options", CF_OPTIONS, ids=lambda o: "+".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_countercount_replay_is_the_observation(cf_data: Path, tmp_path: Path, options: dict[str, Any]) -> None:
    ds = Dataset(cf_data)
    for rec, seen in _run(cf_data, "cf-oe", options, tmp_path):
        for k in (0, None):
            again = replay_observation(rec, ds, k)
            assert again.shape == seen.shape
            assert encode_png(again) == encode_png(seen), (rec.episode_id, options)
        if options.get("blur"):  # the blur really changed pixels: replaying sharp would fail
            assert encode_png(np.asarray(ds.load_image(ds[rec.stimulus_id]).convert("RGB"))) != encode_png(seen)


@pytest.mark.parametrize("max_side", [None, 40, 16])
def test_video_replay_is_the_observation(video_data: Path, tmp_path: Path, max_side: int | None) -> None:
    ds = Dataset(video_data)
    opts = {} if max_side is None else {"max_side": max_side}
    for rec, seen in _run(video_data, "video-p1", opts, tmp_path):
        again = replay_observation(rec, ds, 0)
        assert again.shape == seen.shape and again.ndim == 4
        assert again.tobytes() == seen.tobytes()
        assert encode_png(replay_observation(rec, ds, None)[3]) == encode_png(seen[3])


def test_every_registered_env_task_is_covered() -> None:
    """The image tool envs share one renderer (tests/test_replay.py); the single-step ones are above."""
    import gymnasium as gym

    from countgym.registration import register_envs

    register_envs()
    entries = {gym.spec(i).entry_point for i in [*IMAGE_ENVS, *SINGLE_STEP_ENVS]}
    assert entries == {
        "countgym.envs.image_env:CountImageEnv",
        "countgym.envs.cf_env:CounterCountEnv",
        "countgym.envs.video_env:CountVideoEnv",
    }


def test_contact_sheet_keeps_every_frame_exactly() -> None:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(7, 5, 6, 3), dtype=np.uint8)
    sheet = contact_sheet(frames, columns=3, gap=2)
    assert sheet.shape == (3 * 5 + 2 * 2, 3 * 6 + 2 * 2, 3)
    for i, f in enumerate(frames):
        r, c = divmod(i, 3)
        assert (sheet[r * 7 : r * 7 + 5, c * 8 : c * 8 + 6] == f).all()
    assert (sheet[5:7] == 255).all()  # the gap row is white


def test_cli_replays_blur_and_video_episodes(cf_data: Path, video_data: Path, tmp_path: Path, capsys) -> None:
    (rec, seen), *_ = _run(cf_data, "cf-oe+blur", {}, tmp_path / "cf")
    log = next((tmp_path / "cf").rglob("*.jsonl"))
    out = tmp_path / "cf.png"
    assert main(["replay", str(log), "--episode", rec.episode_id, "--out", str(out)]) == 0
    assert (np.asarray(Image.open(out)) == seen).all()

    (vrec, vseen), *_ = _run(video_data, "video-p1", {}, tmp_path / "v")
    vlog = next((tmp_path / "v").rglob("*.jsonl"))
    sheet = tmp_path / "sheet.png"
    assert main(["replay", str(vlog), "--episode", vrec.episode_id, "--out", str(sheet)]) == 0
    assert (np.asarray(Image.open(sheet)) == contact_sheet(vseen)).all()
    folder = tmp_path / "frames"
    assert main(["replay", str(vlog), "--episode", vrec.episode_id, "--frames", "--out", str(folder)]) == 0
    files = sorted(folder.glob("frame_*.png"))
    assert len(files) == len(vseen) == 10
    assert [int(p.stem.split("_")[1]) for p in files] == Dataset(video_data)[vrec.stimulus_id].meta["frame_indices"]
    for p, f in zip(files, vseen, strict=True):
        assert (np.asarray(Image.open(p)) == f).all()
    capsys.readouterr()
    assert main(["replay", str(log), "--episode", rec.episode_id, "--frames", "--out", str(folder)]) == 2
    assert "--frames needs a video episode" in capsys.readouterr().err


@pytest.mark.slow
def test_report_viewer_shows_countercount_and_video_episodes(cf_data: Path, video_data: Path, tmp_path: Path) -> None:
    from countgym.analysis.tables import write_audit_files

    _run(cf_data, "cf-oe+blur", {}, tmp_path / "runs")
    _run(video_data, "video-p1", {}, tmp_path / "runs")
    files = write_audit_files([tmp_path / "runs"], tmp_path / "audit")
    html = files.report.read_text()
    assert "Disabled or no episodes" not in html
    start = html.index('id="cg-viewer-data">') + len('id="cg-viewer-data">')
    data = json.loads(html[start : html.index("</script>", start)])
    eps = data["episodes"]
    video = [e for e in eps if e["arm"] == "video-p1"]
    assert len(video) == 2 and len(eps) - len(video) == 4  # 2 videos, 2 CounterCount pairs
    assert all(e["frames"] and e["frames"][0].startswith("data:image/jpeg;base64,") and e["single_step"] for e in eps)
    assert len({e["dataset"] for e in eps}) == 2


@pytest.mark.parametrize("max_side", [None, 40])
def test_viewer_sheet_of_a_video_is_its_replayed_sheet_scaled(video_data: Path, tmp_path: Path,
                                                              max_side: int | None) -> None:
    """The viewer decodes a video's frames at a reduced JPEG scale for its thumbnail: the sheet it
    shows is the replayed observation's contact sheet, scaled (same layout, close pixels), and a
    stimulus that changed since the episode is refused as replay refuses it."""
    from countgym.analysis.overlay import fit_image
    from countgym.analysis.viewer import video_sheet
    from countgym.errors import UserError

    ds = Dataset(video_data)
    opts = {} if max_side is None else {"max_side": max_side}
    for rec, seen in _run(video_data, "video-p1", opts, tmp_path):
        want, _ = fit_image(Image.fromarray(contact_sheet(seen)), 300)
        got = video_sheet(rec, ds, 300)
        assert abs(got.size[0] - want.size[0]) <= 2 and abs(got.size[1] - want.size[1]) <= 2
        a = np.asarray(got.resize(want.size, Image.Resampling.BOX), dtype=float)
        # same frames in the same places (frames in reverse order differ by about 20 on average)
        assert np.abs(a - np.asarray(want, dtype=float)).mean() < 9
        changed = rec.model_copy(update={"stimulus_hash": "0" * 64})
        with pytest.raises(UserError, match="hash mismatch"):
            video_sheet(changed, ds, 300)
