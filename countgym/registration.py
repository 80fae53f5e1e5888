"""Declarative, versioned Gymnasium registration of every countgym environment.

Entry points are strings, so registering imports nothing heavy; ``gymnasium.make`` imports the
environment module on first use. Bump an id's version when reward or observation semantics change.
"""

from __future__ import annotations

import gymnasium

_IMAGE_ENV = "countgym.envs.image_env:CountImageEnv"

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
    "countgym/CounterCount-v0": ("countgym.envs.cf_env:CounterCountEnv", {"dataset": "countercount"}),
    "countgym/CountVideo-v0": ("countgym.envs.video_env:CountVideoEnv", {"dataset": "countvideo"}),
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
        )
    for env_id, (entry, kwargs) in SINGLE_STEP_ENVS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry, kwargs=kwargs)
