"""Re-render any observation of a logged episode from the log plus the stimulus.

Every task replays through the function its environment uses to build the observation:

- image tool loop: the log stores state deltas per step (tags added/cleared, erased regions,
  grid flag, perturbation, crop box); replaying them through the same renderer gives the exact
  pixels the policy saw;
- CounterCount: the image fitted as shown, blurred outside the attribute box when the episode
  ran with ``blur`` (radius and feathering from the logged options); the cue, generic-name,
  thinking and attention options change no pixels;
- CountVideoBench: the sampled frames (T x H x W x 3), resized with the logged ``max_side``;
  :func:`contact_sheet` lays them out as one image.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from countgym.envs.common import fit_long_side
from countgym.envs.image_env import MAX_LONG_SIDE
from countgym.envs.render import crop_view, render_working_image
from countgym.errors import UserError
from countgym.logs import EpisodeRecord
from countgym.stimulus import Dataset

PNG_OPTIONS: dict[str, Any] = {"format": "PNG", "compress_level": 6, "optimize": False}


def episode_task(record: EpisodeRecord) -> str:
    """The task an episode ran: ``image``, ``countercount`` or ``video``."""
    return str(record.env_options.get("task", "image"))


def replay_observation(record: EpisodeRecord, dataset: Dataset, k: int | None = None) -> np.ndarray:
    """The observation after ``k`` steps (0 = the first observation; default: the last).

    An H x W x 3 image, or T x H x W x 3 frames for a video episode. Single-step tasks show
    the same pixels before and after their one step.
    """
    n_steps = len(record.steps)
    k = n_steps if k is None else k
    if not 0 <= k <= n_steps:
        raise UserError(f"--step must be in [0, {n_steps}] for episode {record.episode_id}, got {k}")
    stim = dataset[record.stimulus_id]
    if record.stimulus_hash and dataset.content_hash(stim) != record.stimulus_hash:
        raise UserError(
            f"stimulus {stim.id!r} in {dataset.root} differs from the one the episode saw (hash mismatch)"
        )
    task = episode_task(record)
    opts = record.env_options
    try:
        if task == "countercount":
            from countgym.envs.cf_env import shown_image

            image, _ = shown_image(
                dataset.load_image(stim),
                stim,
                blur=bool(opts.get("blur", False)),
                blur_radius=float(opts.get("blur_radius", 48.0)),
                feather=float(opts.get("feather", 4.0)),
            )
            return np.asarray(image)
        if task == "video":
            from countgym.envs.video_env import load_frames

            max_side = opts.get("max_side")
            return load_frames(dataset, stim, None if max_side is None else int(max_side))
    except ValueError as e:
        raise UserError(f"cannot replay episode {record.episode_id}: {e}") from None
    if task != "image":
        raise UserError(f"episode {record.episode_id} ran task {task!r}, which replay does not know")
    return _replay_image_task(record, dataset, stim, k)


def first_observation_text(record: EpisodeRecord, dataset: Dataset) -> dict[str, str]:
    """The text of an episode's first observation, rebuilt from its logged environment and
    options: ``system`` (the system prompt, tools and budget of the tool loop), ``user`` (the
    first user message: the question, with the MCQ options on CounterCount) and, under the
    native protocol, ``tools`` (the tool schema). A policy's own system prompt, logged in its
    arm options (``system``), comes first.
    """
    from countgym.tasks import env_for_dataset, make_task_env

    stim = dataset[record.stimulus_id]
    env_id = record.env or env_for_dataset(record.dataset)
    options = {k: v for k, v in record.env_options.items() if k != "task"}
    env = make_task_env(env_id, dataset, options, arm=record.arm.name, model=record.model)
    try:
        prompt_text = getattr(env, "prompt_text", None)
        if prompt_text is None:
            raise UserError(f"environment {env_id} cannot rebuild its first observation's text")
        text = {k: str(v) for k, v in prompt_text(stim).items()}
    finally:
        env.close()
    own = record.arm.options.get("system")
    if isinstance(own, str) and own:
        text["system"] = own + ("\n\n" + text["system"] if text.get("system") else "")
    return text


def _replay_image_task(record: EpisodeRecord, dataset: Dataset, stim: Any, k: int) -> np.ndarray:
    original = fit_long_side(dataset.load_image(stim), MAX_LONG_SIDE)
    tags: list[tuple[float, float]] = []
    erased: list[dict] = []
    grid = False
    crop_box = None
    for step in record.steps[:k]:
        if step.tags_cleared:
            tags = []
        tags.extend((p[0], p[1]) for p in step.tags_added)
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
        x0, y0, x1, y1 = crop_box
        img = crop_view(img, (x0, y0, x1, y1))
    return np.asarray(img)


SHEET_COLUMNS = 5
SHEET_GAP = 4
"""A contact sheet's columns and white gap (px)."""


def contact_sheet(frames: np.ndarray, *, columns: int = SHEET_COLUMNS, gap: int = SHEET_GAP) -> np.ndarray:
    """The frames of a clip tiled in time order, left to right then top to bottom, on white.

    Each frame keeps its exact pixels (no resizing); ``gap`` white pixels separate the tiles.
    """
    if frames.ndim == 3:
        return frames
    t, h, w = frames.shape[:3]
    cols = max(1, min(columns, t))
    rows = -(-t // cols)
    sheet = np.full((rows * h + (rows - 1) * gap, cols * w + (cols - 1) * gap, 3), 255, np.uint8)
    for i, frame in enumerate(frames):
        r, c = divmod(i, cols)
        sheet[r * (h + gap) : r * (h + gap) + h, c * (w + gap) : c * (w + gap) + w] = frame
    return sheet


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
