"""Figures of the audit report (analysis spec section 7), drawn with matplotlib's Agg backend.

Every function takes tables (pandas DataFrames) and returns a ``Figure``, or ``None`` when the
tables hold nothing to draw; ``figure_png`` turns a figure into PNG bytes and closes it. The
figures use the object-oriented API on ``matplotlib.figure.Figure`` (no pyplot state), so
drawing is thread-safe and never opens a window.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .audit import AUDIT_LABELS, TAU_SCALES, scale_label
from .contrasts import arm_sort_key
from .facets import LabelKeys, chunks, pages, panel_title
from .naming import group_label, short_dataset

MAX_ROWS = 40
"""Rows drawn at most by the unfaceted tau-sensitivity chart's callers (kept for callers)."""
LABEL_PT = 8
"""Smallest text (tick labels, legends) in points: 11 px at the report's 100 dpi."""
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a")  # fmt: skip
"""Twelve distinguishable colours: a panel has at most ``MAX_SERIES`` series."""
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
    cols = max(1, min(cols, n))
    return (n + cols - 1) // cols, cols


@dataclass(frozen=True)
class FigurePage:
    """One figure (page) of a faceted plot and the key table of its shortened labels."""

    fig: Figure
    keys: list[tuple[str, str]] = field(default_factory=list)


