"""Group summaries of the episodes table: counting metrics, audit rates and bootstrap CIs.

``summarize`` gives one row per group (by default dataset x arm x model); ``accuracy_by`` gives
one row per group and level of a key (by default the true count n).

- Episodes that ended in an error (``end == "error"``: the model call failed, e.g. a 429 or a
  timeout) say nothing about the model: they are left out of every metric and counted in
  ``errors``; ``n_episodes`` is the number of episodes scored.
- Counting metrics use episodes with a known true count; MAE and RMSE use answered ones.
- Audit rates are per 100 ground-truth objects: the sum of a count over audited episodes
  divided by the sum of their ``n_true``, times 100.
- Pointing error is the median over images of the per-image median on-target distance
  (thousandths of the shorter side); every audited episode is one image trajectory.
- Revision rate is the share of trajectories with a second tag call among those with at least
  one tag call.
- Point-level columns (audit rates, cardinality consistency, pointing error, revision, tau)
  are empty (NaN) for a group none of whose episodes was audited; ``audit_note`` says why
  (``arm cannot point`` for arms whose logged tool set offers no ``tag``: ``audit.arm_points``).
- R80 (``counting_range``): the counting range with its bootstrap CI (images resampled within
  each level) and its right-censoring flag, fitted on the main battery only
  (``r80.curve_rows``); ``n_levels`` is the number of tested counts of that curve.
- Stimulus sets: a group whose stimuli come from several sets (``meta.set``: the full
  ``dotarrays`` battery holds main and four factor sets) gets its pooled row (``scope`` =
  ``dataset``, ``set`` = ``all``) and one row per set (``scope`` = ``set``); only the main row
  and the pooled row carry an R80 (the main battery's). ``scope`` = ``dataset`` rows are the
  one-row-per-group table the figures use (``primary_rows``).
- One column per option that can vary between cells (``arms.OPTION_COLUMNS``), so a row reads
  without the logs.
- Support size and prediction perplexity PP = 2^H (``distribution``), non-answers as one
  extra category of PP, not counted in the support.
- EM and MAE come with percentile bootstrap CIs that resample episodes within the group, with a
  fresh ``numpy.random.default_rng(seed)`` per group so a group's interval does not depend on
  which other groups are summarised.
- An interval the bootstrap cannot give (fewer than ``bootstrap.MIN_CI_ITEMS`` items, every
  outcome equal, one image per count level for R80) is empty, never ``[x, x]``; ``ci_note``
  says why (``bootstrap.ci_reason``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .arms import OPTION_COLUMNS
from .audit import AUDIT_LABELS, TAU_SCALES, scale_label
from .bootstrap import CI_NOTE, bootstrap_ratios, estimable_interval, join_notes
from .distribution import prediction_perplexity, support_size
from .metrics import counting_scores
from .r80 import R80_THRESHOLD, curve_rows, range_for_group

DEFAULT_BY: tuple[str, ...] = ("dataset", "arm", "model")

_COUNTING_REQUIRED = ("n_true", "answer")
_AUDIT_REQUIRED = (
    "audited", "on_target", "duplicate", "phantom", "omission", "tau", "pointing_error",
    "cardinality_consistent", "tag_calls", "revised",
)  # fmt: skip

_COUNTING_COLUMNS = (
    "n_episodes", "errors", "n_answered", "em", "em_ci_low", "em_ci_high", "acc10", "mae", "mae_ci_low",
    "mae_ci_high", "rmse", "mean_signed_error", "coverage",
)  # fmt: skip

_RANGE_COLUMNS = (
    "r80", "r80_ci_low", "r80_ci_high", "r80_censored", "n_levels", "support_size",
    "prediction_perplexity",
)  # fmt: skip


def summary_columns(
    by: Sequence[str] = DEFAULT_BY, tau_scales: Sequence[float] = TAU_SCALES
) -> list[str]:
    """The columns ``summarize`` returns, in order."""
    sens = [f"{lab}_per100_{scale_label(s)}" for s in tau_scales for lab in AUDIT_LABELS]
    return [
        *by, *(["set", "scope"] if "set" not in by else ["scope"]),
        *(k for k in OPTION_COLUMNS if k not in by), *_COUNTING_COLUMNS, *_RANGE_COLUMNS, "n_audited", "n_objects",
        *(f"{lab}_per100" for lab in AUDIT_LABELS),
        "cardinality_consistency", "pointing_error", "revision_rate", "tau_median", *sens, "audit_note", CI_NOTE,
    ]  # fmt: skip


# --- validation ---------------------------------------------------------------------------------


def _check_by(by: str | Sequence[str], episodes: pd.DataFrame, *, name: str = "by") -> list[str]:
    keys = [by] if isinstance(by, str) else list(by)
    if not keys:
        raise ValueError(f"{name} must name at least one column, got {by!r}")
    missing = [k for k in keys if k not in episodes.columns]
    if missing:
        raise ValueError(f"{name} names columns not in the episodes table: {missing!r}")
    return keys


def _check_episodes(episodes: pd.DataFrame, required: Sequence[str]) -> None:
    if not isinstance(episodes, pd.DataFrame):
        raise TypeError(f"episodes must be a pandas DataFrame, got {type(episodes).__name__}")
    missing = [c for c in required if c not in episodes.columns]
    if missing:
        raise ValueError(f"episodes lacks the columns {missing!r} (make it with audit_episodes)")


def _check_options(n_resamples: int, confidence: float) -> None:
    if not isinstance(n_resamples, int | np.integer) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")


# --- computation --------------------------------------------------------------------------------


def _float(s: pd.Series) -> np.ndarray:
    return s.to_numpy(dtype=float, na_value=np.nan)


def _without_errors(g: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The group's scored episodes and the number of errored ones left out."""
    if "end" not in g.columns:
        return g, 0
    errored = (g["end"] == "error").to_numpy(dtype=bool)
    return g[~errored], int(errored.sum())


