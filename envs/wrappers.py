"""Wrappers for RL use of the image tool environment: episode statistics and the policy's task.

``EpisodeStats`` is Gymnasium's ``RecordEpisodeStatistics`` (same ``r``/``l``/``t`` entries and
``return_queue``/``length_queue``/``time_queue``) plus the counting statistics: tool calls, tags
on the final image, whether the episode ended with an answer and whether it was correct. Its
default info key is ``"episode_stats"``, so it can sit beside Gymnasium's own
``RecordEpisodeStatistics`` (which owns ``info["episode"]``; ``CountImageEnv`` puts its full
episode record in ``info["episode_record"]``).

``TaskInfo`` puts the ``Task`` a policy's ``reset`` needs into the reset info, so vectorised
rollouts (sub-environments in other processes) can start per-episode policies.

``TruncationRecord`` records an episode that a wrapper cut short (Gymnasium's ``TimeLimit``):
the environment cannot see that cut, so this wrapper, outside it, ends the episode as
``end="truncated"`` and adds the record. ``gymnasium.make`` puts it outermost on every countgym
id (``max_episode_steps=`` included); a hand-built chain puts it outside its truncating wrappers.

``VectorSafeInfo`` makes the info safe for Gymnasium's vector envs, which batch each info entry
into an array typed by the FIRST sub-env that reports it: ``answer=3`` in one sub-env and
``answer=None`` in another raises ``TypeError``, and an ``action`` dict next to ``None`` is
silently mangled. It packs each sub-env's whole info into one opaque ``InfoBox`` (batched as an
object array); ``unpack_info(infos, i)`` gives sub-env ``i``'s info back.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium.wrappers import RecordEpisodeStatistics

from countgym.task import Task

STATS_KEY = "episode_stats"
RECORD_KEY = "episode_record"
"""Info key of the full ``EpisodeRecord`` at the end of an image-env episode."""
INFO_KEY = "countgym_info"


class EpisodeStats(RecordEpisodeStatistics):
    """Episode return, length, time, tool calls, tags, answered and correct, in
    ``info[stats_key]`` at the end of each episode and in ``*_queue`` buffers.

    Args:
        env: the environment (``CountImageEnv``, possibly wrapped).
        buffer_length: size of the queues (the last ``buffer_length`` episodes).
        stats_key: info key of the statistics (``"episode"`` makes it a drop-in for Gymnasium's
            wrapper; the default leaves that key to a stock ``RecordEpisodeStatistics``).
    """

    def __init__(self, env: gym.Env, buffer_length: int = 100, stats_key: str = STATS_KEY) -> None:
        super().__init__(env, buffer_length=buffer_length, stats_key=stats_key)
        self.tool_call_queue: deque[int] = deque(maxlen=buffer_length)
        self.tag_queue: deque[int] = deque(maxlen=buffer_length)
        self.answered_queue: deque[bool] = deque(maxlen=buffer_length)
        self.correct_queue: deque[bool] = deque(maxlen=buffer_length)
        self._calls_at_start: int | None = None
        self._tags_added = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        calls = info.get("calls_left")
        self._calls_at_start = int(calls) if calls is not None else None
        self._tags_added = 0
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        self._tags_added += len(info.get("tags_added") or ())
        if self._stats_key in info:  # set by the parent exactly when the episode ended
            stats = info[self._stats_key]
            calls_left = info.get("calls_left")
            # Every accepted tool call spends one call of the budget, so the budget spent is the
            # number of tool calls (invalid replies and the answer spend none).
            tool_calls = (
                self._calls_at_start - int(calls_left)
                if self._calls_at_start is not None and calls_left is not None
                else None
            )
            record = info.get(RECORD_KEY)
            # The record's final tags account for "mode": "replace"; the running sum is a
            # fallback for environments without a record.
            if isinstance(record, dict) and "tags" in record:
                tags = len(record["tags"])
            elif (record_tags := getattr(record, "tags", None)) is not None:
                tags = len(record_tags)
            else:
                tags = self._tags_added
            truth = (info.get("truth") or {}).get("n")
            answer = info.get("answer")
            stats.update(
                tool_calls=tool_calls,
                tags=tags,
                answered=info.get("end") == "answer",
                correct=answer is not None and truth is not None and answer == truth,
                end=info.get("end"),
            )
            self.tool_call_queue.append(tool_calls if tool_calls is not None else 0)
            self.tag_queue.append(tags)
            self.answered_queue.append(stats["answered"])
            self.correct_queue.append(stats["correct"])
        return obs, reward, terminated, truncated, info


class TaskInfo(gym.Wrapper):
    """Adds ``info["task"]``: the ``Task`` (object names, image size, tools, budget, options) that
    a policy's ``reset(first_observation, task)`` takes. Never ground truth."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        info["task"] = task_of(self.env.unwrapped)
        return obs, info


class TruncationRecord(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Completes an episode that a wrapper inside this one truncated before the environment
    ended it: the environment ends it with ``end="truncated"`` (no count; ``truncate()``), and
    the step's info gets what any ended episode's info has (``truth``, ``stimulus_id``, ``end``,
    ``episode_record``) and its reward the end reward. Episodes the environment ended itself,
    and environments without ``truncate()``, pass through unchanged."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        end = getattr(self.env.unwrapped, "truncate", None) if truncated and not terminated else None
        if end is not None:
            extra, end_info = end()
            if end_info:
                reward = float(reward) + extra
                info = {**info, **end_info}
        return obs, reward, terminated, truncated, info


def task_of(env: Any) -> Task:
    """The policy-visible task of the current episode of a (reset) ``CountImageEnv``."""
    stim, state = env.stimulus, env.state
    if stim is None or state is None:
        raise RuntimeError("no episode; call reset() first")
    w, h = state.original.size
    return Task(
        obj=stim.obj,
        obj_sing=stim.obj_sing,
        image_size=(w, h),
        tools=tuple(env.tools),
        budget=int(env.budget),
        options=env.options(),
    )


def has_wrapper(env: gym.Env, cls: type) -> bool:
    """True when ``cls`` is anywhere in ``env``'s wrapper chain."""
    e: Any = env
    while isinstance(e, gym.Wrapper):
        if isinstance(e, cls):
            return True
        e = e.env
    return False


@dataclass(frozen=True)
class InfoBox:
    """One sub-env's complete info, opaque to Gymnasium's info batching."""

    data: dict[str, Any]


class VectorSafeInfo(gym.Wrapper):
    """Packs the info into ``info["countgym_info"]`` (an ``InfoBox``) so vector envs can batch it
    whatever mix of ``None`` and values their sub-envs report. Apply it outermost."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {INFO_KEY: InfoBox(info)}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {INFO_KEY: InfoBox(info)}


def unpack_info(infos: dict[str, Any], i: int) -> dict[str, Any]:
    """Sub-env ``i``'s info from a vector env's batched info (``InfoBox``es unpacked, masks
    applied, nested dicts such as ``final_info`` of the same-step autoreset mode included)."""
    import numpy as np

    out: dict[str, Any] = {}
    for k, v in infos.items():
        if k.startswith("_"):
            continue
        mask = infos.get("_" + k)
        if mask is not None and not mask[i]:
            continue
        if isinstance(v, dict):
            out[k] = unpack_info(v, i)
            continue
        x = v[i]
        if isinstance(x, InfoBox):
            out.update(x.data)
        else:
            out[k] = x.item() if isinstance(x, np.generic) else x
    return out
