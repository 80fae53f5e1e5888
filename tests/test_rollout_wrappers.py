"""Wrappers for RL use: EpisodeStats (RecordEpisodeStatistics-compatible), TaskInfo, VectorSafeInfo."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.wrappers import RecordEpisodeStatistics

from countgym.agents.base import Task
from countgym.envs.actions import Answer, Tag
from countgym.envs.image_env import CountImageEnv
from countgym.envs.wrappers import STATS_KEY, EpisodeStats, TaskInfo, VectorSafeInfo, unpack_info


def test_episode_stats_extends_record_episode_statistics(tiny_dataset) -> None:
    inner = RecordEpisodeStatistics(CountImageEnv(tiny_dataset, tools=("tag", "grid"), tool_cost=0.5), stats_key="gym")
    env = EpisodeStats(inner)
    assert isinstance(env, RecordEpisodeStatistics)
    env.reset(seed=0, options={"stimulus_id": "four"})
    env.step(Tag(points=[(130, 130), (390, 260), (650, 780)]))
    env.step("junk")  # invalid: no call spent
    env.step('{"tool":"grid","on":true}')
    env.step(Tag(points=[(900, 900)], mode="replace"))
    *_, info = env.step(Answer(count=4))
    s = info[STATS_KEY]
    assert s["r"] == pytest.approx(-1.5 + 1.0) == info["gym"]["r"]
    assert s["l"] == 5 == info["gym"]["l"] and s["t"] >= 0
    # Three tool calls; "replace" left one tag on the image; answered and correct.
    assert (s["tool_calls"], s["tags"], s["answered"], s["correct"], s["end"]) == (3, 1, True, True, "answer")
    env.reset(seed=0, options={"stimulus_id": "two"})
    for reply in ("a", "b", "c", "d"):  # three re-issues, the fourth invalid reply ends it
        *_, info = env.step(reply)
    s = info[STATS_KEY]
    assert (s["tool_calls"], s["tags"], s["answered"], s["correct"], s["end"]) == (0, 0, False, False, "invalid")
    assert list(env.return_queue) == pytest.approx([-0.5, 0.0]) and list(env.length_queue) == [5, 4]
    assert list(env.tool_call_queue) == [3, 0] and list(env.answered_queue) == [True, False]
    assert list(env.correct_queue) == [True, False] and list(env.tag_queue) == [1, 0]


def test_episode_stats_can_take_gymnasiums_key(tiny_dataset) -> None:
    env = EpisodeStats(CountImageEnv(tiny_dataset), stats_key="episode")
    env.reset(seed=0, options={"stimulus_id": "two"})
    *_, info = env.step(Answer(count=2))
    assert info["episode"]["correct"] and info["episode"]["l"] == 1
    assert info["episode_record"].answer == 2


def test_task_info_carries_what_a_policy_may_know(wide_dataset) -> None:
    env = TaskInfo(CountImageEnv(wide_dataset, tools=("tag", "crop"), budget=4))
    _, info = env.reset(seed=0, options={"stimulus_id": "row"})
    task = info["task"]
    assert isinstance(task, Task)
    assert (task.obj, task.obj_sing, task.image_size, task.tools, task.budget) == (
        "dots", "dot", (1024, 512), ("tag", "crop", "answer"), 4,
    )
    assert task.options["budget"] == 4 and "n" not in task.options


def test_vector_safe_info_round_trip(tiny_dataset) -> None:
    def fn() -> gym.Env:
        return VectorSafeInfo(TaskInfo(CountImageEnv(tiny_dataset)))

    venv = gym.vector.SyncVectorEnv([fn, fn])
    _, infos = venv.reset(seed=0)
    assert set(unpack_info(infos, 1)) == {"calls_left", "tools", "view", "task"}
    # One sub-env ends with an answer, the other keeps going (action dict vs. parse error).
    _, _, term, _, infos = venv.step(('{"tool":"answer","count":3}', "not json"))
    a, b = unpack_info(infos, 0), unpack_info(infos, 1)
    assert term.tolist() == [True, False]
    assert a["answer"] == 3 and a["action"] == {"tool": "answer", "count": 3} and "truth" in a
    assert "action" not in b and b["parse_error"] and "truth" not in b
    venv.close()
