"""Gymnasium conventions: stock wrappers, vector envs with default arguments, typed actions in
the action space, ``gym.make("countgym:...")``, cached builds (lock, progress) and ``countgym list``."""

from __future__ import annotations

import io
import multiprocessing as mp
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import RecordEpisodeStatistics
from gymnasium.wrappers.vector import RecordEpisodeStatistics as VectorRecordEpisodeStatistics

from countgym import registration as reg
from countgym.cli import main
from countgym.envs import templates as tpl
from countgym.envs.actions import Answer, Crop, Erase, Grid, Reply, Tag
from countgym.envs.cf_env import CounterCountEnv
from countgym.envs.image_env import CountImageEnv
from countgym.envs.video_env import CountVideoEnv
from countgym.logs import EpisodeRecord
from countgym.scenes.cache import build_once
from countgym.scenes.counterfactual import make_countercount
from countgym.scenes.video.dataset import make_countvideo
from countgym.stimulus import Dataset

ALL = ("tag", "crop", "erase", "grid")


@pytest.fixture(scope="module")
def cf_dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return Dataset(make_countercount(tmp_path_factory.mktemp("cfconv"), limit=2, progress=False))


@pytest.fixture(scope="module")
def video_dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    out = make_countvideo(tmp_path_factory.mktemp("cvconv") / "cv", limit=2, size=(48, 27),
                          progress=False, workers=1)
    return Dataset(out)


def _env_fns(tiny_dataset, cf_dataset, video_dataset):
    return {
        "image": lambda: CountImageEnv(tiny_dataset, tools=ALL),
        "countercount": lambda: CounterCountEnv(cf_dataset, expose_region=True),
        "video": lambda: CountVideoEnv(video_dataset),
    }


# --------------------------------------------------------------------------- stock statistics
def test_stock_record_episode_statistics_on_the_image_env(tiny_dataset) -> None:
    env = RecordEpisodeStatistics(CountImageEnv(tiny_dataset, tools=ALL, tool_cost=0.25))
    env.reset(seed=0, options={"stimulus_id": "two"})
    env.step(Tag(points=[(65, 78), (520, 520)]))
    *_, info = env.step(Answer(count=2))
    assert info["episode"]["r"] == pytest.approx(1.0 - 0.25) and info["episode"]["l"] == 2
    record = info["episode_record"]
    assert isinstance(record, EpisodeRecord) and record.answer == 2 and record.end == "answer"


@pytest.mark.parametrize("task", ["image", "countercount", "video"])
def test_stock_wrappers_on_every_task(task, tiny_dataset, cf_dataset, video_dataset) -> None:
    env = RecordEpisodeStatistics(_env_fns(tiny_dataset, cf_dataset, video_dataset)[task]())
    env.reset(seed=1)
    terminated = truncated = False
    info: dict = {}
    while not (terminated or truncated):
        _, _, terminated, truncated, info = env.step('{"tool":"answer","count":3}\nANSWER: 3')
    assert set(info["episode"]) >= {"r", "l", "t"}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_stock_vector_statistics_with_default_arguments(mode, tiny_dataset) -> None:
    fns = [lambda: CountImageEnv(tiny_dataset, tools=ALL)] * 2
    venv = gym.vector.SyncVectorEnv(fns) if mode == "sync" else gym.vector.AsyncVectorEnv(fns)
    env = VectorRecordEpisodeStatistics(venv)
    try:
        env.reset(seed=[0, 1])
        env.step(['{"tool":"grid","on":true}', Answer(count=4)])
        _, _, term, _, info = env.step([Answer(count=1), '{"tool":"grid","on":false}'])
        assert term.tolist() == [True, False]
        assert info["_episode"].tolist() == [True, False] and info["episode"]["l"][0] == 2
        assert len(env.return_queue) == 2  # sub-env 1 ended on the first step, sub-env 0 now
    finally:
        env.close()