def _counting_row(
    g: pd.DataFrame, n_resamples: int, confidence: float, seed: int, errors: int = 0
) -> dict[str, Any]:
    if len(g) == 0:  # every episode errored: nothing to score
        return {c: float("nan") for c in _COUNTING_COLUMNS} | {"n_episodes": 0, "errors": errors, "n_answered": 0}
    y = _float(g["n_true"])
    scored = ~np.isnan(y)
    pred = _float(g["answer"])[scored]
    sc = counting_scores(y[scored].astype(np.int64), pred)
    ok = ~np.isnan(pred)
    abs_err = np.abs(pred - y[scored])
    # EM and MAE share one set of resampled index sets.
    num = np.stack([(pred == y[scored]).astype(float), np.where(ok, abs_err, 0.0)])
    den = np.stack([np.ones(len(pred)), ok.astype(float)])
    boot = bootstrap_ratios(num, den, n_resamples=n_resamples, seed=seed)
    em_lo, em_hi, em_why = estimable_interval(boot[0], len(pred), confidence, unit="episodes")
    mae_lo, mae_hi, mae_why = estimable_interval(boot[1], int(ok.sum()), confidence, unit="answered episodes")
    return {
        "_notes": {"em": em_why, "mae": mae_why},
        "n_episodes": len(g),
        "errors": errors,
        "n_answered": sc.n_answered,
        "em": sc.exact_match,
        "em_ci_low": em_lo,
        "em_ci_high": em_hi,
        "acc10": sc.acc10,
        "mae": sc.mae,
        "mae_ci_low": mae_lo,
        "mae_ci_high": mae_hi,
        "rmse": sc.rmse,
        "mean_signed_error": sc.mean_signed_error,
        "coverage": sc.coverage,
    }