def _log_count_axis(ax: Any, levels: np.ndarray) -> None:
    """A log x axis over counts with plain labels (1, 2, 5, 10, 20, ...), no minor labels."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator, ScalarFormatter

    ax.set_xscale("log")
    lo, hi = float(levels.min()), float(levels.max())
    ticks: list[float] = [t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if lo <= t <= hi] or [lo, hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _panel_colors(labels: Sequence[str], all_colors: dict[str, str]) -> dict[str, str]:
    """The figure-wide colours when they are all distinct, else one per label of this panel."""
    if len(all_colors) <= len(_COLORS):
        return all_colors
    return {a: _COLORS[i % len(_COLORS)] for i, a in enumerate(labels)}


def _pages_of(figs: list[FigurePage]) -> Figure | None:
    return figs[0].fig if figs else None


def accuracy_vs_n(
    curve: pd.DataFrame, summary: pd.DataFrame, ranges: pd.DataFrame | None = None
) -> Figure | None:
    """The first page of ``accuracy_vs_n_pages``."""
    return _pages_of(accuracy_vs_n_pages(curve, summary, ranges))


def accuracy_vs_n_pages(
    curve: pd.DataFrame, summary: pd.DataFrame, ranges: pd.DataFrame | None = None
) -> list[FigurePage]:
    """Exact accuracy vs n, one panel per (dataset, model) and at most ``MAX_SERIES`` arms
    (lines) per panel: observed accuracy (dots), isotonic fit (steps), R80 (dashed line, CI as
    a bar at 80 %; a triangle when censored). The extended curves (dataset ``main+xl``) take
    their R80 from ``ranges``. More than ``MAX_PANELS`` panels continue on further pages."""
    from .r80 import EXTENDED_DATASET

    if ranges is not None and len(ranges):
        ext = ranges[ranges["curve"] == EXTENDED_DATASET].assign(dataset=EXTENDED_DATASET)
        summary = pd.concat([summary, ext], ignore_index=True)
    if curve.empty or curve["n_true"].nunique() < 2:
        return []
    panels = []
    for (ds, model), g in curve.groupby(["dataset", "model"], sort=True):
        if g["n_true"].nunique() < 2:
            continue  # one level is no curve
        arms = sorted(g["arm"].astype(str).unique(), key=arm_sort_key)
        parts = chunks(arms)
        for i, chunk in enumerate(parts):
            panels.append((ds, model, chunk, g, f" ({i + 1}/{len(parts)})" if len(parts) > 1 else ""))
    if not panels:
        return []
    keys = LabelKeys()
    all_colors = arm_colors(curve["arm"])
    out = []
    for page in pages(panels):
        rows, cols = _grid(len(page))
        # Legends sit under their panel (two columns), so they never cover a curve.
        legend_in = 0.16 * max(-(-len(p[2]) // 2) for p in page) + 0.2
        # At most 13 in wide (1300 px at 100 dpi): the report's 1400 px layout shows it unscaled.
        fig = Figure(figsize=(max(8.0, min(5.2, 13.0 / cols) * cols), (3.4 + legend_in) * rows), layout="constrained")
        axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
        for ax, (ds, model, arms, g, part) in zip(axes, page, strict=False):
            colors = _panel_colors(arms, all_colors)
            for arm in arms:
                ga = g[g["arm"].astype(str) == arm].sort_values("n_true")
                c = colors[arm]
                ax.plot(ga["n_true"], ga["exact_match_score"], "o", ms=4, color=c, alpha=0.6)
                ax.plot(ga["n_true"], ga["isotonic_fit"], "-", drawstyle="steps-mid", color=c,
                        label=keys.short(arm))  # fmt: skip
                s = summary[(summary["dataset"] == ds) & (summary["model"] == model)
                            & (summary["arm"].astype(str) == arm)]  # fmt: skip
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
                _log_count_axis(ax, lv)
            ax.set_ylim(-0.03, 1.03)
            ax.set_title(panel_title(short_dataset(ds), model, limit=56) + part, fontsize=9)
            ax.set_xlabel("true count n", fontsize=LABEL_PT + 1)
            ax.set_ylabel("exact accuracy", fontsize=LABEL_PT + 1)
            ax.tick_params(labelsize=LABEL_PT)
            ax.legend(fontsize=LABEL_PT, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, frameon=False)
        for ax in axes[len(page):]:
            ax.set_visible(False)
        out.append(FigurePage(fig, keys.table))
    return out


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _row_labels(df: pd.DataFrame, *, arm: bool = True) -> list[str]:
    """Row labels naming the dataset and model only when the table holds several."""
    multi_ds = df["dataset"].nunique() > 1
    multi_model = df["model"].nunique() > 1
    return [
        group_label(short_dataset(d) if multi_ds else "", m if multi_model else "", a if arm else "")
        for d, m, a in zip(df["dataset"], df["model"], df["arm"], strict=True)
    ]


def _facet_rows(df: pd.DataFrame, facet: Sequence[str], label: str) -> list[tuple[tuple, pd.DataFrame, str]]:
    """(facet values, at most ``MAX_SERIES`` rows, part suffix) per facet of ``df``."""
    out = []
    for keys, g in df.groupby(list(facet), sort=True, dropna=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        parts = chunks(list(range(len(g))))
        for i, idx in enumerate(parts):
            out.append((keys, g.iloc[idx], f" ({i + 1}/{len(parts)})" if len(parts) > 1 else ""))
    return out


def _forest_pages(
    panels: list[tuple[tuple, pd.DataFrame, str]],
    draw: Callable[[Any, pd.DataFrame, LabelKeys], None],
    title: Callable[[tuple], str],
    *,
    cols: int = 3,
    prefix: str = "K",
) -> list[FigurePage]:
    """Pages of horizontal panels, one facet each, ``draw(ax, rows, keys)`` filling a panel."""
    keys = LabelKeys(prefix=prefix)
    out = []
    for page in pages(panels):
        nrows, ncols = _grid(len(page), cols)
        heights = []
        for r in range(nrows):
            row = page[r * ncols:(r + 1) * ncols]
            heights.append(0.24 * max(len(g) for _, g, _ in row) + 1.5)
        fig = Figure(figsize=(13.0 if ncols > 1 else 8.0, sum(heights)), layout="constrained")
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, height_ratios=heights)).ravel()
        for ax, (fk, g, part) in zip(axes, page, strict=False):
            draw(ax, g, keys)
            ax.set_title(title(fk) + part, fontsize=9)
        for ax in axes[len(page):]:
            ax.set_visible(False)
        out.append(FigurePage(fig, keys.table))
    return out


def _two_line_title(keys: tuple) -> str:
    """Dataset over model: a forest panel is narrow (its row labels take room)."""
    return panel_title(short_dataset(keys[0]), limit=44) + "\n" + panel_title(keys[1], limit=44)


def arm_comparison(summary: pd.DataFrame, contrasts: pd.DataFrame) -> Figure | None:
    """The first page of ``arm_comparison_pages``."""
    return _pages_of(arm_comparison_pages(summary))


def arm_comparison_pages(summary: pd.DataFrame) -> list[FigurePage]:
    """Exact accuracy per arm with its 95 % CI, one panel per (dataset, model), at most
    ``MAX_SERIES`` arms per panel."""
    if summary.empty:
        return []
    s = summary.copy()
    s["arm"] = s["arm"].astype(str)
    s["key"] = [arm_sort_key(a) for a in s["arm"]]
    s = s.sort_values(["dataset", "model", "key"])
    colors = arm_colors(s["arm"])

    def draw(ax: Any, g: pd.DataFrame, keys: LabelKeys) -> None:
        pc = _panel_colors(list(g["arm"]), colors)
        for i, r in enumerate(g.itertuples(index=False)):
            lo = r.em - r.em_ci_low if np.isfinite(r.em_ci_low) else 0
            hi = r.em_ci_high - r.em if np.isfinite(r.em_ci_high) else 0
            ax.errorbar([r.em], [i], xerr=[[lo], [hi]], fmt="o", color=pc[r.arm], capsize=3)
        ax.set_yticks(np.arange(len(g)), keys.shorts(g["arm"]), fontsize=LABEL_PT)
        ax.set_ylim(len(g) - 0.5, -0.5)
        ax.set_xlim(-0.03, 1.03)
        ax.set_xlabel("exact accuracy (95 % CI)", fontsize=LABEL_PT)
        ax.tick_params(axis="x", labelsize=LABEL_PT)

    panels = _facet_rows(s, ["dataset", "model"], "arm")
    return _forest_pages(panels, draw, _two_line_title, prefix="A")


def contrast_pages(contrasts: pd.DataFrame) -> list[FigurePage]:
    """Paired EM contrasts b − a against the baseline arm a of each (dataset, model) (the first
    arm in baseline order: direct when it ran) with 95 % CIs (filled = CI-solid), one panel per
    (dataset, model), at most ``MAX_SERIES`` contrasts per panel."""
    em = contrasts[contrasts["metric"] == "exact_match_score"].copy() if len(contrasts) else contrasts
    if em is None or em.empty:
        return []
    # Against each (dataset, model)'s baseline arm only (the first in baseline order): every
    # pair is in contrasts.csv, but all pairs of 15 arms are 105 rows no figure can show.
    em["arm_a"] = em["arm_a"].astype(str)
    base = em.groupby(["dataset", "model"])["arm_a"].transform(lambda a: min(a, key=arm_sort_key))
    em = em[em["arm_a"] == base]
    em["label"] = em["arm_b"].astype(str)  # every row of a panel shares its baseline a

    def draw(ax: Any, g: pd.DataFrame, keys: LabelKeys) -> None:
        for i, r in enumerate(g.itertuples(index=False)):
            solid = bool(r.ci_solid)
            lo = r.difference - r.ci_low if np.isfinite(r.ci_low) else 0
            hi = r.ci_high - r.difference if np.isfinite(r.ci_high) else 0
            ax.errorbar([r.difference], [i], xerr=[[lo], [hi]], fmt="o",
                        mfc="#1f77b4" if solid else "white", color="#1f77b4", capsize=3)  # fmt: skip
        ax.axvline(0, color="black", lw=0.6)
        ax.set_yticks(np.arange(len(g)), keys.shorts(g["label"]), fontsize=LABEL_PT)
        ax.set_ylim(len(g) - 0.5, -0.5)
        ax.set_xlim(-1.05, 1.05)
        ax.set_xlabel(f"EM(b) − EM({g['arm_a'].iloc[0]}) (95 % CI)", fontsize=LABEL_PT)
        ax.tick_params(axis="x", labelsize=LABEL_PT)

    panels = _facet_rows(em, ["dataset", "model"], "label")
    return _forest_pages(panels, draw, _two_line_title, prefix="C")


def capacity_profile(summary: pd.DataFrame, contrasts: pd.DataFrame) -> Figure | None:
    """The first page of ``capacity_pages``."""
    return _pages_of(capacity_pages(summary))


def capacity_pages(summary: pd.DataFrame) -> list[FigurePage]:
    """The error mix per 100 ground-truth objects (omission, duplicate, phantom) of every
    audited arm, one panel per dataset and model, at most ``MAX_SERIES`` arms per panel."""
    from matplotlib.patches import Patch

    audited = summary[summary["n_audited"] > 0].copy() if "n_audited" in summary.columns else summary.iloc[:0]
    if audited.empty:
        return []
    audited["arm"] = audited["arm"].astype(str)
    audited["key"] = [arm_sort_key(a) for a in audited["arm"]]
    audited = audited.sort_values(["dataset", "model", "key"])

    def draw(ax: Any, g: pd.DataFrame, keys: LabelKeys) -> None:
        y = np.arange(len(g))
        left = np.zeros(len(g))
        for lab in ("omission", "duplicate", "phantom"):
            v = np.nan_to_num(g[f"{lab}_per100"].to_numpy(dtype=float))
            ax.barh(y, v, left=left, color=AUDIT_COLORS[lab], label=lab)
            left += v
        ax.set_yticks(y, keys.shorts(g["arm"]), fontsize=LABEL_PT)
        ax.set_ylim(len(g) - 0.5, -0.5)
        ax.set_xlabel("errors per 100 ground-truth objects", fontsize=LABEL_PT)
        ax.tick_params(axis="x", labelsize=LABEL_PT)

    panels = _facet_rows(audited, ["dataset", "model"], "arm")
    out = _forest_pages(panels, draw, _two_line_title, prefix="M")
    handles = [Patch(color=AUDIT_COLORS[lab], label=lab) for lab in ("omission", "duplicate", "phantom")]
    for page in out:
        page.fig.legend(handles=handles, loc="outside upper center", ncols=3, fontsize=LABEL_PT)
    return out


def tag_gain(summary: pd.DataFrame, contrasts: pd.DataFrame) -> Figure | None:
    """The first page of ``tag_gain_pages``."""
    return _pages_of(tag_gain_pages(summary, contrasts))


def tag_gain_table(summary: pd.DataFrame, contrasts: pd.DataFrame) -> pd.DataFrame:
    """Finger Figure 4's data: per dataset, model and tagging arm (bare name ``tag``), the
    pointing error of the arm and its EM gain over the model's ``direct`` arm (paired, 95 % CI)."""
    cols = ["dataset", "model", "arm", "pointing_error", "gain", "gain_ci_low", "gain_ci_high", "n_pairs"]
    if contrasts.empty or summary.empty or "n_audited" not in summary.columns:
        return pd.DataFrame(columns=cols)
    em = contrasts[(contrasts["metric"] == "exact_match_score")
                   & (contrasts["arm_a"].astype(str) == "direct")
                   & (contrasts["arm_b"].astype(str).str.split("[").str[0] == "tag")]  # fmt: skip
    audited = summary[summary["n_audited"] > 0]
    pe = {(r.dataset, r.model, str(r.arm)): r.pointing_error for r in audited.itertuples(index=False)}
    rows = []
    for r in em.itertuples(index=False):
        err = pe.get((r.dataset, r.model, str(r.arm_b)))
        if err is None or not np.isfinite(err):
            continue
        rows.append([r.dataset, r.model, str(r.arm_b), float(err), r.difference, r.ci_low, r.ci_high, r.n_pairs])
    return pd.DataFrame(rows, columns=cols)


