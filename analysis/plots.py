"""Figures of the audit report (analysis spec section 7), drawn with matplotlib's Agg backend.

Every function takes tables (pandas DataFrames) and returns a ``Figure``, or ``None`` when the
tables hold nothing to draw; ``figure_png`` turns a figure into PNG bytes and closes it. The
figures use the object-oriented API on ``matplotlib.figure.Figure`` (no pyplot state), so
drawing is thread-safe and never opens a window.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .audit import AUDIT_LABELS, TAU_SCALES, scale_label
from .contrasts import arm_sort_key, contrast_labels
from .naming import group_label, short_dataset

MAX_PANELS = 24
"""Accuracy-vs-n panels drawn at most (one per dataset and model)."""
MAX_ROWS = 40
"""Rows (arms, contrasts) drawn at most per bar/forest chart."""
LABEL_PT = 8
"""Smallest text (tick labels, legends) in points: 11 px at the report's 100 dpi."""
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip
AUDIT_COLORS = {"on_target": "#2ca02c", "duplicate": "#ff7f0e", "phantom": "#d62728",
                "omission": "#7f7f7f"}  # fmt: skip


def figure_png(fig: Figure, *, dpi: int = 100) -> bytes:
    """PNG bytes of a figure (Agg canvas; the figures use constrained layout, so no tight bbox)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def arm_colors(arms: Sequence[str]) -> dict[str, str]:
    """One stable colour per arm label (baseline order)."""
    ordered = sorted({str(a) for a in arms}, key=arm_sort_key)
    return {a: _COLORS[i % len(_COLORS)] for i, a in enumerate(ordered)}


def _grid(n: int, cols: int = 3) -> tuple[int, int]:
    cols = min(cols, n)
    return (n + cols - 1) // cols, cols


def accuracy_vs_n(
    curve: pd.DataFrame, summary: pd.DataFrame, ranges: pd.DataFrame | None = None
) -> Figure | None:
    """Exact accuracy vs n per (dataset, model), one line per arm: observed accuracy (dots),
    isotonic fit (steps), R80 (dashed line, CI as a bar at 80 %; a triangle when censored).
    The extended curves (dataset ``main+xl``) take their R80 from ``ranges``."""
    from .r80 import EXTENDED_DATASET

    if ranges is not None and len(ranges):
        ext = ranges[ranges["curve"] == EXTENDED_DATASET].assign(dataset=EXTENDED_DATASET)
        summary = pd.concat([summary, ext], ignore_index=True)
    if curve.empty or curve["n_true"].nunique() < 2:
        return None
    panels = list(curve.groupby(["dataset", "model"], sort=True))[:MAX_PANELS]
    rows, cols = _grid(len(panels))
    # At most 13 in wide (1300 px at 100 dpi): the report's 1400 px layout shows it unscaled.
    fig = Figure(figsize=(max(8.0, min(5.2, 13.0 / cols) * cols), 3.6 * rows), layout="constrained")
    colors = arm_colors(curve["arm"])
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax, ((ds, model), g) in zip(axes, panels, strict=False):
        for arm in sorted(g["arm"].unique(), key=arm_sort_key):
            ga = g[g["arm"] == arm].sort_values("n_true")
            c = colors[str(arm)]
            ax.plot(ga["n_true"], ga["exact_match_score"], "o", ms=4, color=c, alpha=0.6)
            ax.plot(ga["n_true"], ga["isotonic_fit"], "-", drawstyle="steps-mid", color=c,
                    label=str(arm))  # fmt: skip
            s = summary[(summary["dataset"] == ds) & (summary["model"] == model)
                        & (summary["arm"] == arm)]  # fmt: skip
            if len(s) and np.isfinite(s["r80"].iloc[0]):
                r = float(s["r80"].iloc[0])
                ax.axvline(r, color=c, ls="--", lw=1)
                lo, hi = float(s["r80_ci_low"].iloc[0]), float(s["r80_ci_high"].iloc[0])
                if np.isfinite(lo) and np.isfinite(hi):
                    ax.plot([lo, hi], [0.8, 0.8], color=c, lw=4, alpha=0.35, solid_capstyle="butt")
                if bool(s["r80_censored"].iloc[0]):
                    ax.plot([r], [0.8], ">", color=c, ms=8)
        ax.axhline(0.8, color="black", lw=0.6, ls=":")
        lv = g["n_true"].to_numpy(dtype=float)
        if lv.min() > 0 and lv.max() / lv.min() > 10:
            ax.set_xscale("log")
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(group_label(short_dataset(ds), model), fontsize=10)
        ax.set_xlabel("true count n")
        ax.set_ylabel("exact accuracy")
        ax.legend(fontsize=LABEL_PT, loc="lower left")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return fig


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _row_labels(df: pd.DataFrame, *, arm: bool = True) -> list[str]:
    """Row labels naming the dataset and model only when the table holds several."""
    multi_ds = df["dataset"].nunique() > 1
    multi_model = df["model"].nunique() > 1
    return [
        group_label(short_dataset(d) if multi_ds else "", m if multi_model else "", a if arm else "")
        for d, m, a in zip(df["dataset"], df["model"], df["arm"], strict=True)
    ]


def capacity_profile(summary: pd.DataFrame, contrasts: pd.DataFrame) -> Figure | None:
    """Per model and tagging arm: pointing error vs gain from tagging (EM difference to the
    model's direct arm; EM itself when there is no direct arm), and the error mix per 100
    objects (omission, duplicate, phantom)."""
    from matplotlib.lines import Line2D

    audited = summary[summary["n_audited"] > 0].head(MAX_ROWS).copy()
    if audited.empty:
        return None
    audited["label"] = _row_labels(audited)
    gains = {}
    em = contrasts[(contrasts["metric"] == "exact_match_score")
                   & (contrasts["arm_a"].astype(str).str.split("[").str[0] == "direct")]  # fmt: skip
    for r in em.itertuples(index=False):
        gains[(r.dataset, r.model, r.arm_b)] = (r.difference, r.ci_low, r.ci_high)
    fig = Figure(figsize=(12, max(3.8, 0.3 * len(audited) + 1.6)), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1, 1.2])
    keys = list(zip(audited["dataset"], audited["model"], audited["arm"], strict=True))
    have_gain = any(k in gains for k in keys)
    colors = arm_colors(audited["arm"])
    models = sorted(audited["model"].astype(str).unique())
    markers = {m: _MARKERS[i % len(_MARKERS)] for i, m in enumerate(models)}
    for r, k in zip(audited.itertuples(index=False), keys, strict=True):
        c, mk = colors[str(r.arm)], markers[str(r.model)]
        if have_gain:
            if k not in gains:
                continue
            y, lo, hi = gains[k]
            ax1.errorbar([r.pointing_error], [y], yerr=[[y - lo], [hi - y]], fmt=mk, color=c,
                         capsize=3, ms=7)  # fmt: skip
        else:
            ax1.plot([r.pointing_error], [r.em], mk, color=c, ms=8, alpha=0.85)
    handles = [Line2D([], [], color=colors[a], marker="o", ls="", label=f"arm: {a}") for a in colors]
    if len(models) > 1:
        handles += [Line2D([], [], color="black", marker=markers[m], ls="", label=f"model: {m}")
                    for m in models]  # fmt: skip
    ax1.legend(handles=handles, fontsize=LABEL_PT, loc="best")
    ax1.set_xlabel("pointing error (thousandths of the shorter side)")
    if have_gain:
        ax1.axhline(0, color="black", lw=0.6)
        ax1.set_ylabel("tag gain: EM(arm) − EM(direct)")
    else:
        ax1.set_ylabel("exact accuracy (no direct arm: no tag gain)")
    ax1.set_title("pointing precision vs accuracy", fontsize=10)
    y = np.arange(len(audited))
    left = np.zeros(len(audited))
    for lab in ("omission", "duplicate", "phantom"):
        v = np.nan_to_num(audited[f"{lab}_per100"].to_numpy(dtype=float))
        ax2.barh(y, v, left=left, color=AUDIT_COLORS[lab], label=lab)
        left += v
    ax2.set_yticks(y, audited["label"].tolist(), fontsize=LABEL_PT)
    ax2.invert_yaxis()
    ax2.set_xlabel("errors per 100 ground-truth objects")
    ax2.legend(fontsize=LABEL_PT, loc="lower right")
    ax2.set_title("error mix", fontsize=10)
    return fig


def arm_comparison(summary: pd.DataFrame, contrasts: pd.DataFrame) -> Figure | None:
    """Exact accuracy per arm with its 95 % CI, and the paired EM contrasts (b - a) with CIs
    (CI-solid contrasts filled)."""
    if summary.empty:
        return None
    s = summary.copy()
    s["key"] = [arm_sort_key(str(a)) for a in s["arm"]]
    s = s.sort_values(["dataset", "model", "key"]).head(MAX_ROWS)
    em = contrasts[contrasts["metric"] == "exact_match_score"].head(MAX_ROWS)
    fig = Figure(figsize=(12, max(3.0, 0.3 * max(len(s), len(em)) + 1.5)), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    colors = arm_colors(s["arm"])
    y = np.arange(len(s))
    for i, r in enumerate(s.itertuples(index=False)):
        lo = r.em - r.em_ci_low if np.isfinite(r.em_ci_low) else 0
        hi = r.em_ci_high - r.em if np.isfinite(r.em_ci_high) else 0
        ax1.errorbar([r.em], [i], xerr=[[lo], [hi]], fmt="o", color=colors[str(r.arm)], capsize=3)
    ax1.set_yticks(y, _row_labels(s), fontsize=LABEL_PT)
    ax1.invert_yaxis()
    ax1.set_xlim(-0.03, 1.03)
    ax1.set_xlabel("exact accuracy (95 % bootstrap CI)")
    ax1.set_title("arms", fontsize=10)
    if em.empty:
        ax2.text(0.5, 0.5, "no paired contrasts\n(needs two arms of one model\non the same stimuli)",
                 ha="center", va="center", fontsize=9, transform=ax2.transAxes)  # fmt: skip
        ax2.set_axis_off()
        return fig
    y2 = np.arange(len(em))
    for i, r in enumerate(em.itertuples(index=False)):
        solid = bool(r.ci_solid)
        ax2.errorbar([r.difference], [i], xerr=[[r.difference - r.ci_low], [r.ci_high - r.difference]],
                     fmt="o", mfc="#1f77b4" if solid else "white", color="#1f77b4", capsize=3)  # fmt: skip
    ax2.axvline(0, color="black", lw=0.6)
    ax2.set_yticks(y2, contrast_labels(em), fontsize=LABEL_PT)  # dataset, model, b − a
    ax2.invert_yaxis()
    ax2.set_xlabel("EM difference b − a (95 % paired bootstrap CI; filled = CI-solid)")
    ax2.set_title("paired contrasts", fontsize=10)
    return fig


def tau_sensitivity(
    summary: pd.DataFrame, tau_scales: Sequence[float] = TAU_SCALES
) -> Figure | None:
    """Audit rates per 100 objects at tau x scale (Appendix E), one line per (model, arm)."""
    audited = summary[summary["n_audited"] > 0].head(MAX_ROWS)
    if audited.empty:
        return None
    scales = sorted({1.0, *tau_scales})
    fig = Figure(figsize=(12, 3.4), layout="constrained")
    axes = fig.subplots(1, len(AUDIT_LABELS))
    colors = arm_colors(audited["arm"])
    models = sorted(audited["model"].astype(str).unique())
    markers = {m: _MARKERS[i % len(_MARKERS)] for i, m in enumerate(models)}
    labels = _row_labels(audited)
    for ax, lab in zip(axes, AUDIT_LABELS, strict=True):
        for r, label in zip(audited.to_dict("records"), labels, strict=True):
            vals = [
                r.get(f"{lab}_per100" if s == 1.0 else f"{lab}_per100_{scale_label(s)}", np.nan)
                for s in scales
            ]
            ax.plot(scales, vals, "-", marker=markers[str(r["model"])],
                    color=colors[str(r["arm"])], label=label, ms=4)  # fmt: skip
        ax.set_title(lab.replace("_", "-"), fontsize=10)
        ax.set_xlabel("tau scale")
        ax.set_xticks(scales)
    axes[0].set_ylabel("per 100 objects")
    axes[-1].legend(fontsize=LABEL_PT, loc="best")
    return fig
