"""Which task a cell runs, decided by its environment, never by its agent.

A cell names a registered environment id (``countgym/CounterCount-v0``) or a dataset; a dataset
belongs to the first task in the registry whose environment class claims it. The environment
class then answers everything task-specific through its hooks:

- ``task`` (class attribute): the task's name, as logged in ``env_options["task"]``;
- ``claims_dataset(name) -> bool``: whether a battery name or folder is this task's;
- ``load_dataset(name) -> Dataset``: how this task reads a battery name or folder;
- ``cell_options(tools=..., budget=..., **options) -> dict``: validated environment options
  for a policy that is not one of the task's arms (plug-ins, scripted policies);
- ``CELL_OPTIONS``: the option names ``cell_options`` accepts (sweep ablation keys).

Nothing here names a task: the registry (``countgym.registration``) lists them.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

import gymnasium

from countgym.errors import UserError
from countgym.registration import TASKS
from countgym.stimulus import Dataset

__all__ = [
    "TASKS",
    "cell_option_keys",
    "default_dataset",
    "env_class",
    "env_for_dataset",
    "load_dataset",
    "make_task_env",
    "task_of_env",
]


@cache
def _import(entry: str) -> Any:
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


def _spec(env_id: str) -> Any:
    import countgym  # noqa: F401 - registers the environments

    try:
        return gymnasium.spec(env_id)
    except gymnasium.error.Error:
        ids = sorted(i for i in gymnasium.registry if i.startswith("countgym/"))
        raise UserError(f"unknown environment {env_id!r}: use one of {', '.join(ids)}") from None


def env_class(env_id: str) -> type:
    """The environment class of a registered id."""
    entry = _spec(env_id).entry_point
    cls = _import(entry) if isinstance(entry, str) else entry
    if not isinstance(cls, type):
        raise UserError(f"environment {env_id!r} is not a class entry point; countgym runs need one")
    return cls


def task_of_env(env_id: str) -> str:
    """The task an environment runs (its class's ``task``; the id for unknown classes)."""
    return str(getattr(env_class(env_id), "task", env_id))


def default_dataset(env_id: str) -> str | None:
    """The dataset an id makes by default (its registered ``dataset`` keyword), if any."""
    dataset = (_spec(env_id).kwargs or {}).get("dataset")
    return None if dataset is None else str(dataset)


def env_for_dataset(dataset: str) -> str:
    """The registered environment id a dataset runs under when no environment is named: the
    id whose default dataset it is, else the default id of the first task that claims it."""
    import countgym  # noqa: F401 - registers the environments

    for env_id, spec in gymnasium.registry.items():
        if env_id.startswith("countgym/") and (spec.kwargs or {}).get("dataset") == dataset:
            return env_id
    entries = list(TASKS.values())
    for entry in entries[:-1]:
        claims = getattr(_import(entry.env_entry), "claims_dataset", None)
        if claims is not None and claims(dataset):
            return entry.default_env
    return entries[-1].default_env


def load_dataset(env_id: str, dataset: str) -> Dataset:
    """A cell's dataset, read the way its environment's task reads it."""
    cls = env_class(env_id)
    loader = getattr(cls, "load_dataset", None)
    if loader is None:
        from countgym.scenes import resolve_dataset

        return resolve_dataset(dataset)
    return loader(dataset)


def cell_option_keys() -> frozenset[str]:
    """Every option name some task's ``cell_options`` accepts (sweep ablation keys)."""
    keys: set[str] = set()
    for entry in TASKS.values():
        keys |= set(getattr(_import(entry.env_entry), "CELL_OPTIONS", ()))
    return frozenset(keys)


def make_task_env(
    env_id: str, dataset: Dataset | str, env_options: dict[str, Any], *, arm: str, model: str
) -> Any:
    """The (unwrapped) environment of a cell, options validated by the environment itself."""
    cls = env_class(env_id)
    try:
        return cls(dataset, arm=arm, model=model, **env_options)
    except (TypeError, ValueError) as e:
        raise UserError(f"cannot make {env_id} with options {env_options}: {e}") from None
