"""Capacity profile per model and arm (*Give the Model a Finger*, Section 5.2 and Table 2).

The paper reports pointing error "DotArrays and FSC-147 pooled": the median over images of the
per-image median on-target distance (thousandths of the shorter image side), over the images
of both datasets together. ``capacity_table`` gives, per model and arm, one row per battery
(``dotarrays``: main battery and factor sets; ``fsc147``) and, when the model and arm ran both,
the pooled ``dotarrays+fsc147`` row, each with the audit rates per 100 objects, cardinality
consistency, revision rate and the pointing error with a percentile bootstrap CI over images
(every audited episode is one image trajectory, as in ``summary``). The XL extension and the
lattice controls are not part of the pool (the paper's Table 2 covers the benchmark datasets).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .audit import AUDIT_LABELS
from .bootstrap import canonical_values, ci_reason, percentile_interval
from .summary import _audit_row

POOLED_BATTERIES: tuple[str, ...] = ("dotarrays", "fsc147")
"""``meta.battery`` values pooled for the pointing-error row of Table 2."""
POOLED_NAME = "dotarrays+fsc147"

CAPACITY_COLUMNS: tuple[str, ...] = (
    "model", "arm", "pool", "datasets", "n_audited", "n_objects",
    *(f"{lab}_per100" for lab in AUDIT_LABELS), "cardinality_consistency", "pointing_error",
    "pointing_error_ci_low", "pointing_error_ci_high", "revision_rate",
)  # fmt: skip


def median_ci(
    values: np.ndarray, *, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """Median of ``values`` (NaN dropped) with a percentile bootstrap CI (resampling values)."""
    v = np.asarray(values, dtype=float)
    v = canonical_values(v[~np.isnan(v)])  # the interval does not depend on the values' order
    if not len(v):
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    boot = np.empty(n_resamples)
    step = max(1, 2_000_000 // len(v))
    for start in range(0, n_resamples, step):
        k = min(step, n_resamples - start)
        boot[start : start + k] = np.median(v[rng.integers(0, len(v), size=(k, len(v)))], axis=1)
    lo, hi = percentile_interval(boot, confidence)
    if ci_reason(boot, len(v), lo, hi):  # not estimable: never [x, x]
        lo = hi = float("nan")
    return float(np.median(v)), lo, hi


def capacity_table(
    episodes: pd.DataFrame, *, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> pd.DataFrame:
    """Per model and arm: one row per pooled battery present and the pooled row (Table 2)."""
    if episodes.empty or "battery" not in episodes.columns:
        return pd.DataFrame(columns=list(CAPACITY_COLUMNS))
    battery = np.array([v if isinstance(v, str) else "" for v in episodes["battery"].tolist()])
    keep = np.isin(battery, POOLED_BATTERIES) & episodes["audited"].to_numpy(dtype=bool)
    ep = episodes[keep].assign(_battery=battery[keep])
    rows = []
    for (model, arm), g in ep.groupby(["model", "arm"], sort=True, dropna=False):
        present = [b for b in POOLED_BATTERIES if (g["_battery"] == b).any()]
        pools = [(b, g[g["_battery"] == b]) for b in present]
        if len(present) == len(POOLED_BATTERIES):
            pools.append((POOLED_NAME, g))
        for name, gp in pools:
            audit = _audit_row(gp, ())
            pe, lo, hi = median_ci(
                gp["pointing_error"].to_numpy(dtype=float, na_value=np.nan),
                n_resamples=n_resamples, confidence=confidence, seed=seed,
            )  # fmt: skip
            rows.append(
                {"model": model, "arm": arm, "pool": name,
                 "datasets": ";".join(sorted({str(d) for d in gp["dataset"]})),
                 **{k: audit[k] for k in ("n_audited", "n_objects", "cardinality_consistency",
                                          "revision_rate", *(f"{lab}_per100" for lab in AUDIT_LABELS))},
                 "pointing_error": pe, "pointing_error_ci_low": lo, "pointing_error_ci_high": hi}
            )  # fmt: skip
    return pd.DataFrame(rows, columns=list(CAPACITY_COLUMNS))