# --------------------------------------------------------------------------- async vector envs
def test_async_vector_env_default_shared_memory_keeps_every_message(tiny_dataset) -> None:
    venv = gym.vector.AsyncVectorEnv([lambda: CountImageEnv(tiny_dataset, tools=ALL)] * 2)
    try:
        assert venv.shared_memory
        obs, _ = venv.reset(seed=[1, 2], options={"stimulus_id": "four"})
        assert obs["system"][0].startswith("You are counting dots") and obs["system"][1] == obs["system"][0]
        assert obs["text"] == ("Count the dots in this image.",) * 2
        obs, *_ = venv.step(['{"tool":"crop","box":[0,0,500,250]}', "d\u00e9j\u00e0 vu \u2014 no JSON"])
        assert obs["text"][0] == tpl.CROP_DONE.format(left=5)
        assert obs["text"][1] == tpl.INVALID.format(left=6)
        assert obs["system"] == ("", "")
        assert obs["image"][0].shape == (512, 1024, 3) and obs["image"][1].shape == (768, 768, 3)
        # The copy handed out must not change when the vector env steps again.
        first = obs
        obs, *_ = venv.step(['{"tool":"grid","on":true}', '{"tool":"tag","points":[[1,1],[2,2]]}'])
        assert first["text"][0] == tpl.CROP_DONE.format(left=5)
        assert obs["text"][0] == tpl.GRID_DONE.format(left=4)
        assert obs["text"][1].startswith("Tags 1..2 are now drawn")
        assert obs["image"][0].shape == (768, 768, 3)
    finally:
        venv.close()


@pytest.mark.parametrize("task", ["countercount", "video"])
def test_async_default_arguments_on_the_single_step_envs(task, tiny_dataset, cf_dataset, video_dataset) -> None:
    fn = _env_fns(tiny_dataset, cf_dataset, video_dataset)[task]
    ref = fn()
    ref_obs, _ = ref.reset(seed=3)
    venv = gym.vector.AsyncVectorEnv([fn, fn])
    try:
        obs, _ = venv.reset(seed=[3, 4])
        key = "frames" if task == "video" else "image"
        assert obs["text"][0] == ref_obs["text"]
        np.testing.assert_array_equal(obs[key][0], ref_obs[key])
        if task == "countercount":
            np.testing.assert_array_equal(obs["region"][0], ref_obs["region"])
    finally:
        venv.close()


def test_async_without_copies_reads_the_live_buffer(tiny_dataset) -> None:
    venv = gym.vector.AsyncVectorEnv([lambda: CountImageEnv(tiny_dataset, tools=ALL)] * 2, copy=False)
    try:
        obs, _ = venv.reset(seed=[1, 2])
        texts = obs["text"]
        assert texts == ("Count the dots in this image.",) * 2
        venv.step(["junk", '{"tool":"grid","on":true}'])
        # Without copies the batch is a view of the shared buffer: it shows the new step.
        assert texts == (tpl.INVALID.format(left=6), tpl.GRID_DONE.format(left=5))
    finally:
        venv.close()


def test_make_vec_async_with_default_arguments(tiny_dataset) -> None:
    venv = gym.make_vec("countgym/DotArrays-v0", num_envs=2, vectorization_mode="async",
                        dataset=tiny_dataset, tools=["tag"])
    try:
        obs, _ = venv.reset(seed=0)
        assert obs["text"] == ("Count the dots in this image.",) * 2
    finally:
        venv.close()


# --------------------------------------------------------------------------- typed actions
def test_action_space_contains_every_action_step_accepts(tiny_dataset, cf_dataset, video_dataset) -> None:
    image = CountImageEnv(tiny_dataset).action_space
    for a in (Tag(points=[(1, 2)]), Crop(box=(0, 0, 9, 9)), Erase(box=(0, 0, 1, 1)), Grid(), Answer(count=3),
              Reply(text="x"), '{"tool":"answer","count":3}'):
        assert image.contains(a), a
    assert not image.contains(3) and not image.contains({"tool": "answer"})
    assert CounterCountEnv(cf_dataset).action_space.contains(Reply(text="3"))
    assert CountVideoEnv(video_dataset).action_space.contains(Answer(count=2))
    assert not CounterCountEnv(cf_dataset).action_space.contains(Tag(points=[]))


