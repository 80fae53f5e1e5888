"""Checks a cell must pass before its first episode, so a user's mistake is one line, not a
log full of error episodes: every stimulus's media file exists in the dataset folder, and a
policy that needs ground-truth points gets a dataset that has them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from PIL import Image

from countgym.errors import UserError
from countgym.stimulus import Dataset, Stimulus

_SHOWN = 3  # problems named in the one line; the rest are counted


def check_cell(agent: str, ds: Dataset, ids: Sequence[str], *, env: str) -> None:
    """Raise ``UserError`` (one line) when the cell cannot run in environment ``env``; warn
    when it runs degraded."""
    from countgym.tasks import env_class, env_for_dataset

    stimuli = [ds[sid] for sid in ids]
    needs_image = getattr(env_class(env), "MEDIA", "image") == "image"
    if needs_image and any(s.image is None and s.frames for s in stimuli):
        raise UserError(
            f"{ds.root} holds frames, no images, and {env} shows one image: run it in "
            f"{env_for_dataset(str(ds.root))} (--env) with an agent of that task"
        )
    check_media(ds, stimuli, needs_image=needs_image)
    check_truth(agent, ds, stimuli)


def media_problem(ds: Dataset, stim: Stimulus, *, needs_image: bool) -> str | None:
    """What is wrong with one stimulus's media files (None when they are all present)."""
    if needs_image and stim.image is None:
        return f"{stim.id!r} has no image"
    rels = [stim.image] if stim.image else list(stim.frames or [])
    if not rels:
        return f"{stim.id!r} has neither image nor frames"
    root = ds.root.resolve()
    for rel in rels:
        known = ds.known_media_path(rel)
        if known is not None and known.is_file():  # resolved and checked before, and still there
            continue
        path = (ds.root / rel).resolve()
        if root not in path.parents:
            return f"{stim.id!r}: {rel} is outside the dataset folder"
        if path.exists() and not path.is_file():  # a FIFO named x.png would block its reader
            return f"{stim.id!r}: {rel} is not a regular file"
        if not path.is_file():
            return f"{stim.id!r}: {rel} is missing"
    if stim.image:
        # The header only (cheap): catches a saved error page or a zero-byte file; a truncated
        # body still fails in its episode, and a run where every episode fails exits non-zero.
        try:
            with Image.open(ds.root / stim.image):
                pass
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            return f"{stim.id!r}: {stim.image} is not a readable image ({reason})"
    return None


def check_media(ds: Dataset, stimuli: Sequence[Stimulus], *, needs_image: bool = True) -> None:
    """Every stimulus's image (or frames) is a file inside the dataset folder."""
    problems = [p for s in stimuli if (p := media_problem(ds, s, needs_image=needs_image))]
    if problems:
        shown = "; ".join(problems[:_SHOWN]) + (f"; ... ({len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else "")
        raise UserError(
            f"{ds.root / 'manifest.jsonl'}: {len(problems)} of {len(stimuli)} stimuli cannot be "
            f"loaded ({shown}); fix the manifest or restore the files"
        )


def check_truth(agent: str, ds: Dataset, stimuli: Sequence[Stimulus]) -> None:
    """A policy that tags the ground-truth points (``needs_points``) needs a dataset with points;
    one that only reads the truth (``uses_truth``) is told, once, that it answers the count."""
    probe = _policy_class(agent)
    if not getattr(probe, "uses_truth", False) or not getattr(probe, "points_used", True):
        return
    if all(s.frames for s in stimuli) or all(s.meta.get("kind") in ("factual", "cf") for s in stimuli):
        return  # the single-step tasks have no points to tag: the count is all there is
    count_only = sum(s.points is None for s in stimuli)
    if not count_only:
        return
    if getattr(probe, "needs_points", False):
        raise UserError(
            f"agent {agent!r} perturbs ground-truth points, but {count_only} of {len(stimuli)} "
            f"stimuli in {ds.name} have none (count-only data): use 'oracle' or a dataset with points"
        )
    warnings.warn(
        f"{agent}: {count_only} of {len(stimuli)} stimuli in {ds.name} have no ground-truth points "
        "(count only): it gets their count alone and cannot point there",
        stacklevel=2,
    )


def _policy_class(agent: str) -> Any:
    """The class of a scripted or plug-in policy (not constructed), or None for model arms."""
    import importlib

    from countgym.agents.registry import BUILTIN_POLICIES, is_model_arm

    if agent in BUILTIN_POLICIES:
        return BUILTIN_POLICIES[agent]
    if is_model_arm(agent) or ":" not in agent:
        return None
    module, _, attr = agent.partition(":")
    try:
        return getattr(importlib.import_module(module), attr, None)
    except ImportError:
        return None  # reported when the policy is loaded
