"""Gymnasium edge cases on every registered id: an episode cut short by a wrapper (TimeLimit, or
any other) still yields its ``info["episode_record"]`` with ``end="truncated"``, and the
flattening wrappers refuse the observation space with a message that says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.wrappers import FlattenObservation, TimeLimit

import countgym  # noqa: F401 - registers the ids
from countgym.envs.actions import Tag
from countgym.envs.image_env import CountImageEnv
from countgym.envs.wrappers import TruncationRecord
from countgym.logs import EpisodeRecord, LogWriter, read_records
from countgym.stimulus import Dataset

TAG = '{"tool":"tag","points":[[100,100]]}'
IDS = sorted(i for i in gym.registry if i.startswith("countgym/"))


@pytest.fixture(scope="module")
def datasets(tiny_dataset, tiny_countercount: Path, tiny_countvideo: Path) -> dict[str, Dataset]:
    return {"image": tiny_dataset, "cf": Dataset(tiny_countercount), "video": Dataset(tiny_countvideo)}


def _dataset_for(env_id: str, datasets: dict[str, Dataset]) -> Dataset:
    entry = str(gym.spec(env_id).entry_point)
    return datasets["cf" if "cf_env" in entry else "video" if "video_env" in entry else "image"]


def test_every_image_id_is_registered_with_the_record_wrapper() -> None:
    assert len(IDS) >= 8
    for env_id in IDS:
        spec = gym.spec(env_id)
        if "image_env" in str(spec.entry_point):
            assert [w.name for w in spec.additional_wrappers] == ["TruncationRecord"], env_id


@pytest.mark.parametrize("env_id", IDS)
def test_time_limit_from_make_still_yields_the_record(env_id, datasets) -> None:
    ds = _dataset_for(env_id, datasets)
    env = gym.make(env_id, dataset=ds, max_episode_steps=1)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(TAG)
    assert truncated, env_id
    if isinstance(env.unwrapped, CountImageEnv):
        # The tool loop would have gone on: TimeLimit cut it, and the record says so.
        assert not terminated
        rec = info["episode_record"]
        assert isinstance(rec, EpisodeRecord) and rec.end == "truncated" and info["end"] == "truncated"
        assert rec.answer is None and "answer" not in info
        assert rec.truth is not None and rec.truth.n == ds[rec.stimulus_id].n == info["truth"]["n"]
        assert len(rec.steps) == 1 and len(rec.tags) == 1
        assert env.unwrapped.state.ended  # a second end is not possible
        with pytest.raises(RuntimeError):
            env.unwrapped.step(TAG)
    else:
        # A single-step env ends at its one step by itself: its own end stands.
        assert terminated and info["end"] in ("answer", "invalid")
        assert env.unwrapped.episode_record().end == info["end"]
    env.close()


def test_the_next_episode_starts_clean_after_a_truncation(tiny_dataset) -> None:
    env = gym.make("countgym/DotArrays-v0", dataset=tiny_dataset, max_episode_steps=2)
    for _ in range(2):
        env.reset(seed=0, options={"stimulus_id": "two"})
        env.step(TAG)
        *_, info = env.step(TAG)
        assert info["episode_record"].end == "truncated" and len(info["episode_record"].tags) == 2
    *_, term, trunc, info = (env.reset(seed=0), *env.step('{"tool":"answer","count":2}'))[1:]
    assert term and not trunc and info["end"] == "answer" and info["episode_record"].answer == 2


class CutAfterTwo(gym.Wrapper):
    """A wrapper of a user's own that truncates on its own rule (not TimeLimit)."""

    def reset(self, **kw: Any):
        self.n = 0
        return self.env.reset(**kw)

    def step(self, action: Any):
        obs, r, term, trunc, info = self.env.step(action)
        self.n += 1
        return obs, r, term, trunc or self.n >= 2, info


def test_any_truncating_wrapper_and_the_end_reward(tiny_dataset) -> None:
    env = TruncationRecord(CutAfterTwo(CountImageEnv(tiny_dataset, tools=("tag",), reward="audit", tool_cost=0.25)))
    env.reset(seed=0, options={"stimulus_id": "two"})
    _, r1, _, trunc1, info1 = env.step(Tag(points=[(65, 78)]))
    assert not trunc1 and "episode_record" not in info1 and r1 == -0.25
    _, r2, term, trunc, info = env.step(Tag(points=[(520, 520)]))
    assert trunc and not term and info["episode_record"].end == "truncated"
    # The end reward is paid on the cut step, as on any end: the audit reward of the two tags
    # (both on target) less the call's cost.
    assert r2 == pytest.approx(2.0 - 0.25)


def test_a_hand_built_chain_without_the_wrapper_can_still_end_the_episode(tiny_dataset) -> None:
    env = TimeLimit(CountImageEnv(tiny_dataset), 1)
    env.reset(seed=0)
    *_, trunc, info = env.step(TAG)
    assert trunc and "episode_record" not in info  # the env could not see TimeLimit's cut...
    reward, end_info = env.unwrapped.truncate()  # ...so the caller ends it
    assert end_info["episode_record"].end == "truncated" and reward == 0.0
    assert env.unwrapped.truncate() == (0.0, {})  # once


def test_an_episode_the_env_ended_is_left_as_it_ended(tiny_dataset) -> None:
    env = gym.make("countgym/DotArrays-v0", dataset=tiny_dataset, max_episode_steps=1)
    env.reset(seed=0, options={"stimulus_id": "two"})
    _, reward, term, trunc, info = env.step('{"tool":"answer","count":2}')
    assert term and trunc  # TimeLimit flags the last step too
    assert info["end"] == "answer" and info["episode_record"].end == "answer" and reward == 1.0


def test_truncated_records_write_read_and_audit(tiny_dataset, tmp_path) -> None:
    from countgym.analysis.audit import audit_episodes

    env = gym.make("countgym/DotArrays-v0", dataset=tiny_dataset, max_episode_steps=1)
    env.reset(seed=0, options={"stimulus_id": "two"})
    *_, info = env.step(Tag(points=[(65, 78)]))
    log = tmp_path / "episodes.jsonl"
    w = LogWriter(log)
    w.append(info["episode_record"])
    w.close()
    [back] = read_records([log])
    assert back.end == "truncated" and back.schema_version == 3 and back.answer is None
    row = audit_episodes([back], resolve=lambda _name: tiny_dataset).iloc[0]
    assert row["end"] == "truncated" and not row["correct"] and row["n_tags"] == 1


def test_the_spec_remakes_the_same_chain(tiny_dataset) -> None:
    env = gym.make("countgym/DotArrays-v0", dataset=tiny_dataset, max_episode_steps=3)
    again = gym.make(env.spec)
    assert str(again) == str(env) and isinstance(again, TruncationRecord)


@pytest.mark.parametrize("env_id", IDS)
def test_flattening_is_refused_with_a_clear_message(env_id, datasets) -> None:
    env = gym.make(env_id, dataset=_dataset_for(env_id, datasets))
    with pytest.raises(NotImplementedError, match=r"cannot be flattened: its (images|clips) vary in"):
        FlattenObservation(env)
    for space in env.observation_space.spaces.values():
        if not isinstance(space, gym.spaces.Text):
            with pytest.raises(NotImplementedError, match="cannot be flattened"):
                gym.spaces.flatdim(space)
            with pytest.raises(NotImplementedError, match="cannot be flattened"):
                gym.spaces.flatten(space, space.sample())
    env.close()