def tag_gain_pages(summary: pd.DataFrame, contrasts: pd.DataFrame) -> list[FigurePage]:
    """Finger Figure 4: gain from tagging (EM(tag) − EM(direct), paired 95 % CI) against
    pointing error, one panel per dataset, one point per model (at most ``MAX_SERIES``)."""
    t = tag_gain_table(summary, contrasts)
    if t.empty:
        return []
    t["label"] = [m if a == "tag" else group_label(m, a) for m, a in zip(t["model"], t["arm"], strict=True)]
    panels = _facet_rows(t.sort_values(["dataset", "label"]), ["dataset"], "label")
    keys = LabelKeys(prefix="G")
    out = []
    for page in pages(panels):
        nrows, ncols = _grid(len(page), 3)
        legend_in = 0.16 * max(-(-len(g) // 2) for _, g, _ in page) + 0.2
        fig = Figure(figsize=(13.0 if ncols > 1 else 8.0, (3.8 + legend_in) * nrows), layout="constrained")
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        for ax, (fk, g, part) in zip(axes, page, strict=False):
            for i, r in enumerate(g.itertuples(index=False)):
                lo = r.gain - r.gain_ci_low if np.isfinite(r.gain_ci_low) else 0
                hi = r.gain_ci_high - r.gain if np.isfinite(r.gain_ci_high) else 0
                ax.errorbar([r.pointing_error], [r.gain], yerr=[[lo], [hi]], fmt=_MARKERS[i % len(_MARKERS)],
                            color=_COLORS[i % len(_COLORS)], capsize=3, ms=7, label=keys.short(r.label))  # fmt: skip
            ax.axhline(0, color="black", lw=0.6)
            ax.set_xlabel("pointing error (thousandths of the shorter side)", fontsize=LABEL_PT)
            ax.set_ylabel("gain: EM(tag) − EM(direct)", fontsize=LABEL_PT)
            ax.tick_params(labelsize=LABEL_PT)
            ax.legend(fontsize=LABEL_PT, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2, frameon=False)
            ax.set_title(short_dataset(fk[0]) + part, fontsize=9)
        for ax in axes[len(page):]:
            ax.set_visible(False)
        out.append(FigurePage(fig, keys.table))
    return out


def tau_sensitivity(
    summary: pd.DataFrame, tau_scales: Sequence[float] = TAU_SCALES
) -> Figure | None:
    """The first page of ``tau_sensitivity_pages``."""
    return _pages_of(tau_sensitivity_pages(summary, tau_scales))


def tau_sensitivity_pages(
    summary: pd.DataFrame, tau_scales: Sequence[float] = TAU_SCALES
) -> list[FigurePage]:
    """Audit rates per 100 objects at tau x scale (Appendix E): one row of four panels
    (on-target, duplicate, phantom, omission) per dataset and model, one line per audited arm
    (at most ``MAX_SERIES`` per row; more continue in a further row); six rows per page."""
    audited = summary[summary["n_audited"] > 0] if "n_audited" in summary.columns else summary.iloc[:0]
    if audited.empty:
        return []
    audited = audited.assign(arm=audited["arm"].astype(str)).sort_values(["dataset", "model", "arm"])
    scales = sorted({1.0, *tau_scales})
    rows = _facet_rows(audited, ["dataset", "model"], "arm")
    keys = LabelKeys(prefix="T")
    out = []
    for page in chunks(rows, 6):
        fig = Figure(figsize=(13.0, 3.0 * len(page)), layout="constrained")
        subfigs = np.atleast_1d(cast(Any, fig.subfigures(len(page), 1)))
        for sub, (fk, g, part) in zip(subfigs, page, strict=True):
            sub.suptitle(panel_title(short_dataset(fk[0]), fk[1], limit=90) + part, fontsize=9)
            row_axes = np.atleast_1d(sub.subplots(1, len(AUDIT_LABELS)))
            for ax, lab in zip(row_axes, AUDIT_LABELS, strict=True):
                for i, r in enumerate(g.to_dict("records")):
                    vals = [
                        r.get(f"{lab}_per100" if sc == 1.0 else f"{lab}_per100_{scale_label(sc)}", np.nan)
                        for sc in scales
                    ]
                    ax.plot(scales, vals, "-", marker=_MARKERS[i % len(_MARKERS)],
                            color=_COLORS[i % len(_COLORS)], label=keys.short(r["arm"]), ms=4)  # fmt: skip
                ax.set_title(lab.replace("_", "-"), fontsize=LABEL_PT + 1)
                ax.set_xlabel("tau scale", fontsize=LABEL_PT)
                ax.set_xticks(scales)
                ax.tick_params(labelsize=LABEL_PT)
            row_axes[0].set_ylabel("per 100 objects", fontsize=LABEL_PT)
            row_axes[-1].legend(fontsize=LABEL_PT, loc="center left", bbox_to_anchor=(1.02, 0.5))
        out.append(FigurePage(fig, keys.table))
    return out
