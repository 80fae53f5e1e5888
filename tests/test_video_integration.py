"""CountVideoBench through the real paths: scenes make -> run (litellm, test server) -> audit."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from countgym.analysis.tables import write_audit_files
from countgym.cli import main
from countgym.logs import read_records
from countgym.registration import SINGLE_STEP_ENVS
from countgym.runner import CellSpec, run_cell
from countgym.testing.server import TestServer


def _tiny_video(tmp_path: Path) -> Path:
    out = tmp_path / "cv"
    assert main(["scenes", "make", "countvideo", "--out", str(out), "--limit", "4", "--size", "64x36", "--no-progress"]) == 0
    return out


@pytest.mark.slow
def test_registered_single_step_envs_pass_check_env(tmp_path: Path) -> None:
    tiny = {"countgym/CountVideo-v0": str(_tiny_video(tmp_path))}  # the full set is 2,600 videos
    for env_id in SINGLE_STEP_ENVS:
        env = gym.make(env_id, **({"dataset": tiny[env_id]} if env_id in tiny else {}))
        check_env(env.unwrapped, skip_render_check=True)
        env.close()


@pytest.mark.slow
def test_countvideo_end_to_end(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-video")
    data = _tiny_video(tmp_path)
    with TestServer() as srv:
        for arm in ("video-p1", "video-p3"):
            spec = CellSpec(dataset=str(data), agent=arm, model="openai/blob", agent_options={"api_base": srv.base_url})
            res = run_cell(spec, tmp_path / "runs", concurrency=2, progress=False)
            assert res.ran == 4 and res.errors == 0, res.error_messages
    recs = read_records([tmp_path / "runs"])
    assert {r.env_options["task"] for r in recs} == {"video"} and {r.env_options["prompt"] for r in recs} == {"P1", "P3"}
    assert all(r.steps[0].usage is not None and r.truth is not None for r in recs)
    files = write_audit_files([tmp_path / "runs"], tmp_path / "audit")
    assert 'id="countvideo"' in files.report.read_text()
    assert (tmp_path / "audit" / "countvideo" / "bias.csv").is_file()
    # Table 6 of Appendix F: EM per shape and per colour, one row per model / arm label, over
    # the shapes and colours of the stimuli the episodes saw
    import pandas as pd

    em = pd.read_csv(tmp_path / "audit" / "countvideo" / "em_by_class.csv")
    assert list(em.columns[:4]) == ["model", "n_items", "cube", "sphere"]
    assert sorted(em["model"]) == ["openai/blob / video-p1", "openai/blob / video-p3"]
    assert (em["n_items"] == 4).all()
    epis = pd.read_csv(tmp_path / "audit" / "episodes.csv")
    shapes = set(epis["shape"].dropna())
    assert shapes and all(em[s].notna().all() for s in shapes)
    assert "EM (%) by object class" in files.report.read_text()


@pytest.mark.slow
def test_errored_video_episodes_are_counted_not_scored(tmp_path: Path) -> None:
    """A failed model call is no wrong answer: the bias table leaves it out and counts it."""
    import pandas as pd

    from countgym.analysis.task_sections import write_task_sections

    data = _tiny_video(tmp_path)
    recs = []
    from countgym.envs.video_env import CountVideoEnv

    env = CountVideoEnv(str(data), arm="p", model="m")
    for i, sid in enumerate(s.id for s in env.dataset):
        env.reset(seed=0, options={"stimulus_id": sid})
        env.step(f"ANSWER: {env.dataset[sid].n}")
        rec = env.episode_record()
        if i == 0:  # the first episode's model call failed
            rec = rec.model_copy(update={"end": "error", "answer": None, "error": "[transient] 503"})
        recs.append(rec)
    write_task_sections(recs, tmp_path / "audit")
    bias = pd.read_csv(tmp_path / "audit" / "countvideo" / "bias.csv").set_index("model")
    row = bias.drop(index="Oracle").iloc[0]
    assert (row["errors"], row["n_items"], row["exact_match"], row["coverage"]) == (1, len(recs) - 1, 1.0, 1.0)


@pytest.mark.slow
def test_r80_is_never_fitted_on_video_episodes(tmp_path: Path) -> None:
    """R80 is the image-counting range of Give the Model a Finger: a CountVideoBench run (whose
    battery is its own main set) gets no R80 and no counting-range curve."""
    import pandas as pd

    from countgym.envs.video_env import CountVideoEnv
    from countgym.logs import LogWriter

    data = _tiny_video(tmp_path)
    env = CountVideoEnv(str(data), arm="video-p1", model="m")
    w = LogWriter(tmp_path / "runs" / "video.jsonl")
    for sid in (s.id for s in env.dataset):
        env.reset(seed=0, options={"stimulus_id": sid})
        env.step(f"ANSWER: {env.dataset[sid].n}")
        w.append(env.episode_record())
    w.close()
    write_audit_files([tmp_path / "runs"], tmp_path / "audit")
    epis = pd.read_csv(tmp_path / "audit" / "episodes.csv")
    assert set(epis["task"]) == {"video"}
    summary = pd.read_csv(tmp_path / "audit" / "summary.csv")
    assert summary["r80"].isna().all() and (summary["em"] == 1.0).all()
    assert pd.read_csv(tmp_path / "audit" / "accuracy_by_n.csv").empty
