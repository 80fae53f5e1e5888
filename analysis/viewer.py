"""Trajectory-viewer data: every step's working image re-rendered from the log, the replies,
and the audit overlay, ready to embed in the HTML report.

Images come from ``countgym.envs.replay.replay_observation`` (the exact pixels the policy
saw), down-scaled and JPEG-encoded as ``data:`` URIs. The viewer holds at most
``max_episodes`` episodes and stops adding episodes once their images pass ``max_bytes``; the
report says when either cap applied. Episodes are chosen as whole stimuli (all arms and
repeats of one stimulus, so they can be compared), spread evenly over the true counts.
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image

from countgym.errors import UserError
from countgym.logs import EpisodeRecord

from .contrasts import arm_sort_key
from .naming import short_dataset
from .overlay import draw_audit_overlay, fit_image
from .source import records_by_id
from .stimuli import StimulusCache


@dataclass(frozen=True)
class ViewerOptions:
    """Size caps of the trajectory viewer."""

    max_episodes: int = 40
    """Episodes shown at most."""
    max_bytes: int = 8_000_000
    """Stop adding episodes once the embedded images pass this many bytes (base64)."""
    thumb_px: int = 384
    """Longer side of each step's image."""
    overlay_px: int = 512
    """Longer side of the audit-overlay image."""
    jpeg_quality: int = 80
    max_reply_chars: int = 4000
    """Longer replies are cut (the log keeps them whole)."""
    max_prompt_chars: int = 8000
    """Longer first-observation texts (system prompt, tool schema) are cut."""


@dataclass(frozen=True)
class ViewerData:
    """The viewer's episodes (JSON-ready dicts) and how the caps applied."""

    episodes: tuple[dict[str, Any], ...]
    total: int
    capped_by: str | None
    n_bytes: int
    options: ViewerOptions

    @property
    def shown(self) -> int:
        return len(self.episodes)


def check_viewer_options(options: ViewerOptions) -> None:
    """Raise ``ValueError`` naming the first bad option."""
    for name in ("max_episodes", "max_bytes", "thumb_px", "overlay_px", "max_reply_chars", "max_prompt_chars"):
        v = getattr(options, name)
        if not isinstance(v, int) or v < 0 or (v == 0 and name != "max_episodes"):
            raise ValueError(f"viewer option {name} must be a positive integer, got {v!r}")
    if not 1 <= options.jpeg_quality <= 95:
        raise ValueError(f"viewer option jpeg_quality must lie in 1..95, got {options.jpeg_quality!r}")


