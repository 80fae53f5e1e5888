"""The policy interface (docs/policies.md) and plug-in loading.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from countgym.errors import UserError
from countgym.task import Task

__all__ = ["ArmFamily", "Policy", "Task", "policy_class"]


@runtime_checkable
class Policy(Protocol):
    """Maps observations to actions; never reads ground truth."""

    def reset(self, first_observation: dict[str, Any], task: Task) -> None: ...

    def act(self, observation: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class ArmFamily:
    """A family of built-in model arms, declared by its own module and listed in the registry.

    The runner, sweeps and the CLI treat every family alike through these callables; nothing
    outside the family's module knows its arm names or options.
    """

    tasks: tuple[str, ...]
    """The tasks (``countgym.registration.TASKS`` keys) its arms run on."""
    is_arm: Callable[[str], bool]
    """True for this family's arm names."""
    names: Callable[[], list[str]]
    """The arm names shown in error messages."""
    env_options: Callable[..., dict[str, Any]]
    """``(arm, *, tools=None, budget=None, **ablations)`` -> the arm's environment options
    (``UserError`` on an ablation that does not apply)."""
    backend: Callable[..., Any]
    """``(arm, model, **options)`` -> the ``ChatModel`` a cell's episodes share."""
    policy: Callable[[str, Any], Any]
    """``(arm, backend)`` -> a fresh policy for one episode."""
    check_name: Callable[[str], None] | None = None
    """Raises a ``UserError`` explaining a near-miss name of this family (else returns)."""
    takes: Callable[[str], frozenset[str]] | None = None
    """``(arm)`` -> the option keys (``tools``, ``budget``, ablation keys, ``thinking``) that change
    what the arm sends or does; a sweep leaves the others out for that arm (one cell, one note).
    None: every key its ``env_options`` accepts."""
    audit_hooks: dict[str, Callable[..., Any]] = field(default_factory=dict)
    """Keyword arguments the audit of this family's task takes (``write_audit_files``), e.g.
    the CounterCount ``judge_backend``."""


def policy_class(spec: str) -> Any:
    """The class (or factory) named by ``package.module:ClassName``, not yet instantiated."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        hint = ""
        if getattr(e, "name", None) == module_name.split(".")[0]:
            # The usual cause: a policy file in the working folder, which a console script
            # does not put on sys.path.
            hint = " (if it is a file of yours, put its folder on PYTHONPATH: PYTHONPATH=. countgym ...)"
        raise UserError(f"cannot import agent module {module_name!r}: {e}{hint}") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise UserError(f"module {module_name!r} has no attribute {attr!r}")
    return cls
