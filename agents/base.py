"""The policy interface (agents.md section 1) and plug-in loading.

A policy is any object with ``reset(first_observation, task)`` and ``act(observation)``
returning reply text, a ``Reply`` or a typed action; ``act_batch(observations)`` is optional.
A policy never sees ground truth: ``Task`` carries only what a counting subject may know.
Scripted reference policies that need the truth (``oracle``, ``noisy-pointer``) declare
``uses_truth = True`` and the runner hands them the points explicitly via
``give_truth(points, n)`` (``points`` is None on a count-only stimulus); one that cannot work
without points also declares ``needs_points = True`` and a count-only dataset is refused before
the first episode.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

from countgym.errors import UserError
from countgym.task import Task

__all__ = ["Policy", "Task", "load_policy"]


@runtime_checkable
class Policy(Protocol):
    """Maps observations to actions; never reads ground truth."""

    def reset(self, first_observation: dict[str, Any], task: Task) -> None: ...

    def act(self, observation: dict[str, Any]) -> Any: ...


def load_policy(spec: str, **kwargs: Any) -> Any:
    """Instantiate a policy from a built-in name or ``package.module:ClassName``."""
    from countgym.agents.registry import BUILTIN_POLICIES

    if spec in BUILTIN_POLICIES:
        return BUILTIN_POLICIES[spec](**kwargs)
    if ":" not in spec:
        names = ", ".join(sorted(BUILTIN_POLICIES))
        raise UserError(f"unknown agent {spec!r}: use one of {names} or package.module:ClassName")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UserError(f"cannot import agent module {module_name!r}: {e}") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise UserError(f"module {module_name!r} has no attribute {attr!r}")
    try:
        policy = cls(**kwargs)
    except TypeError as e:
        raise UserError(f"cannot construct agent {spec!r}: {e}") from None
    if not (hasattr(policy, "reset") and hasattr(policy, "act")):
        raise UserError(
            f"agent {spec!r} has no reset(first_observation, task) and act(observation)"
        )
    return policy