def _range_row(
    g: pd.DataFrame, n_resamples: int, confidence: float, seed: int, threshold: float
) -> dict[str, Any]:
    cr = range_for_group(
        curve_rows(g), threshold=threshold, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    return {
        "_notes": {"r80": cr.ci_note},
        "r80": cr.r80,
        "r80_ci_low": cr.ci_low,
        "r80_ci_high": cr.ci_high,
        "r80_censored": cr.censored,
        "n_levels": len(cr.levels),
        "support_size": support_size(_float(g["answer"])),
        "prediction_perplexity": prediction_perplexity(_float(g["answer"])),
    }


def _per100(g: pd.DataFrame, column: str, n_objects: float) -> float:
    return 100.0 * float(_float(g[column]).sum()) / n_objects if n_objects > 0 else float("nan")


def _nanmedian(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(np.median(x)) if len(x) else float("nan")


def _nanmean(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.mean()) if len(x) else float("nan")


def _audit_row(g: pd.DataFrame, tau_scales: Sequence[float]) -> dict[str, Any]:
    a = g[g["audited"].to_numpy(dtype=bool)]
    n_objects = float(_float(a["n_true"]).sum()) if len(a) else 0.0
    row: dict[str, Any] = {"n_audited": len(a), "n_objects": int(n_objects)}
    for lab in AUDIT_LABELS:
        row[f"{lab}_per100"] = _per100(a, lab, n_objects)
    tagging = g["tag_calls"].to_numpy() >= 1
    row["cardinality_consistency"] = _nanmean(_float(g["cardinality_consistent"]))
    row["pointing_error"] = _nanmedian(_float(a["pointing_error"]))
    row["revision_rate"] = _nanmean(np.where(tagging, _float(g["revised"]), np.nan))
    row["tau_median"] = _nanmedian(_float(a["tau"]))
    for s in tau_scales:
        sfx = scale_label(s)
        for lab in AUDIT_LABELS:
            col = f"{lab}_{sfx}"
            row[f"{lab}_per100_{sfx}"] = _per100(a, col, n_objects) if col in a else float("nan")
    row["audit_note"] = _audit_note(g, len(a))
    return row


def _audit_note(g: pd.DataFrame, n_audited: int) -> str | None:
    """Why a group's point-level columns are empty (``arm cannot point``, ...), or how many of
    its episodes are left out of them; None when every episode was audited."""
    if "audit_note" not in g.columns:
        return None
    notes = [v for v in g["audit_note"].tolist() if isinstance(v, str) and v]
    if not notes:
        return None
    if n_audited == 0:
        return "; ".join(sorted(set(notes)))
    counts: dict[str, int] = {}
    for v in notes:
        counts[v] = counts.get(v, 0) + 1
    return "; ".join(f"{k} ({v} episodes not audited)" for k, v in sorted(counts.items()))


def _option_row(g: pd.DataFrame, keys: Sequence[str]) -> dict[str, Any]:
    """The group's value of every option column (``a|b`` if the group mixes values)."""
    row: dict[str, Any] = {}
    for k in OPTION_COLUMNS:
        if k in keys:
            continue
        vals = [] if k not in g else [v for v in g[k].tolist() if v is not None and not pd.isna(v)]
        uniq = sorted({str(v) for v in vals})
        row[k] = None if not uniq else vals[0] if len(uniq) == 1 else "|".join(uniq)
    return row


def _group_key_dict(keys: list[str], key: Any) -> dict[str, Any]:
    vals = key if isinstance(key, tuple) else (key,)
    return dict(zip(keys, vals, strict=True))


def summarize(
    episodes: pd.DataFrame,
    by: str | Sequence[str] = DEFAULT_BY,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    tau_scales: Sequence[float] = TAU_SCALES,
    r80_threshold: float = R80_THRESHOLD,
) -> pd.DataFrame:
    """One row per group: EM (with CI), Acc@10%, MAE (with CI), RMSE, coverage, R80 (with CI
    and censoring flag), support size, PP, audit rates.

    Columns are ``summary_columns(by, tau_scales)``.
    """
    _check_episodes(episodes, (*_COUNTING_REQUIRED, *_AUDIT_REQUIRED))
    keys = _check_by(by, episodes)
    _check_options(n_resamples, confidence)
    def row(key_values: dict[str, Any], group: pd.DataFrame, scope: str) -> dict[str, Any]:
        g, errors = _without_errors(group)
        counting = _counting_row(g, n_resamples, confidence, seed, errors)
        ranged = _range_row(g, n_resamples, confidence, seed, r80_threshold)
        return {
            **key_values,
            "scope": scope,
            **_option_row(group, keys),
            **counting,
            **ranged,
            **_audit_row(g, tau_scales),
            CI_NOTE: join_notes({**counting.pop("_notes", {}), **ranged.pop("_notes", {})}),
        }

    rows = []
    for key, g in episodes.groupby(keys, sort=True, dropna=False):
        kv = _group_key_dict(keys, key)
        sets = _set_values(g) if "set" not in keys else []
        if "set" not in keys:
            kv["set"] = sets[0] if len(sets) == 1 else (ALL_SETS if sets else None)
        rows.append(row(kv, g, "dataset"))
        if len(sets) > 1:
            labels = np.array([_set_label(v) for v in g["set"].tolist()], dtype=object)
            for s in sets:
                rows.append(row({**kv, "set": s}, g[labels == s], "set"))
    return pd.DataFrame(rows, columns=summary_columns(keys, tau_scales))


ALL_SETS = "all"
"""``set`` of a dataset row that pools several stimulus sets (its R80 is the main battery's)."""


def _set_label(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _set_values(g: pd.DataFrame) -> list[str]:
    """The distinct stimulus sets (``meta.set``) of a group, sorted, ``main`` first."""
    if "set" not in g.columns:
        return []
    found = {s for s in (_set_label(v) for v in g["set"].tolist()) if s is not None}
    return sorted(found, key=lambda s: (s != "main", s))


def primary_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """The one-row-per-group part of a summary (without the per-set rows)."""
    return summary[summary["scope"] == "dataset"] if "scope" in summary.columns else summary


def accuracy_by(
    episodes: pd.DataFrame,
    key: str = "n_true",
    *,
    by: str | Sequence[str] = DEFAULT_BY,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Counting metrics per group and level of ``key`` (accuracy vs n by default)."""
    _check_episodes(episodes, _COUNTING_REQUIRED)
    keys = _check_by(by, episodes)
    if key not in episodes.columns:
        raise ValueError(f"key names a column not in the episodes table: {key!r}")
    _check_options(n_resamples, confidence)
    group_keys = [*(k for k in keys if k != key), key]
    rows = []
    for k, group in episodes.groupby(group_keys, sort=True, dropna=False):
        g, errors = _without_errors(group)
        counting = _counting_row(g, n_resamples, confidence, seed, errors)
        counting[CI_NOTE] = join_notes(counting.pop("_notes", {}))
        rows.append({**_group_key_dict(group_keys, k), **counting})
    return pd.DataFrame(rows, columns=[*group_keys, *_COUNTING_COLUMNS, CI_NOTE])
