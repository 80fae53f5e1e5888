"""Which task an agent runs: the image tool loop, CounterCount, or CountVideoBench.

One place maps an agent name to its environment class, its dataset resolver and its base
environment options, so the runner, the sweep and the CLI treat every task the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from countgym.stimulus import Dataset

TaskName = Literal["image", "countercount", "video"]


@dataclass(frozen=True)
class TaskInfo:
    """How to build the environment and resolve the dataset of one task."""

    name: TaskName
    env_entry: str
    """``module:Class`` of the environment."""


TASKS: dict[str, TaskInfo] = {
    "image": TaskInfo("image", "countgym.envs.image_env:CountImageEnv"),
    "countercount": TaskInfo("countercount", "countgym.envs.cf_env:CounterCountEnv"),
    "video": TaskInfo("video", "countgym.envs.video_env:CountVideoEnv"),
}


def task_of(agent: str) -> TaskInfo:
    """The task an agent name belongs to (plug-ins and scripted policies run the image task)."""
    from countgym.agents.cf_arm import is_cf_arm

    if is_cf_arm(agent):
        return TASKS["countercount"]
    if "video" in TASKS:
        from countgym.agents.video_arm import is_video_arm

        if is_video_arm(agent):
            return TASKS["video"]
    return TASKS["image"]


def base_env_options(agent: str) -> dict[str, Any]:
    """The environment options an agent needs before any override (arm defaults)."""
    from countgym.agents.registry import is_model_arm

    task = task_of(agent)
    if task.name == "countercount":
        from countgym.agents.cf_arm import parse_cf_arm

        return parse_cf_arm(agent).env_options()
    if task.name == "video":
        from countgym.agents.video_arm import video_env_options

        return video_env_options(agent)
    if is_model_arm(agent):
        from countgym.agents.arms import ARMS

        opts = ARMS[agent].env_options()
        opts["tools"] = list(opts["tools"])
        return opts
    return {}


def resolve_for(agent: str, dataset: str) -> Dataset:
    """The dataset of a cell, resolved the way the agent's task reads it."""
    task = task_of(agent)
    if task.name == "countercount":
        from countgym.scenes.counterfactual import resolve_countercount

        return resolve_countercount(dataset)
    if task.name == "video":
        from pathlib import Path

        root = Path(dataset).expanduser()
        if root.is_dir() and not (root / "manifest.jsonl").is_file():
            from countgym.scenes.video import load_released_countvideo

            return load_released_countvideo(root)
    from countgym.scenes import resolve_dataset


    return resolve_dataset(dataset)


def make_task_env(agent: str, dataset: Dataset | str, env_options: dict[str, Any], *, model: str) -> Any:
    """The environment of a cell's task (options validated by the environment itself)."""
    import importlib

    from countgym.errors import UserError

    module, _, cls = task_of(agent).env_entry.partition(":")
    env_cls = getattr(importlib.import_module(module), cls)
    try:
        return env_cls(dataset, arm=agent, model=model, **env_options)
    except (TypeError, ValueError) as e:
        raise UserError(f"invalid environment options {env_options}: {e}") from None
