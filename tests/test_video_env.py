"""The single-step video environment and the video arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from countgym.agents.video_arm import VideoDirect, video_messages
from countgym.envs.actions import Answer, Reply
from countgym.envs.video_env import PROMPTS, CountVideoEnv, VideoSpace
from countgym.logs import EpisodeRecord, Usage
from countgym.scenes.video import make_countvideo
from countgym.stimulus import Dataset


@pytest.fixture(scope="module")
def video_dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    out = make_countvideo(
        tmp_path_factory.mktemp("cv") / "cv", limit=3, size=(48, 27), progress=False, workers=1
    )
    return Dataset(out)


@pytest.fixture()
def env(video_dataset: Dataset) -> CountVideoEnv:
    return CountVideoEnv(video_dataset, arm="video-direct", model="test")


def test_check_env(video_dataset: Dataset) -> None:
    check_env(CountVideoEnv(video_dataset), skip_render_check=True)


def test_observation_and_no_truth_before_the_end(env: CountVideoEnv) -> None:
    sid = env.dataset.ids()[0]
    obs, info = env.reset(seed=3, options={"stimulus_id": sid})
    s = env.dataset[sid]
    assert obs["frames"].shape == (10, 27, 48, 3) and obs["frames"].dtype == np.uint8
    assert obs["text"] == f"How many {s.meta['color']} {s.meta['shape']}s are in this video?"
    assert "truth" not in info and str(s.n) not in str(info)
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize("prompt", ["P2", "P3"])
def test_other_prompts(video_dataset: Dataset, prompt: str) -> None:
    e = CountVideoEnv(video_dataset, prompt=prompt)
    obs, _ = e.reset(seed=0)
    s = e.stimulus
    assert obs["text"] == PROMPTS[prompt].format(color=s.meta["color"], shape=s.meta["shape"])


def test_correct_reply_rewarded_and_recorded(env: CountVideoEnv) -> None:
    sid = env.dataset.ids()[1]
    env.reset(seed=1, options={"stimulus_id": sid, "repeat": 2})
    n = env.stimulus.n
    reply = Reply(
        text=f"I can see {n} of them.\nANSWER: {n}",
        usage=Usage(prompt_tokens=100, completion_tokens=9),
        cost=0.001,
        latency_s=0.5,
    )
    obs, reward, terminated, truncated, info = env.step(reply)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["answer"] == n and info["truth"] == {"n": n} and info["end"] == "answer"
    rec = env.episode_record()
    EpisodeRecord.model_validate(rec.model_dump(mode="json"))
    assert rec.end == "answer" and rec.answer == n and rec.truth.n == n and rec.repeat == 2
    step = rec.steps[0]
    assert step.reply == reply.text and step.action == {"tool": "answer", "count": n}
    assert step.usage.prompt_tokens == 100 and step.cost == 0.001 and step.latency_s == 0.5
    assert rec.env_options["prompt"] == "P1" and rec.image_size == (48, 27)
    with pytest.raises(RuntimeError):
        env.step("again")


def test_wrong_ambiguous_and_failed_replies(env: CountVideoEnv) -> None:
    env.reset(seed=0)
    n = env.stimulus.n
    _, r, *_ = env.step(str(n + 1))
    assert r == 0.0 and env.episode_record().end == "answer"
    env.reset(seed=0)
    _, r, term, trunc, info = env.step(f"Either {n} or {n + 2}.")
    assert (r, term, trunc, info.get("answer"), info["end"]) == (0.0, True, False, None, "invalid")
    assert "several incompatible" in env.episode_record().steps[0].parse_error
    env.reset(seed=0)
    _, r, term, trunc, info = env.step(Reply(text="", error="HTTP 500"))
    assert (term, trunc, info["end"]) == (False, True, "error")
    assert env.episode_record().error == "HTTP 500" and env.episode_record().truth.n == n
    env.reset(seed=0)
    _, r, *_ = env.step(Answer(count=n))
    assert r == 1.0


def test_neg_abs_error_reward(video_dataset: Dataset) -> None:
    e = CountVideoEnv(video_dataset, reward="neg_abs_error")
    e.reset(seed=0)
    n = e.stimulus.n
    assert e.step(str(n + 3))[1] == -3.0
    e.reset(seed=0)
    assert e.step("many")[1] == -float(n)


def test_same_seed_same_stimulus(video_dataset: Dataset) -> None:
    a, b = CountVideoEnv(video_dataset), CountVideoEnv(video_dataset)
    oa, _ = a.reset(seed=11)
    ob, _ = b.reset(seed=11)
    assert a.stimulus.id == b.stimulus.id and np.array_equal(oa["frames"], ob["frames"])


def test_max_side_resizes_frames(video_dataset: Dataset) -> None:
    e = CountVideoEnv(video_dataset, max_side=24)
    obs, _ = e.reset(seed=0)
    assert obs["frames"].shape[1:] == (14, 24, 3)


def test_video_space() -> None:
    sp = VideoSpace(max_frames=4, max_side=16)
    assert sp.contains(sp.sample())
    assert not sp.contains(np.zeros((5, 8, 8, 3), np.uint8))
    assert not sp.contains(np.zeros((2, 8, 8, 3), np.float32))


class _FakeModel:
    model = "fake"

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def complete(self, messages: list[dict[str, Any]]) -> Reply:
        self.seen.append(messages)
        return Reply(text="ANSWER: 7", usage=Usage(prompt_tokens=1, completion_tokens=1))


def test_video_arm_sends_frames_then_question(env: CountVideoEnv) -> None:
    model = _FakeModel()
    arm = VideoDirect(model)
    obs, _ = env.reset(seed=0)
    arm.reset(obs, None)
    reply = arm.act(obs)
    assert reply.text == "ANSWER: 7"
    (msgs,) = model.seen
    parts = msgs[-1]["content"]
    assert [p["type"] for p in parts] == ["image"] * 10 + ["text"]
    assert parts[-1]["text"] == obs["text"]
    assert np.array_equal(parts[0]["image"], obs["frames"][0])
    _, r, *_ = env.step(reply)
    assert env.episode_record().answer == 7


def test_video_messages_options() -> None:
    frames = np.zeros((2, 4, 4, 3), np.uint8)
    msgs = video_messages(frames, "Q?", frame_labels=True, system="S")
    assert msgs[0]["role"] == "system"
    assert [p.get("text") for p in msgs[1]["content"] if p["type"] == "text"] == [
        "Frame 1 of 2:",
        "Frame 2 of 2:",
        "Q?",
    ]


def test_not_a_video_dataset(tiny_dataset: Dataset) -> None:
    with pytest.raises(ValueError, match="no frames"):
        CountVideoEnv(tiny_dataset)


def test_bad_options(video_dataset: Dataset, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        CountVideoEnv(video_dataset, prompt="P4")
    with pytest.raises(ValueError):
        CountVideoEnv(video_dataset, reward="nope")