def _jpeg_uri(image: Image.Image, quality: int) -> str:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=quality, optimize=True)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _cut(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f" … [{len(text) - limit} more characters in the log]"


def select_episodes(episodes: pd.DataFrame, max_episodes: int) -> list[str]:
    """Episode ids for the viewer: whole stimuli spread evenly over n, arms in baseline order."""
    if max_episodes <= 0 or episodes.empty:
        return []
    ep = episodes.assign(_n=episodes["n_true"].astype("Float64").fillna(-1))
    stims = ep.groupby(["dataset", "stimulus_id"], sort=False)["_n"].first().reset_index()
    stims = stims.sort_values(["_n", "dataset", "stimulus_id"], kind="stable")
    per_stim = max(1.0, len(ep) / max(1, len(stims)))
    k = min(len(stims), max(1, math.ceil(max_episodes / per_stim)))
    picks = np.unique(np.linspace(0, len(stims) - 1, k).round().astype(int))
    chosen = stims.iloc[picks]
    out: list[str] = []
    for ds, sid in zip(chosen["dataset"], chosen["stimulus_id"], strict=True):
        g = ep[(ep["dataset"] == ds) & (ep["stimulus_id"] == sid)]
        g = g.assign(_k=[arm_sort_key(str(a)) for a in g["arm"]]).sort_values(
            ["_k", "model", "repeat"], kind="stable"
        )
        out.extend(g["episode_id"].tolist())
    return out[:max_episodes]


def _uncropped(record: EpisodeRecord) -> EpisodeRecord:
    """The record with its last crop view removed, so the final replay is the full image."""
    if not record.steps or record.steps[-1].crop_box is None:
        return record
    steps = [*record.steps[:-1], record.steps[-1].model_copy(update={"crop_box": None})]
    return record.model_copy(update={"steps": steps})


def _render(record: EpisodeRecord, stimuli: StimulusCache, opts: ViewerOptions) -> dict[str, Any]:
    from countgym.envs.replay import contact_sheet, episode_task, replay_observation

    out: dict[str, Any] = {"frames": [], "overlay": None, "note": None, "single_step": False, "prompt": None}
    ds = stimuli.dataset(record.dataset)
    if ds is None:
        out["note"] = f"dataset {record.dataset!r} not found: no images"
        return out
    out["prompt"] = _prompt(record, ds, opts)
    try:
        if episode_task(record) == "video":
            # The sampled frames as one sheet, shown before and after the step; nothing to overlay.
            sheet = video_sheet(record, ds, opts.thumb_px * 2)
            out["frames"] = [_jpeg_uri(fit_image(sheet, opts.thumb_px * 2)[0], opts.jpeg_quality)]
            out["single_step"] = True
            return out
        if episode_task(record) != "image":
            # Single-step tasks: one observation (the image), shown before and after the step.
            seen = replay_observation(record, ds, 0)
            img = Image.fromarray(contact_sheet(seen) if seen.ndim == 4 else seen)
            uri = _jpeg_uri(fit_image(img, opts.thumb_px * (2 if seen.ndim == 4 else 1))[0], opts.jpeg_quality)
            out["frames"] = [uri]
            out["single_step"] = True
            return out
        for k in range(len(record.steps) + 1):
            img = Image.fromarray(replay_observation(record, ds, k))
            out["frames"].append(_jpeg_uri(fit_image(img, opts.thumb_px)[0], opts.jpeg_quality))
        gt = stimuli.truth_points(record)
        if gt is not None:
            final = replay_observation(_uncropped(record), ds, None)
            im, _ = draw_audit_overlay(final, record.tags, gt[0], tau=gt[1], max_side=opts.overlay_px)
            out["overlay"] = _jpeg_uri(im, opts.jpeg_quality)
    except (UserError, OSError, ValueError) as e:
        out["note"] = f"images unavailable: {e}"
    return out


def video_sheet(record: EpisodeRecord, dataset: Any, side: int) -> Image.Image:
    """A video episode's sampled frames as a contact sheet (``contact_sheet``'s layout) scaled to
    fit ``side`` px. Each frame is decoded at the smallest scale its JPEG allows that still covers
    its tile (``Image.draft``): a tile of a 768 px sheet of ten full-HD frames is 150 px wide, and
    decoding the full frames was most of a video audit's viewer. The stimulus is checked as
    ``replay_observation`` checks it (same content hash, frames within the pixel limit)."""
    from countgym.envs.replay import SHEET_COLUMNS, SHEET_GAP, contact_sheet
    from countgym.stimulus import check_image_size, check_video_pixels

    stim = dataset[record.stimulus_id]
    if record.stimulus_hash and dataset.content_hash(stim) != record.stimulus_hash:
        raise UserError(f"stimulus {stim.id!r} in {dataset.root} differs from the one the episode saw (hash mismatch)")
    check_video_pixels(dataset, stim)
    rels = list(stim.frames or [])
    if not rels:
        raise ValueError(f"stimulus {stim.id!r} has no frames: not a video dataset")
    max_side = record.env_options.get("max_side")
    frames: list[Image.Image] = []
    tile: tuple[int, int] | None = None
    stored: tuple[int, int] | None = None
    scale = 1.0
    for rel in rels:
        path = dataset.media_path(stim, rel, "frame")
        with Image.open(path) as im:
            check_image_size(im, path)
            if stored is not None and im.size != stored:
                raise ValueError(f"stimulus {stim.id!r}: frames differ in size")
            stored = w, h = im.size
            if max_side is not None and max(w, h) > int(max_side):
                k = int(max_side) / max(w, h)
                w, h = max(1, math.floor(w * k + 0.5)), max(1, math.floor(h * k + 0.5))
            if tile is None:
                cols = max(1, min(SHEET_COLUMNS, len(rels)))
                rows = -(-len(rels) // cols)
                full = (cols * w + (cols - 1) * SHEET_GAP, rows * h + (rows - 1) * SHEET_GAP)
                scale = min(1.0, side / max(full))
                tile = (max(1, round(w * scale)), max(1, round(h * scale)))
            if im.format == "JPEG":
                im.draft("RGB", tile)  # a reduced DCT scale, never below the tile's size
            frame = im.convert("RGB")
        frames.append(frame if frame.size == tile else frame.resize(tile, Image.Resampling.BOX))
    stack = np.stack([np.asarray(f) for f in frames])
    return Image.fromarray(contact_sheet(stack, gap=max(1, round(SHEET_GAP * scale))))


def _prompt(record: EpisodeRecord, dataset: Any, opts: ViewerOptions) -> dict[str, Any] | None:
    """What the model was asked first (system prompt, tools, question), or None when the
    environment cannot rebuild it."""
    from countgym.envs.replay import first_observation_text

    try:
        text = first_observation_text(record, dataset)
    except Exception:  # noqa: BLE001 - a moved dataset or an unknown plug-in environment
        return None
    return {k: _cut(v, opts.max_prompt_chars) for k, v in text.items() if v}


def _step_entry(step: Any, limit: int) -> dict[str, Any]:
    return {
        "k": step.index + 1,
        "reply": _cut(step.reply, limit),
        "action": None if step.action is None else _cut(json.dumps(step.action), limit),
        "parse_error": step.parse_error,
        "message": _cut(step.message, limit),
        "tags_added": len(step.tags_added),
        "cleared": step.tags_cleared,
        "perturbation": None if step.perturbation is None else json.dumps(step.perturbation),
    }


def _value(v: Any) -> Any:
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, np.generic):
        return v.item()
    return v


def build_viewer(
    records: Sequence[EpisodeRecord],
    episodes: pd.DataFrame,
    stimuli: StimulusCache,
    options: ViewerOptions | None = None,
) -> ViewerData:
    """Viewer entries for up to ``options.max_episodes`` episodes (see the module docstring)."""
    opts = options or ViewerOptions()
    check_viewer_options(opts)
    rows = episodes.set_index("episode_id")
    picked = select_episodes(episodes, opts.max_episodes)
    by_id = records_by_id(records, picked)  # only the episodes shown are read
    entries: list[dict[str, Any]] = []
    n_bytes = 0
    capped: str | None = "count" if len(picked) < len(episodes) else None
    for eid in picked:
        if entries and n_bytes > opts.max_bytes:
            capped = "bytes"
            break
        rec = by_id[eid]
        row = rows.loc[eid]
        images = _render(rec, stimuli, opts)
        n_bytes += sum(len(f) for f in images["frames"]) + len(images["overlay"] or "")
        audit = None
        if bool(row["audited"]):
            audit = {k: _value(row[k]) for k in ("on_target", "duplicate", "phantom", "omission")}
        entries.append({
            "id": eid, "dataset": short_dataset(row["dataset"]), "model": str(row["model"]),
            "arm": str(row["arm"]), "stimulus": str(row["stimulus_id"]),
            "repeat": int(row["repeat"]), "n_true": _value(row["n_true"]),
            "answer": _value(row["answer"]), "n_tags": int(row["n_tags"]), "end": str(row["end"]),
            "correct": _value(row["correct"]), "error": _cut(rec.error, opts.max_reply_chars),
            "audit": audit, "steps": [_step_entry(s, opts.max_reply_chars) for s in rec.steps],
            **images,
        })  # fmt: skip
    return ViewerData(tuple(entries), len(episodes), capped, n_bytes, opts)
