"""Rewards for RL (evaluation metrics come from ``countgym.analysis``, not from rewards).

A reward is a callable ``(state, stimulus) -> float`` evaluated once when the episode ends;
the stimulus's points are given in the working-image frame. A per-tool-call cost is applied by
the environment (``tool_cost``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from countgym.matching import match_tags

RewardFn = Callable[[Any, Any], float]


def exact(state: Any, stimulus: Any) -> float:
    """1 for a correct final answer, else 0."""
    return float(state.answer is not None and state.answer == stimulus.n)


def neg_abs_error(state: Any, stimulus: Any) -> float:
    """Minus the absolute error of the announced count (no answer: minus the true count)."""
    if state.answer is None:
        return -float(stimulus.n)
    return -float(abs(state.answer - stimulus.n))


def audit(state: Any, stimulus: Any) -> float:
    """Shaped: on-target tags minus duplicates and phantoms, with the audit's matcher."""
    if stimulus.points is None:
        return 0.0
    m = match_tags(state.tags, stimulus.points)
    return float(m.on_target - m.duplicate - m.phantom)


REWARDS: dict[str, RewardFn] = {"exact": exact, "neg_abs_error": neg_abs_error, "audit": audit}


def resolve_reward(reward: str | RewardFn) -> RewardFn:
    """A built-in reward by name, or the callable itself."""
    if callable(reward):
        return reward
    try:
        return REWARDS[reward]
    except KeyError:
        raise ValueError(f"unknown reward {reward!r}; choose from {sorted(REWARDS)} or pass a callable") from None
