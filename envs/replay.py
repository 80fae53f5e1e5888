"""Re-render any observation of a logged episode from the log plus the stimulus.

The log stores state deltas per step (tags added/cleared, erased regions, grid flag,
perturbation, crop box); replaying them through the same renderer gives the exact pixels the
policy saw.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from countgym.envs.common import fit_long_side
from countgym.envs.image_env import MAX_LONG_SIDE
from countgym.envs.render import crop_view, render_working_image
from countgym.errors import UserError
from countgym.logs import EpisodeRecord
from countgym.stimulus import Dataset

PNG_OPTIONS = {"format": "PNG", "compress_level": 6, "optimize": False}


def replay_observation(record: EpisodeRecord, dataset: Dataset, k: int | None = None) -> np.ndarray:
    """The observation image after ``k`` steps (0 = the first observation; default: the last)."""
    n_steps = len(record.steps)
    k = n_steps if k is None else k
    if not 0 <= k <= n_steps:
        raise UserError(f"--step must be in [0, {n_steps}] for episode {record.episode_id}, got {k}")
    stim = dataset[record.stimulus_id]
    if record.stimulus_hash and dataset.content_hash(stim) != record.stimulus_hash:
        raise UserError(
            f"stimulus {stim.id!r} in {dataset.root} differs from the one the episode saw (hash mismatch)"
        )
    original = fit_long_side(dataset.load_image(stim), MAX_LONG_SIDE)
    tags: list[tuple[float, float]] = []
    erased: list[dict] = []
    grid = False
    crop_box = None
    for step in record.steps[:k]:
        if step.tags_cleared:
            tags = []
        tags.extend(tuple(p) for p in step.tags_added)
        pert = step.perturbation or {}
        if pert.get("kind") == "remove" and "index" in pert:
            del tags[int(pert["index"])]
        elif pert.get("kind") == "add" and "xy" in pert:
            tags.append(tuple(pert["xy"]))
        erased.extend(step.erased_added)
        if step.grid is not None:
            grid = step.grid
        crop_box = step.crop_box
    numbered = bool(record.env_options.get("numbered", True))
    img = render_working_image(original, tags, erased, grid, numbered=numbered)
    if k > 0 and crop_box is not None:
        img = crop_view(img, tuple(crop_box))
    return np.asarray(img)


def encode_png(image: np.ndarray) -> bytes:
    """PNG bytes with fixed settings (same pixels -> same bytes)."""
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, **PNG_OPTIONS)
    return buf.getvalue()


def write_png(image: np.ndarray, path: str | Path) -> Path:
    """Write an observation image as PNG with the fixed settings."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_png(image))
    return path