# --------------------------------------------------------------------------- gym.make by module
def test_gym_make_with_module_prefix_needs_no_import(tiny_dataset) -> None:
    code = (
        "import sys, gymnasium as gym\n"
        "assert 'countgym' not in sys.modules\n"
        f"env = gym.make('countgym:countgym/DotArrays-v0', dataset={str(tiny_dataset.root)!r})\n"
        "obs, info = env.reset(seed=0)\n"
        "print(obs['text'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Count the dots in this image."


# --------------------------------------------------------------------------- cached builds
def _slow_build(final: str, log: str) -> None:
    def build(tmp: Path) -> None:
        with open(log, "a") as fh:
            fh.write("built\n")
        time.sleep(1.0)
        (tmp / "manifest.jsonl").write_text("")

    build_once(Path(final), build, items=10, seconds_per_item=0.1, stream=io.StringIO())


@pytest.mark.slow
def test_parallel_workers_build_a_cached_dataset_once(tmp_path) -> None:
    final, log = tmp_path / "cache" / "battery-v1", tmp_path / "log"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_slow_build, args=(str(final), str(log))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert log.read_text() == "built\n"
    assert (final / "manifest.jsonl").is_file()


def test_a_cached_build_announces_itself_with_an_estimate(tmp_path) -> None:
    err = io.StringIO()
    build_once(tmp_path / "b-v1", lambda tmp: (tmp / "manifest.jsonl").write_text(""),
               items=2600, seconds_per_item=1.5, stream=err)
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("countgym: building b-v1 (2600 items, estimated 65.0 min)")
    assert lines[-1].startswith("countgym: built b-v1 in ")
    err2 = io.StringIO()
    build_once(tmp_path / "b-v1", lambda tmp: None, stream=err2)
    assert err2.getvalue() == ""  # cached: silent


def test_progress_lines_estimate_the_time_left(capsys) -> None:
    from countgym.scenes.cache import progress_bar

    assert list(progress_bar(range(4), total=4, desc="scenes x", every_s=0.0)) == [0, 1, 2, 3]
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("scenes x: 1/4 done in ") and "left" in err[0]
    assert err[-1].startswith("scenes x: 4/4 done in ") and "left" not in err[-1]


# --------------------------------------------------------------------------- countgym list
def test_countgym_list_names_every_env_battery_arm_and_config(capsys) -> None:
    from countgym.agents.arms import ARMS

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for env_id in [*reg.IMAGE_ENVS, *reg.SINGLE_STEP_ENVS]:
        assert env_id in out
    for arm in ARMS:
        assert f"\n  {arm} " in out
    assert "countvideo      2600" in out and "finger-table1-arms.toml" in out


def test_countgym_list_bad_configs_folder_is_one_line(tmp_path, capsys) -> None:
    assert main(["list", "--configs", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such folder" in err


def test_stock_statistics_on_every_registered_id(tiny_dataset, cf_dataset, video_dataset) -> None:
    ids = sorted(i for i in gym.registry if i.startswith("countgym/"))
    assert len(ids) >= 8
    for env_id in ids:
        entry = str(gym.spec(env_id).entry_point)
        ds = cf_dataset if "cf_env" in entry else video_dataset if "video_env" in entry else tiny_dataset
        env = RecordEpisodeStatistics(gym.make(env_id, dataset=ds))
        env.reset(seed=0)
        done = False
        while not done:
            _, _, term, trunc, info = env.step('{"tool":"answer","count":2}\nANSWER: 2')
            done = term or trunc
        assert info["episode"]["l"] >= 1, env_id
        env.close()


def test_a_long_build_names_a_quicker_set(tmp_path) -> None:
    err = io.StringIO()
    build_once(tmp_path / "c-v1", lambda tmp: (tmp / "manifest.jsonl").write_text(""),
               items=2600, seconds_per_item=1.5, stream=err, tip="for a quick look use --data x:k1")
    assert err.getvalue().splitlines()[0].endswith("; for a quick look use --data x:k1")
