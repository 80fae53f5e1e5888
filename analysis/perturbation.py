"""Tag-perturbation probe (*Give the Model a Finger*, Section 4 and Appendix F, Table 20).

After the model's first tag call the harness silently removes one on-target tag or adds one tag
on an untagged object (``StepRecord.perturbation``). Per perturbed trajectory, with ``p`` the
step whose tag call was perturbed and the ground truth in the tag frame:

- remove: the removed object is the object the removed tag was matched to (Hungarian matching
  of the tags standing just before the removal, same tau as the audit). The trajectory
  *repairs* when, in the final matching, that object is matched to a tag drawn after step p
  (the model re-tagged it, possibly while starting over).
- add: no tool deletes a single tag, so the only way to undo the added tag is to start over;
  the trajectory *repairs* when a tag call after step p used ``mode: replace``.
- visible count = number of tags on the final image; emitted count = the model's own tags
  still standing had the harness done nothing = visible + 1 (remove) or visible - 1 (add),
  unless the model started over after step p (then emitted = visible). Among answered
  trajectories whose visible and emitted counts differ, ``visible_share`` is the share
  announcing the visible count and ``emitted_share`` the share announcing the emitted count.
- answer shift = perturbed answer - unperturbed answer of the same model, dataset, stimulus and
  arm (all options equal except ``perturb``), same repeat when it exists, else the first
  repeat; its mean is reported overall and split by repaired / not repaired.

Trajectories where the harness skipped the probe (no on-target tag to remove, no untagged
object to add on, no point truth) are counted in ``n_skipped`` and left out of every rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from countgym.logs import EpisodeRecord
from countgym.matching import match_tags

from .source import records_by_id
from .stimuli import StimulusCache
from .traces import HARNESS, tag_history

PERTURBATION_COLUMNS: tuple[str, ...] = (
    "dataset", "model", "arm", "kind", "arm_unperturbed", "n_trajectories", "n_skipped",
    "repair_rate", "n_discriminating", "visible_share", "emitted_share", "n_paired",
    "answer_shift_mean", "answer_shift_repaired_mean", "answer_shift_unrepaired_mean",
)  # fmt: skip


@dataclass(frozen=True)
class ProbeOutcome:
    """What one perturbed trajectory did (see the module docstring for the definitions)."""

    kind: str
    applied: bool
    repaired: bool | None
    visible: int
    emitted: int
    answer: int | None


def probe_outcome(record: EpisodeRecord, stimuli: StimulusCache) -> ProbeOutcome | None:
    """The probe outcome of one record, None when the record was not perturbed."""
    p = next((k for k, s in enumerate(record.steps) if s.perturbation), None)
    if p is None:
        return None
    step = record.steps[p]
    pert = step.perturbation or {}
    kind = str(pert.get("kind"))
    history = tag_history(record)
    final = history[-1]
    visible = len(final.tags)
    if "skipped" in pert or kind not in ("remove", "add"):
        return ProbeOutcome(kind, False, None, visible, visible, record.answer)
    restarted = any(s.tags_cleared for s in record.steps[p + 1 :])
    if kind == "add":
        repaired: bool | None = restarted
        emitted = visible if restarted else visible - 1
    else:
        emitted = visible if restarted else visible + 1
        repaired = _retagged(record, p, history, stimuli)
    return ProbeOutcome(kind, True, repaired, visible, emitted, record.answer)


def _retagged(
    record: EpisodeRecord, p: int, history: Sequence, stimuli: StimulusCache
) -> bool | None:
    """Whether the object of the removed tag is matched, at the end, to a tag drawn after p."""
    gt = stimuli.truth_points(record)
    pert = record.steps[p].perturbation or {}
    if gt is None or "index" not in pert:
        return None
    pts, tau = gt
    before = list(history[p - 1].tags) if p > 0 else []
    step = record.steps[p]
    if step.tags_cleared:
        before = []
    before.extend((float(x), float(y)) for x, y in step.tags_added)
    i = int(pert["index"])
    if not 0 <= i < len(before):
        return None
    obj = match_tags(before, pts, tau=tau).tag_object[i]
    if obj < 0:
        return None  # the tag the harness judged on-target is not on-target here
    final = history[-1]
    m = match_tags(list(final.tags), pts, tau=tau)
    return any(
        o == obj and d != HARNESS and d > p
        for o, d in zip(m.tag_object, final.drawn_at, strict=True)
    )


def _nanmean(values: list[float]) -> float:
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return float(v.mean()) if len(v) else float("nan")


def perturbation_table(
    records: Sequence[EpisodeRecord],
    episodes: pd.DataFrame,
    conditions: pd.DataFrame,
    stimuli: StimulusCache,
) -> pd.DataFrame:
    """Repair rate, visible vs emitted announcements and answer shift per (dataset, model,
    arm, kind); columns ``PERTURBATION_COLUMNS``."""
    # The condition's perturbation (read from the log) replaces the option column.
    ep = episodes.drop(columns=["perturb"], errors="ignore").merge(
        conditions[["episode_id", "perturb", "perturb_free_key"]], on="episode_id"
    )
    perturbed = ep[ep["perturb"].notna()]
    if perturbed.empty:
        return pd.DataFrame(columns=list(PERTURBATION_COLUMNS))
    by_id = records_by_id(records, perturbed["episode_id"])  # only these are read again
    base = ep[ep["perturb"].isna()]
    base_idx: dict[tuple, list[tuple[int, object, str]]] = {}
    for row in base.itertuples(index=False):
        k = (row.dataset, row.model, row.perturb_free_key, row.stimulus_id)
        base_idx.setdefault(k, []).append((int(row.repeat), row.answer, str(row.arm)))

    groups: dict[tuple, dict[str, Any]] = {}
    for row in perturbed.itertuples(index=False):
        rec = by_id.get(row.episode_id)
        out = probe_outcome(rec, stimuli) if rec is not None else None
        if out is None:
            continue
        g = groups.setdefault(
            (row.dataset, row.model, row.arm, out.kind),
            {"applied": [], "skipped": 0, "unperturbed_arm": None},
        )
        if not out.applied:
            g["skipped"] += 1
            continue
        shift = float("nan")
        base_answer: Any
        cands = base_idx.get((row.dataset, row.model, row.perturb_free_key, row.stimulus_id), [])
        if cands:
            same = [c for c in cands if c[0] == int(row.repeat)]
            _, base_answer, base_arm = (same or sorted(cands, key=lambda c: c[0]))[0]
            g["unperturbed_arm"] = base_arm
            if out.answer is not None and base_answer is not None and base_answer is not pd.NA:
                shift = float(out.answer) - float(base_answer)
        g["applied"].append((out, shift))

    rows = []
    for (ds, model, arm, kind), g in sorted(groups.items(), key=lambda kv: str(kv[0])):
        applied: list[tuple[ProbeOutcome, float]] = g["applied"]
        rep = [o.repaired for o, _ in applied if o.repaired is not None]
        disc = [o for o, _ in applied if o.answer is not None and o.visible != o.emitted]
        shifts = [s for _, s in applied]
        rows.append({
            "dataset": ds, "model": model, "arm": arm, "kind": kind,
            "arm_unperturbed": g["unperturbed_arm"],
            "n_trajectories": len(applied), "n_skipped": g["skipped"],
            "repair_rate": float(np.mean(rep)) if rep else float("nan"),
            "n_discriminating": len(disc),
            "visible_share": float(np.mean([o.answer == o.visible for o in disc])) if disc else float("nan"),
            "emitted_share": float(np.mean([o.answer == o.emitted for o in disc])) if disc else float("nan"),
            "n_paired": int(np.isfinite(np.asarray(shifts, dtype=float)).sum()) if shifts else 0,
            "answer_shift_mean": _nanmean(shifts),
            "answer_shift_repaired_mean": _nanmean([s for o, s in applied if o.repaired is True]),
            "answer_shift_unrepaired_mean": _nanmean([s for o, s in applied if o.repaired is False]),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=list(PERTURBATION_COLUMNS))
