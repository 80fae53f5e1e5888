"""What a countgym episode looks like in other evaluation tools' logs, shared by the Inspect
task (``countgym.integrations.inspect``), the Inspect export (``countgym.integrations.export``)
and the lmms-eval task package, so that every route names and scores the same things:

- ``sample_id``: an opaque id per stimulus (a hash of the stimulus media and its id). A
  stimulus id may carry its answer (``n006``); a solver must not be able to read it.
- ``task_name``: ``countgym/<environment>/<arm>``, e.g. ``countgym/DotArrays-v0/tag``.
- ``episode_values`` and ``summary_metrics``: the per-episode values and the task-level
  metrics under the audit's own names and units (``analysis.summary``): ``em`` and ``mae`` over
  scored episodes, ``on_target_per100`` ... ``omission_per100`` per 100 ground-truth objects of
  the audited episodes, ``cardinality_consistency``, and ``errors`` (episodes whose model call
  failed, left out of every other metric, as in the audit).

No third-party import here.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

AUDIT_LABELS: tuple[str, ...] = ("on_target", "duplicate", "phantom", "omission")

EPISODE_FIELDS: tuple[str, ...] = (
    "correct", "abs_error", "answered", "n_true", "audited", *AUDIT_LABELS, "cardinality_consistent", "error",
)  # fmt: skip
"""Per-episode values (one Inspect score dict per sample)."""

SUMMARY_METRICS: tuple[str, ...] = (
    "em", "mae", *(f"{lab}_per100" for lab in AUDIT_LABELS), "cardinality_consistency", "errors",
)  # fmt: skip
"""Task-level metrics, named as ``countgym audit`` names them."""


def sample_id(stimulus_id: str, content_hash: str | None) -> str:
    """An opaque, stable sample id: the same stimulus gets the same id in a native Inspect run
    and in an exported countgym run; the id says nothing about the count."""
    key = f"{content_hash or ''}:{stimulus_id}"
    return "s" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:15]


def env_short(env: str | None, dataset: str) -> str:
    """The environment part of a task name (``DotArrays-v0``), or the dataset's name for logs
    written before records named their environment."""
    if env:
        return env.split("/", 1)[-1]
    return dataset.rstrip("/").rsplit("/", 1)[-1] or dataset


def task_name(env: str | None, dataset: str, arm: str) -> str:
    return f"countgym/{env_short(env, dataset)}/{arm}"


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, str):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def episode_values(row: Mapping[str, Any]) -> dict[str, float]:
    """One audit row (``analysis.audit.audit_episodes``) as an Inspect score value: numbers only,
    missing ones left out (an unanswered episode has no ``abs_error``)."""
    out: dict[str, float] = {}
    n_true = _num(row.get("n_true"))
    answer = _num(row.get("answer"))
    if n_true is not None:
        out["n_true"] = n_true
        out["correct"] = float(answer is not None and answer == n_true)
        if answer is not None:
            out["abs_error"] = abs(answer - n_true)
    out["answered"] = float(answer is not None)
    audited = bool(row.get("audited")) if row.get("audited") is not None else False
    out["audited"] = float(audited)
    for lab in AUDIT_LABELS:
        v = _num(row.get(lab))
        if v is not None and audited:
            out[lab] = v
    cc = _num(row.get("cardinality_consistent"))
    if cc is not None:
        out["cardinality_consistent"] = cc
    out["error"] = float(row.get("end") == "error")
    return out


def summary_metrics(values: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Task metrics from per-episode values, as ``analysis.summary.summarize`` computes them:
    errored episodes are left out; EM over scored episodes, MAE over answered ones; audit rates
    = 100 x (sum of a count over audited episodes) / (sum of their true counts)."""
    nan = float("nan")
    errors = sum(1 for v in values if (_num(v.get("error")) or 0.0) >= 0.5)
    scored = [v for v in values if (_num(v.get("error")) or 0.0) < 0.5]
    known = [v for v in scored if _num(v.get("n_true")) is not None]
    answered = [v for v in known if _num(v.get("abs_error")) is not None]
    out: dict[str, float] = {
        "em": sum(_num(v.get("correct")) or 0.0 for v in known) / len(known) if known else nan,
        "mae": sum(_num(v.get("abs_error")) or 0.0 for v in answered) / len(answered) if answered else nan,
    }
    audited = [v for v in scored if (_num(v.get("audited")) or 0.0) >= 0.5]
    n_objects = sum(_num(v.get("n_true")) or 0.0 for v in audited)
    for lab in AUDIT_LABELS:
        total = sum(_num(v.get(lab)) or 0.0 for v in audited)
        out[f"{lab}_per100"] = 100.0 * total / n_objects if n_objects > 0 else nan
    cc = [c for v in scored if (c := _num(v.get("cardinality_consistent"))) is not None]
    out["cardinality_consistency"] = sum(cc) / len(cc) if cc else nan
    out["errors"] = float(errors)
    return out
