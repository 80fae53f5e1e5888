"""CounterCount figures that read at study scale: nothing averaged without saying so.

- ``cross_model_pages`` (Figure 4a, 13, 14): per format and intervention, one panel per model
  (factual accuracy, CF accuracy and bias rate with 95 % CIs) and a last panel with the mean over
  the models and its 95 % CI (percentile bootstrap over models), the papers' human MCQ values as
  dotted lines on MCQ panels.
- ``breakdown_pages`` (Figures 6, 15, 16, 7/17-24): heatmaps of CF accuracy and bias rate with one
  row per model · format · intervention (no pooling across them) and one column per category,
  CF count or intervention.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .bootstrap import canonical_values
from .cf import cf_scores
from .facets import MAX_SERIES, chunks, panel_title
from .human import CF_HUMAN_LINES
from .plots import LABEL_PT, FigurePage

METRICS: tuple[tuple[str, str, str], ...] = (
    ("factual_accuracy", "factual", "#4c72b0"),
    ("cf_accuracy", "CF", "#55a868"),
    ("bias_rate", "bias", "#c44e52"),
)
FACET = ("format", "intervention")
ROW_KEYS = ("model", "format", "intervention")
MAX_ROWS = 30
"""Heatmap rows per figure page (more continue on the next page)."""


def model_mean(scores: pd.DataFrame, column: str, *, n_resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``column`` over the models (rows) and its 95 % percentile bootstrap interval
    over models; no interval with fewer than two models."""
    v = scores[column].to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return float("nan"), float("nan"), float("nan")
    if len(v) < 2:
        return float(v.mean()), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    v = canonical_values(v)  # the interval does not depend on the values' order
    means = v[rng.integers(0, len(v), size=(n_resamples, len(v)))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(v.mean()), float(lo), float(hi)


def cross_model_table(frame: pd.DataFrame, *, seed: int = 0, n_resamples: int = 1000,
                      scores: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per format and intervention: the mean over models of factual accuracy, CF accuracy and
    bias rate with 95 % CIs over models, and the number of models averaged. ``scores``: the
    frame's ``cf_scores`` by model, format and intervention at ``n_resamples``, if already made."""
    if scores is None:
        scores = cf_scores(frame, by=list(ROW_KEYS), seed=seed, n_resamples=n_resamples)
    rows = []
    for keys, g in scores.groupby(list(FACET), sort=True):
        row: dict[str, Any] = dict(zip(FACET, keys, strict=True))
        row["n_models"] = int(g["model"].nunique())
        for col, _, _ in METRICS:
            row[col], row[f"{col}_low"], row[f"{col}_high"] = model_mean(g, col, seed=seed)
        rows.append(row)
    return pd.DataFrame(rows)


def _bars(ax: Any, row: pd.Series | dict, *, mean: bool = False) -> None:
    for k, (col, _name, colour) in enumerate(METRICS):
        est = float(row[col]) if np.isfinite(row[col]) else np.nan
        lo, hi = row[f"{col}_low"], row[f"{col}_high"]
        err = None
        if np.isfinite(est) and np.isfinite(lo) and np.isfinite(hi):
            err = [[max(est - lo, 0)], [max(hi - est, 0)]]
        ax.bar([k], [np.nan_to_num(est)], 0.7, yerr=err, color=colour, capsize=3,
               hatch="//" if mean else None, edgecolor="white" if mean else None)  # fmt: skip
    ax.set_xticks(range(len(METRICS)), [m[1] for m in METRICS], fontsize=LABEL_PT)
    ax.set_ylim(0, 1.05)
    ax.tick_params(axis="y", labelsize=LABEL_PT)


def cross_model_pages(frame: pd.DataFrame, *, seed: int = 0, n_resamples: int = 1000) -> list[FigurePage]:
    """Figure 4a per format and intervention: one panel per model and the cross-model mean
    with its CI; at most ``MAX_SERIES`` model panels per figure row."""
    if frame.empty:
        return []
    scores = cf_scores(frame, by=list(ROW_KEYS), seed=seed, n_resamples=n_resamples)
    means = cross_model_table(frame, seed=seed, n_resamples=n_resamples, scores=scores)
    out = []
    for keys, g in scores.groupby(list(FACET), sort=True):
        fmt, intervention = keys
        models = list(g.sort_values("model").itertuples(index=False))
        panels: list[tuple[str, Any, bool]] = [(str(m.model), m._asdict(), False) for m in models]
        mrow = means[(means["format"] == fmt) & (means["intervention"] == intervention)].iloc[0]
        panels.append((f"mean of {len(models)} model{'s' if len(models) != 1 else ''}", mrow.to_dict(), True))
        cols = min(6, len(panels))
        rows = chunks(panels, cols)
        fig = Figure(figsize=(13.0, 2.5 * len(rows) + 0.6), layout="constrained")
        axes = np.atleast_2d(fig.subplots(len(rows), cols, squeeze=False, sharey=True))
        for r, row_panels in enumerate(rows):
            for c in range(cols):
                ax = axes[r, c]
                if c >= len(row_panels):
                    ax.set_visible(False)
                    continue
                title, data, is_mean = row_panels[c]
                _bars(ax, data, mean=is_mean)
                if fmt == "mcq" and intervention == "baseline":
                    for col, level in CF_HUMAN_LINES.items():
                        k = [m[0] for m in METRICS].index(col)
                        ax.plot([k - 0.4, k + 0.4], [level, level], ":", color="black", lw=1.2)
                ax.set_title(title if is_mean else panel_title(title, limit=34), fontsize=8.5,
                             fontweight="bold" if is_mean else None)
        fig.suptitle(f"CounterCount {fmt.upper()} · {intervention}: per model, and the mean over models "
                     "(hatched, 95 % CI over models)"
                     + (" (dotted: human MCQ accuracy, paper values)" if fmt == "mcq" and intervention == "baseline" else ""),
                     fontsize=9.5)  # fmt: skip
        out.append(FigurePage(fig, []))
    return out


def _order(values: Sequence[Any], factor: str) -> list[Any]:
    if factor == "cf_bin":
        return sorted(values, key=lambda v: int(str(v).rstrip("+")))
    if factor == "intervention":
        return sorted(values, key=lambda v: (v != "baseline", str(v)))
    return sorted(values, key=str)


def breakdown_pages(frame: pd.DataFrame, factor: str, *, seed: int = 0, n_resamples: int = 500) -> list[FigurePage]:
    """Heatmaps of CF accuracy and bias rate (percent) by ``factor`` (``category``, ``cf_bin``,
    ``intervention``): one row per model · format · intervention (``intervention`` rows are
    model · format), one column per level; nothing is pooled across models, formats or
    interventions. At most ``MAX_ROWS`` rows per page."""
    if frame.empty or factor not in frame.columns:
        return []
    base = [k for k in ROW_KEYS if k != factor]
    s = cf_scores(frame, by=[*base, factor], seed=seed, n_resamples=n_resamples)
    if s.empty:
        return []
    s["row"] = [panel_title(*(r[k] for k in base), limit=48) for _, r in s.iterrows()]
    levels = _order(list(s[factor].unique()), factor)
    row_names = list(dict.fromkeys(s.sort_values(base)["row"]))
    out = []
    for part in chunks(row_names, MAX_ROWS):
        sub = s[s["row"].isin(part)]
        width = min(13.0, max(7.0, 2 * (0.42 * len(levels) + 0.5) + 3.6))
        fig = Figure(figsize=(width, 0.3 * len(part) + 1.9), layout="constrained")
        axes = fig.subplots(1, 2, sharey=True)
        for ax, (col, name) in zip(axes, (("cf_accuracy", "CF accuracy (%)"), ("bias_rate", "bias rate (%)")), strict=True):
            m = sub.pivot_table(index="row", columns=factor, values=col, aggfunc="first").reindex(index=part, columns=levels)
            v = m.to_numpy(dtype=float) * 100
            im = ax.imshow(v, vmin=0, vmax=100, cmap="viridis" if col == "cf_accuracy" else "magma", aspect="auto")
            for i in range(v.shape[0]):
                for j in range(v.shape[1]):
                    if np.isfinite(v[i, j]) and len(levels) <= 20:
                        ax.text(j, i, f"{v[i, j]:.0f}", ha="center", va="center", fontsize=LABEL_PT,
                                color="white" if v[i, j] < 60 else "black")  # fmt: skip
            ax.set_xticks(range(len(levels)), [str(x) for x in levels], fontsize=LABEL_PT,
                          rotation=45 if len(levels) > 6 else 0, ha="right" if len(levels) > 6 else "center")  # fmt: skip
            ax.set_yticks(range(len(part)), part, fontsize=LABEL_PT)
            ax.set_title(name, fontsize=9)
            fig.colorbar(im, ax=ax, fraction=0.04, pad=0.01).ax.tick_params(labelsize=LABEL_PT)
        out.append(FigurePage(fig, []))
    return out


SERIES_NOTE = (
    f"Each panel or heatmap row is one model, format and intervention (at most {MAX_SERIES} "
    "series per panel); the only average is the marked cross-model mean."
)
