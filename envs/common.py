"""Pieces every task environment shares: the stimulus pool, the seeded pick, the resize rule and
the episode record, so the image, video and CounterCount environments log identically."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from PIL import Image

import countgym
from countgym.logs import ArmSpec, EpisodeRecord, StepRecord, Truth, iso_time, utcnow
from countgym.stimulus import Dataset


def resolve_dataset_arg(
    dataset: str | Dataset, resolve: Callable[[str], Dataset] | None = None
) -> tuple[Dataset, str]:
    """The ``Dataset`` an environment reads and the name its records carry."""
    if isinstance(dataset, Dataset):
        return dataset, dataset.name
    if resolve is None:
        from countgym.scenes import resolve_dataset

        resolve = resolve_dataset
    return resolve(str(dataset)), str(dataset)


def stimulus_pool(dataset: Dataset, stimulus_ids: Sequence[str] | None) -> list[str]:
    """The stimulus ids an environment draws from (every id validated; never empty). A whole
    dataset is validated once per ``Dataset`` object: a runner makes an environment per episode,
    and reading 2,600 stimuli back for each cost about a millisecond an episode."""
    whole = stimulus_ids is None
    pool = dataset.ids() if whole else list(stimulus_ids or ())
    if not pool:
        raise ValueError("stimulus_ids selects no stimuli")
    if whole and getattr(dataset, "_pool_checked", False):
        return pool
    for sid in pool:
        dataset[sid]  # raises for an unknown id (or a manifest line that is no stimulus)
    if whole:
        try:
            dataset._pool_checked = True  # type: ignore[attr-defined]
        except AttributeError:  # a dataset type with slots: checked again next time
            pass
    return pool


def pick_stimulus_id(rng: np.random.Generator, pool: Sequence[str], options: dict[str, Any]) -> str:
    """``options["stimulus_id"]`` when given, else one drawn with the environment's RNG."""
    sid = options.get("stimulus_id")
    return str(sid) if sid is not None else pool[int(rng.integers(len(pool)))]


def fit_long_side(img: Image.Image, max_side: int) -> Image.Image:
    """Resize so the long side is at most ``max_side`` (aspect kept), as before any arm sees it."""
    w, h = img.size
    if max(w, h) <= max_side:
        return img
    k = max_side / max(w, h)
    size = (max(1, math.floor(w * k + 0.5)), max(1, math.floor(h * k + 0.5)))
    return img.resize(size, Image.Resampling.LANCZOS)


REPLY_LIMIT = 65_536
"""Characters of a reply an environment parses and stores: the last ``REPLY_LIMIT`` (where a
final answer is); a longer reply is kept as this tail plus its full length and SHA-256."""


def bound_reply(text: str) -> tuple[str, int | None, str | None]:
    """``(kept, full_length, sha256)``: the reply's last ``REPLY_LIMIT`` characters, and for a
    longer reply its length and hash (else ``None, None``)."""
    if len(text) <= REPLY_LIMIT:
        return text, None, None
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return text[-REPLY_LIMIT:], len(text), digest


def set_reply(rec: StepRecord, text: str) -> str:
    """Store a reply in a step record within ``REPLY_LIMIT``; return the part to parse."""
    kept, full, digest = bound_reply(text)
    rec.reply, rec.reply_chars, rec.reply_sha256 = kept, full, digest
    return kept


def new_episode(seed: int | None, options: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The per-episode bookkeeping an environment keeps from ``reset`` to the record."""
    return {
        "seed": seed,
        "repeat": int(options.get("repeat", 0)),
        "episode_id": options.get("episode_id"),
        "started_at": datetime.now(UTC),  # formatted when the record is built
        **extra,
    }


def build_record(
    env: Any,
    *,
    steps: Sequence[StepRecord],
    answer: int | None,
    end: str | None,
    error: str | None,
    ended: bool,
    image_size: tuple[int, int] | None,
    stimulus_size: tuple[int, int] | None,
    template_hash: str,
    tags: Sequence[tuple[float, float]] = (),
    extracted_by: str | None = None,
) -> EpisodeRecord:
    """The ``EpisodeRecord`` of an environment's current episode (truth only once it ended).

    ``env`` provides ``stimulus``, ``dataset``, ``dataset_name``, ``arm``, ``model``,
    ``options()`` and the ``_episode`` dict made by ``new_episode``.
    """
    stim = env.stimulus
    ep = env._episode
    options = env.options()
    return EpisodeRecord(
        episode_id=ep["episode_id"] or f"{env.arm}/{stim.id}/r{ep['repeat']}",
        stimulus_id=stim.id,
        stimulus_hash=env.dataset.content_hash(stim),
        dataset=str(env.dataset_name),
        arm=ArmSpec(name=env.arm, options=options),
        env_options=options,
        model=env.model,
        seed=int(ep["seed"]) if ep["seed"] is not None else -1,
        repeat=ep["repeat"],
        image_size=image_size,
        stimulus_size=stimulus_size,
        steps=list(steps),
        tags=list(tags),
        answer=answer,
        end=end or "error",  # type: ignore[arg-type]
        error=error,
        extracted_by=extracted_by,  # type: ignore[arg-type]
        truth=Truth(n=stim.n) if ended else None,
        countgym_version=countgym.__version__,
        template_hash=template_hash,
        started_at=iso_time(ep["started_at"]),
        finished_at=utcnow(),
    )


def manifest_head(name: str) -> dict[str, Any] | None:
    """The first record of a dataset folder's ``manifest.jsonl`` (``FOLDER`` or
    ``FOLDER:SUBSET``), or None when ``name`` is no such folder. Tasks use it to claim datasets."""
    import json
    from pathlib import Path

    for candidate in (name, name.rpartition(":")[0]):
        if not candidate:
            continue
        path = Path(candidate).expanduser() / "manifest.jsonl"
        try:
            if not path.is_file():
                continue
            with path.open(encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        head = json.loads(line)
                        return head if isinstance(head, dict) else None
        except (OSError, ValueError):
            return None
    return None


def single_step_cell_options(
    task: str, allowed: frozenset[str], tools: Sequence[str] | None, budget: int | None, options: dict[str, Any]
) -> dict[str, Any]:
    """The environment options of a single-step task's cell: the given ones among ``allowed``
    (``None`` dropped; ``thinking`` is an agent option); tools or a budget are a user error."""
    from countgym.errors import UserError

    options = {k: v for k, v in options.items() if v is not None}
    options.pop("thinking", None)
    bad = set(options) - allowed
    if bad or tools is not None or budget is not None:
        raise UserError(f"{task} takes only {', '.join(sorted(allowed))}; got {sorted(bad) or 'tools/budget'}")
    return options
