"""CountVideoBench Figure 17: exact match against ground-truth count, by object class, per model.

One block per model (``model / arm``): rows for the two shapes and the five colours, columns
for the cardinalities; each cell is the EM (%) of that class at that count. A shape row pools the
colours of that shape and a colour row pools the shapes, as in the paper (Appendix F).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .facets import chunks, panel_title
from .plots import LABEL_PT, FigurePage

SHAPES: tuple[str, ...] = ("cube", "sphere")
COLOURS: tuple[str, ...] = ("red", "green", "blue", "yellow", "purple")
MODELS_PER_PAGE = 6


def class_count_matrix(g: pd.DataFrame, counts: list[int]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(row names, EM % matrix, videos per cell) of one model: shapes, then colours."""
    pred = pd.to_numeric(g["answer"], errors="coerce")
    hit = (pred == g["n_true"]).astype(float)
    rows, em, n = [], [], []
    for col, values in (("shape", SHAPES), ("color", COLOURS)):
        for v in values:
            sel = g[col].astype(str).str.lower() == v
            if not sel.any():
                continue
            by = hit[sel].groupby(g.loc[sel, "n_true"])
            rows.append(v)
            em.append([by.mean().get(c, np.nan) * 100 for c in counts])
            n.append([by.size().get(c, 0) for c in counts])
    return rows, np.array(em, dtype=float).reshape(len(rows), len(counts)), np.array(n).reshape(len(rows), len(counts))


def class_count_pages(df: pd.DataFrame) -> list[FigurePage]:
    """Figure 17 pages (at most ``MODELS_PER_PAGE`` models each); empty without class metadata."""
    if df.empty or not {"shape", "color"} <= set(df.columns) or df["shape"].isna().all():
        return []
    d = df.dropna(subset=["shape", "color"])
    counts = sorted(int(c) for c in d["n_true"].unique())
    models = sorted(d["model"].astype(str).unique())
    out = []
    for part in chunks(models, MODELS_PER_PAGE):
        blocks = []
        for m in part:
            rows, em, _ = class_count_matrix(d[d["model"].astype(str) == m], counts)
            if rows:
                blocks.append((m, rows, em))
        if not blocks:
            continue
        width = min(13.0, max(6.5, 0.42 * len(counts) + 2.6))
        heights = [0.26 * len(rows) + 0.6 for _, rows, _ in blocks]
        fig = Figure(figsize=(width, sum(heights) + 0.6), layout="constrained")
        axes = np.atleast_1d(fig.subplots(len(blocks), 1, squeeze=False, height_ratios=heights)).ravel()
        im = None
        for ax, (m, rows, em) in zip(axes, blocks, strict=True):
            im = ax.imshow(em, vmin=0, vmax=100, cmap="viridis", aspect="auto")
            for i in range(em.shape[0]):
                for j in range(em.shape[1]):
                    if np.isfinite(em[i, j]):
                        ax.text(j, i, f"{em[i, j]:.0f}", ha="center", va="center", fontsize=LABEL_PT,
                                color="white" if em[i, j] < 60 else "black")  # fmt: skip
            ax.set_yticks(range(len(rows)), rows, fontsize=LABEL_PT)
            ax.set_xticks(range(len(counts)), [str(c) for c in counts], fontsize=LABEL_PT)
            ax.set_title(panel_title(m, limit=80), fontsize=9, loc="left")
        axes[-1].set_xlabel("ground-truth count", fontsize=LABEL_PT)
        if im is not None:
            fig.colorbar(im, ax=list(axes), fraction=0.02, pad=0.01, label="EM (%)").ax.tick_params(labelsize=LABEL_PT)
        out.append(FigurePage(fig, []))
    return out
