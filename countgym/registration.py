"""The registry: every task, its environments and the arm families that run on it.

This is the one module of the core that names tasks. Everything else (the CLI, cells, the run
loop, sweeps, the executors) asks it, so adding a task means adding its folder of modules and
an entry here.

Registration with Gymnasium is declarative and versioned: entry points are strings, so
registering imports nothing heavy; ``gymnasium.make`` imports the environment module on first
use. Bump an id's version when reward or observation semantics change.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium
from gymnasium.envs.registration import WrapperSpec

_IMAGE_ENV = "countgym.envs.image_env:CountImageEnv"
_TRUNCATION_RECORD = WrapperSpec(
    name="TruncationRecord", entry_point="countgym.envs.wrappers:TruncationRecord", kwargs={}
)


@dataclass(frozen=True)
class TaskEntry:
    """One task: its environment class and its default environment id."""

    env_entry: str
    """``module:Class`` of the environment; the class carries the task's hooks
    (``task``, ``claims_dataset``, ``load_dataset``, ``cell_options``, ``CELL_OPTIONS``)."""
    default_env: str
    """The registered id a dataset of this task runs under when no ``--env`` is given."""


TASKS: dict[str, TaskEntry] = {
    # Asked in this order whether a dataset is theirs; the last one (the image tool loop)
    # takes every dataset the others decline.
    "countercount": TaskEntry("countgym.envs.cf_env:CounterCountEnv", "countgym/CounterCount-v0"),
    "video": TaskEntry("countgym.envs.video_env:CountVideoEnv", "countgym/CountVideo-v0"),
    "image": TaskEntry(_IMAGE_ENV, "countgym/DotArrays-v0"),
}

ARM_FAMILIES: tuple[str, ...] = (
    "countgym.agents.arms:ARM_FAMILY",
    "countgym.agents.cf_arm:ARM_FAMILY",
    "countgym.agents.video_arm:ARM_FAMILY",
)
"""``module:attribute`` of each family of built-in model arms (an ``ArmFamily``: the tasks it
supports, its names, its environment options, its backend and policy)."""

DEMO_DATASET = "dotarrays-main:common"
"""What ``countgym demo`` runs on by default."""

# id -> default dataset (battery name) for the image tool environment.
IMAGE_ENVS: dict[str, str] = {
    "countgym/DotArrays-v0": "dotarrays",
    "countgym/DotArraysXL-v0": "dotarrays-xl",
    "countgym/Lattice-v0": "lattice",
    # Photo sets: the release root comes from $COUNTGYM_FSC147_ROOT / $COUNTGYM_PIXMO_ROOT /
    # $COUNTGYM_COUNTBENCH_ROOT, or gym.make(id, dataset=ROOT).
    "countgym/FSC147-v0": "fsc147",
    "countgym/PixMoCount-v0": "pixmo",
    "countgym/CountBench-v0": "countbench",
}
PHOTO_ENVS = frozenset({"countgym/FSC147-v0", "countgym/PixMoCount-v0", "countgym/CountBench-v0"})


# id -> (entry point, default kwargs) for the single-step environments.
SINGLE_STEP_ENVS: dict[str, tuple[str, dict]] = {
    "countgym/CounterCount-v0": (TASKS["countercount"].env_entry, {"dataset": "countercount"}),
    # A short default (one video per cardinality, 26 videos, about half a minute to build);
    # the full 2,600-video battery is dataset="countvideo".
    "countgym/CountVideo-v0": (TASKS["video"].env_entry, {"dataset": "countvideo:k1"}),
}


def register_envs() -> None:
    """Register all environments once (idempotent)."""
    for env_id, dataset in IMAGE_ENVS.items():
        if env_id in gymnasium.registry:
            continue
        gymnasium.register(
            id=env_id,
            entry_point=_IMAGE_ENV,
            kwargs={"dataset": dataset},
            disable_env_checker=False,
            # Outside TimeLimit, so an episode it cuts short still gets its record.
            additional_wrappers=(_TRUNCATION_RECORD,),
        )
    for env_id, (entry, kwargs) in SINGLE_STEP_ENVS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry, kwargs=kwargs)
