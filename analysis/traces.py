"""Per-episode facts the principle tests need beyond the episodes table.

``conditions_table`` reads, per record, the order instruction, the tag perturbation, the arm
identity with those two options ignored (to pair an ablation with its baseline) and whether
the stimulus is a transformed copy of another (rotation, mirror). ``tag_history`` replays a
trajectory's tag state step by step, remembering which step drew each tag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from countgym.logs import EpisodeRecord

from .arms import ArmMemo, options_key
from .stimuli import StimulusCache

TRANSFORM_KEY = "transform_of"
"""Stimulus ``meta`` key naming the id of the stimulus this one was transformed from."""
TRANSFORM_KIND_KEY = "transform"
"""Stimulus ``meta`` key naming the transform (``rot180``, ``mirror``, ...)."""
TRANSFORM_SUFFIXES: Mapping[str, str] = {"-rot180": "rot180", "-mirror": "mirror"}
"""Stimulus-id suffixes that mark a transformed copy when its meta says nothing: ``X-rot180``
is ``X`` rotated by 180 degrees."""

HARNESS = -1
"""Provenance of a tag the harness added (tag-perturbation probe)."""

CONDITION_COLUMNS = (
    "episode_id", "order", "perturb", "order_free_key", "perturb_free_key", "transform_of",
    "transform",
)  # fmt: skip


def _option(record: EpisodeRecord, key: str) -> Any:
    value = record.env_options.get(key)
    return value if value is not None else record.arm.options.get(key)


def transform_origin(
    stimulus_id: str,
    meta: Mapping[str, Any] | None,
    *,
    transform_key: str = TRANSFORM_KEY,
    suffixes: Mapping[str, str] = TRANSFORM_SUFFIXES,
) -> tuple[str, str] | None:
    """``(original id, transform kind)`` of a transformed stimulus, else None (meta first)."""
    meta = meta or {}
    origin = meta.get(transform_key)
    if isinstance(origin, str) and origin:
        kind = meta.get(TRANSFORM_KIND_KEY)
        if not isinstance(kind, str) or not kind:
            kind = next((k for s, k in suffixes.items() if stimulus_id.endswith(s)), "transformed")
        return origin, kind
    for suffix, kind in suffixes.items():
        if stimulus_id.endswith(suffix) and len(stimulus_id) > len(suffix):
            return stimulus_id[: -len(suffix)], kind
    return None


def conditions_table(
    records: Sequence[EpisodeRecord],
    stimuli: StimulusCache,
    *,
    transform_key: str = TRANSFORM_KEY,
    suffixes: Mapping[str, str] = TRANSFORM_SUFFIXES,
) -> pd.DataFrame:
    """One row per episode id (first record kept): columns ``CONDITION_COLUMNS``."""
    rows = []
    seen: set[str] = set()
    for rec in records:
        if rec.episode_id in seen:
            continue
        seen.add(rec.episode_id)
        rows.append(condition_row(rec, stimuli, transform_key=transform_key, suffixes=suffixes))
    return pd.DataFrame(rows, columns=list(CONDITION_COLUMNS))


def condition_row(
    rec: EpisodeRecord,
    stimuli: StimulusCache,
    *,
    transform_key: str = TRANSFORM_KEY,
    suffixes: Mapping[str, str] = TRANSFORM_SUFFIXES,
    memo: ArmMemo | None = None,
) -> tuple:
    """One episode's row of ``conditions_table`` (the values of ``CONDITION_COLUMNS``);
    ``memo`` remembers the option keys of option sets seen before."""
    stim = stimuli.stimulus(rec)
    key = memo.options_key if memo is not None else options_key
    origin = transform_origin(
        rec.stimulus_id,
        stim.meta if stim is not None else None,
        transform_key=transform_key,
        suffixes=suffixes,
    )
    return (
        rec.episode_id,
        _option(rec, "order"),
        _option(rec, "perturb"),
        key(rec, ignore=("order",)),
        key(rec, ignore=("perturb",)),
        origin[0] if origin else None,
        origin[1] if origin else None,
    )


@dataclass(frozen=True)
class TagState:
    """The tags on the image after some step, with the position (0-based, in ``steps``) of the
    step that drew each (``HARNESS`` = added by the perturbation probe)."""

    tags: tuple[tuple[float, float], ...]
    drawn_at: tuple[int, ...]


def tag_history(record: EpisodeRecord) -> list[TagState]:
    """Tag state after each step (``len(steps)`` entries), replaying the logged deltas exactly as
    ``countgym.envs.replay`` does (clear, add, then the perturbation)."""
    tags: list[tuple[float, float]] = []
    drawn: list[int] = []
    out: list[TagState] = []
    for k, step in enumerate(record.steps):
        if step.tags_cleared:
            tags, drawn = [], []
        tags.extend((float(x), float(y)) for x, y in step.tags_added)
        drawn.extend([k] * len(step.tags_added))
        pert = step.perturbation or {}
        if pert.get("kind") == "remove" and "index" in pert:
            i = int(pert["index"])
            if 0 <= i < len(tags):
                del tags[i]
                del drawn[i]
        elif pert.get("kind") == "add" and "xy" in pert:
            x, y = pert["xy"]
            tags.append((float(x), float(y)))
            drawn.append(HARNESS)
        out.append(TagState(tuple(tags), tuple(drawn)))
    return out
