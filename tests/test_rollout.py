"""RL rollouts over vector envs of CountImageEnv: trajectories, rewards, statistics, autoreset
modes, sync vs async, batched policies, failures, trainer formats."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from countgym.envs.image_env import CountImageEnv
from countgym.envs.wrappers import EpisodeStats, TaskInfo, VectorSafeInfo
from countgym.rollout import (
    Trajectory,
    advantages,
    grpo_batch,
    image_env_fns,
    make_vector_env,
    rollout,
)

TRUE_N = {"four": 4, "two": 2, "row": 10}


class TagThenFour:
    """Tags two points, then answers 4 (right only on "four")."""

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        self.k = 0
        self.task = task

    def act(self, observation: dict[str, Any]) -> str:
        self.k += 1
        if self.k == 1:
            return 'Tagging.\n{"tool":"tag","points":[[130,130],[390,260]]}'
        return '{"tool":"answer","count":4}'


class AnswersOnlyForFewDots:
    """Answers at once on images it finds sparse, else replies junk until the env gives up: episodes
    that end with an int answer and with ``answer=None`` end in the same vector step."""

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        dark = (np.asarray(first_observation["image"]).mean(axis=2) < 100).mean()
        self.sparse = dark < 0.004

    def act(self, observation: dict[str, Any]) -> str:
        return "ANSWER: 2" if self.sparse else "hmm"


def _key(t: Trajectory) -> tuple:
    return (t.env_index, t.stimulus_id, tuple(t.rewards), tuple(s.reply for s in t.steps),
            tuple(s.observation for s in t.steps), t.answer, t.end)


def test_trajectories_carry_rewards_replies_and_stats(tiny_dataset) -> None:
    fns = image_env_fns(tiny_dataset, 3, reward="neg_abs_error", tool_cost=0.1)
    trajs = rollout(fns, TagThenFour, 7, seed=0)
    assert len(trajs) == 7 and [t.episode_index for t in trajs] == list(range(7))
    # Unbiased sampling: env i contributes its first k_i episodes, k = (3, 2, 2).
    assert [t.env_index for t in trajs] == [0, 0, 0, 1, 1, 2, 2]
    for t in trajs:
        n = TRUE_N[t.stimulus_id]
        assert t.truth == n and t.answer == 4 and t.end == "answer" and t.terminated and not t.truncated
        assert t.rewards == pytest.approx([-0.1, -abs(4 - n)])
        assert t.steps[0].reply.endswith('{"tool":"tag","points":[[130,130],[390,260]]}')
        assert t.steps[0].action == {"tool": "tag", "points": [[130.0, 130.0], [390.0, 260.0]], "mode": "append"}
        assert t.steps[0].observation == "Count the dots in this image."
        assert t.steps[1].observation.startswith("Tags 1..2 are now drawn")
        assert t.stats["r"] == pytest.approx(t.episode_return) and t.stats["l"] == 2
        assert t.stats["tool_calls"] == 1 and t.stats["tags"] == 2 and t.stats["answered"]
        assert t.stats["correct"] == (n == 4)
        assert t.record is not None and t.record["answer"] == 4 and len(t.record["steps"]) == 2
        assert t.returns_to_go() == pytest.approx([t.episode_return, -abs(4 - n)])
    rows = [r for t in trajs for r in t.to_records()]
    assert len(rows) == 14 and json.loads(json.dumps(rows)) == rows  # JSON-ready, no images
    assert {r["completion_ids"] for r in rows} == {None}  # a text policy has no tokens


def test_same_seed_same_trajectories_sync_and_async(tiny_dataset) -> None:
    fns = image_env_fns(tiny_dataset, 2, reward="exact")
    a = rollout(fns, TagThenFour, 6, seed=3)
    b = rollout(fns, TagThenFour, 6, seed=3, asynchronous=True)
    assert [_key(t) for t in a] == [_key(t) for t in b]
    assert len({t.stimulus_id for t in a}) > 1
    c = rollout(fns, TagThenFour, 6, seed=4)
    assert [t.stimulus_id for t in c] != [t.stimulus_id for t in a]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_mixed_end_states_in_one_vector_step(tiny_dataset, asynchronous: bool) -> None:
    # Gymnasium batches info by the first sub-env's type: answer=2 next to answer=None used to
    # crash the step; VectorSafeInfo (added by make_vector_env) packs the info.
    fns = image_env_fns(tiny_dataset, 3, reward="exact", stimulus_ids=None)
    trajs = rollout(fns, AnswersOnlyForFewDots, 9, seed=0, asynchronous=asynchronous)
    ends = {t.end for t in trajs}
    assert ends == {"answer", "invalid"}
    for t in trajs:
        if t.end == "invalid":
            assert t.answer is None and t.length == 4 and t.truncated and t.stats["answered"] is False
        else:
            assert t.answer == 2 and t.rewards == [float(t.truth == 2)]


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_user_vector_env_in_any_autoreset_mode(tiny_dataset, mode: AutoresetMode) -> None:
    def fn() -> gym.Env:
        return VectorSafeInfo(TaskInfo(EpisodeStats(CountImageEnv(tiny_dataset, reward="neg_abs_error"))))

    venv = gym.vector.SyncVectorEnv([fn, fn], autoreset_mode=mode)
    got = rollout(venv, TagThenFour, 5, seed=1)
    venv.close()
    want = rollout(image_env_fns(tiny_dataset, 2, reward="neg_abs_error"), TagThenFour, 5, seed=1)
    assert [_key(t) for t in got] == [_key(t) for t in want]
    assert all(t.stats["l"] == 2 for t in got)


def test_vector_env_without_task_info_is_a_clear_error(tiny_dataset) -> None:
    venv = gym.vector.SyncVectorEnv([lambda: CountImageEnv(tiny_dataset)] * 2)
    with pytest.raises(ValueError, match="TaskInfo"):
        rollout(venv, TagThenFour, 2)
    venv.close()


def test_stateless_policy_act_batch_gets_all_live_observations(tiny_dataset) -> None:
    class Batch:
        def __init__(self) -> None:
            self.sizes: list[int] = []
            self.resets = 0

        def reset(self, first_observation: dict[str, Any], task: Any) -> None:
            self.resets += 1

        def act(self, observation: dict[str, Any]) -> str:  # pragma: no cover - act_batch wins
            raise AssertionError

        def act_batch(self, observations: list[dict[str, Any]]) -> list[str]:
            self.sizes.append(len(observations))
            return ['{"tool":"answer","count":2}'] * len(observations)

    pol = Batch()
    trajs = rollout(image_env_fns(tiny_dataset, 4), pol, 4, seed=0)
    assert pol.sizes == [4] and pol.resets == 4
    assert all(t.answer == 2 for t in trajs)


def test_policy_failure_ends_its_episode_with_an_error(tiny_dataset) -> None:
    class Flaky(TagThenFour):
        def act(self, observation: dict[str, Any]) -> str:
            if self.task.image_size == (768, 768) and observation["text"].startswith("Tags"):
                raise RuntimeError("boom")
            return super().act(observation)

    trajs = rollout(image_env_fns(tiny_dataset, 2), Flaky, 4, seed=0)
    assert len(trajs) == 4 and {t.end for t in trajs} == {"error"}
    assert all(t.length == 2 and t.record["error"] == "policy failed: RuntimeError: boom" for t in trajs)


def test_policy_reset_failure_is_recorded(tiny_dataset) -> None:
    class BadReset(TagThenFour):
        def reset(self, first_observation: dict[str, Any], task: Any) -> None:
            if task.image_size == (768, 768) and first_observation["text"]:
                raise KeyError("no task for me")

    trajs = rollout(image_env_fns(tiny_dataset, 2), BadReset, 3, seed=0)
    assert len(trajs) == 3 and all(t.end == "error" and t.length == 1 for t in trajs)
    assert trajs[0].record["error"] == "policy reset failed: KeyError: 'no task for me'"


def test_advantages_and_grpo_batch() -> None:
    def traj(sid: str, ret: float, ids: list[int] | None) -> Trajectory:
        from countgym.rollout import Step

        step = Step("m", "r", None, None, ret, token_ids=ids, logprobs=[-1.0] * len(ids or []), prompt_ids=[1, 2] if ids else None)
        return Trajectory(0, 0, sid, [step], True, False, 1, 1, "answer")

    ts = [traj("a", 1.0, [5]), traj("a", 0.0, [6, 7]), traj("b", 3.0, [8]), traj("c", 2.0, None)]
    assert advantages(ts) == pytest.approx([0.5, -0.5, 0.0, 0.0])
    assert advantages(ts, by=None) == pytest.approx([-0.5, -1.5, 1.5, 0.5])
    assert advantages(ts, scale=True)[:2] == pytest.approx([1.0, -1.0], abs=1e-5)
    batch = grpo_batch(ts)
    assert batch["completion_ids"] == [[5], [6, 7], [8]] and batch["env_reward"] == [1.0, 0.0, 3.0]
    assert batch["prompt_ids"] == [[1, 2]] * 3 and batch["logprobs"][1] == [-1.0, -1.0]
    with pytest.raises(ValueError, match="token ids"):
        grpo_batch([ts[3]])


def test_make_vector_env_refuses_nothing_and_wraps_once(tiny_dataset) -> None:
    venv = make_vector_env(image_env_fns(tiny_dataset, 2), asynchronous=True)
    try:
        assert not venv.shared_memory  # shared memory corrupts Text observations
        obs, infos = venv.reset(seed=0)
        assert obs["text"] == ("Count the dots in this image.",) * 2
    finally:
        venv.close()
