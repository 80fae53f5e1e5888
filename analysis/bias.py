"""Prediction-distribution bias (*CountVideoBench*, Sections 5.2 and 6.3; analysis spec section 5).

Per model, over its items (truth, prediction or None):

- EM, Acc@10% (|pred - y| <= floor(0.1 y)), MAE and RMSE over answered items, coverage
  (``countgym.analysis.metrics``);
- support size |S|: distinct predicted values (non-answers not counted);
- prediction perplexity PP = 2^H(p), p the empirical distribution of the outputs with all
  non-answers forming one extra category;
- local excess at k: N_k - max(L_k, R_k), local deficit at k: min(L_k, R_k) - N_k, with
  L_k = max(N_{k-1}, N_{k-2}), R_k = max(N_{k+1}, N_{k+2}) and N_j = 0 for values never predicted.
  Signs as the paper's text gives them (Section 5.2): the excess is positive when k stands above
  all four neighbours, the deficit positive only when k sits in a valley between two flanking
  peaks. Both are evaluated "across each model's support", i.e. at the predicted values k only
  (N_k > 0), never at a gap; the largest of each is reported with its value (ties: the smallest
  k), and may be zero or negative (a histogram without a valley among its predicted values);
- preferred values: the fewest most-predicted values that hold at least 80 % of the answers;
- Top-3 share of a ground-truth distribution: the share of items whose truth is one of its three
  most frequent values.

Rows: one per model, an Oracle row (prediction = truth), and human-baseline rows from a CSV of
responses (:func:`human_rows`). Plots: EM / coverage heatmaps by cardinality x model and
prediction histograms with the largest local excess and deficit marked.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from countgym.analysis.metrics import (
    ArrayLike,
    _check_counts,
    _check_prediction,
    _check_truth,
    counting_scores,
)

PREFERRED_MASS = 0.8
HUMAN_COLUMNS = ("respondent", "stimulus_id", "response")
"""Required columns of a human-responses CSV (``n_true`` optional; see :func:`human_rows`)."""


@dataclass(frozen=True)
class LocalExtreme:
    """The largest local excess (or deficit) of a prediction histogram and where it occurs."""

    amount: int
    value: int


@dataclass(frozen=True)
class BiasScores:
    """Counting and prediction-distribution scores of one respondent (model, human, oracle)."""

    n_items: int
    exact_match: float
    acc10: float
    mae: float
    rmse: float
    coverage: float
    support_size: int
    perplexity: float
    max_local_excess: LocalExtreme | None
    max_local_deficit: LocalExtreme | None
    preferred_values: tuple[int, ...]

    def row(self) -> dict[str, Any]:
        """Flat dict for a table row."""
        d = asdict(self)
        for key in ("max_local_excess", "max_local_deficit"):
            ext = d.pop(key)
            d[key] = ext["amount"] if ext else None
            d[key + "_value"] = ext["value"] if ext else None
        d["preferred_values"] = " ".join(str(v) for v in self.preferred_values)
        return d


# --- the distribution of predictions ------------------------------------------------------------


def _answered_values(y_pred: ArrayLike) -> tuple[np.ndarray, int]:
    """Answered predictions as int64 and the number of non-answers; non-integers are refused."""
    p = _check_prediction(y_pred, len(y_pred))
    ok = ~np.isnan(p)
    vals = p[ok]
    if np.any(vals != np.round(vals)):
        i = int(np.flatnonzero(ok)[np.flatnonzero(vals != np.round(vals))[0]])
        raise ValueError(f"y_pred must hold integer counts or None; y_pred[{i}] = {p[i]!r}")
    return vals.astype(np.int64), int((~ok).sum())


def prediction_counts(y_pred: ArrayLike) -> dict[int, int]:
    """N_k: how often each value is predicted (non-answers left out), ascending by value."""
    vals, _ = _answered_values(y_pred)
    return dict(sorted(Counter(vals.tolist()).items()))


def support_size(y_pred: ArrayLike) -> int:
    """|S|: the number of distinct predicted values (non-answers are not a value)."""
    return len(prediction_counts(y_pred))


def prediction_perplexity(y_pred: ArrayLike) -> float:
    """PP = 2^H(p) over the predicted values plus one category for all non-answers (NaN if empty)."""
    vals, missing = _answered_values(y_pred)
    counts = list(Counter(vals.tolist()).values()) + ([missing] if missing else [])
    total = sum(counts)
    if total == 0:
        return float("nan")
    h = -sum((c / total) * math.log2(c / total) for c in counts)
    return float(2.0**h)


def local_profile(y_pred: ArrayLike) -> pd.DataFrame:
    """Per predicted value k (the model's support, ascending): N_k, L_k, R_k, local excess and
    deficit (neighbours never predicted count as N_j = 0)."""
    counts = prediction_counts(y_pred)
    if not counts:
        return pd.DataFrame(columns=["value", "count", "left", "right", "excess", "deficit"])

    def n(j: int) -> int:
        return counts.get(j, 0)

    rows = []
    for k in counts:
        left, right = max(n(k - 1), n(k - 2)), max(n(k + 1), n(k + 2))
        rows.append(
            {
                "value": k,
                "count": n(k),
                "left": left,
                "right": right,
                "excess": n(k) - max(left, right),
                "deficit": min(left, right) - n(k),
            }
        )
    return pd.DataFrame(rows)


def largest_local_excess(y_pred: ArrayLike) -> LocalExtreme | None:
    """The largest N_k - max(L_k, R_k) over the predicted values k, with its value."""
    return _largest(local_profile(y_pred), "excess")


def largest_local_deficit(y_pred: ArrayLike) -> LocalExtreme | None:
    """The largest min(L_k, R_k) - N_k over the predicted values k, with its value."""
    return _largest(local_profile(y_pred), "deficit")


def _largest(profile: pd.DataFrame, column: str) -> LocalExtreme | None:
    if profile.empty:
        return None
    i = int(np.argmax(profile[column].to_numpy()))  # first maximum = smallest k
    return LocalExtreme(amount=int(profile[column].iloc[i]), value=int(profile["value"].iloc[i]))


def preferred_values(y_pred: ArrayLike, *, mass: float = PREFERRED_MASS) -> tuple[int, ...]:
    """The fewest most-predicted values holding at least ``mass`` of the answers (ties: smaller
    value first), in decreasing order of frequency."""
    if not 0 < mass <= 1:
        raise ValueError(f"mass must be in (0, 1], got {mass!r}")
    counts = prediction_counts(y_pred)
    total = sum(counts.values())
    out: list[int] = []
    held = 0
    for value, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if total and held >= mass * total - 1e-12:
            break
        out.append(value)
        held += c
    return tuple(out)


def top3_share(y_true: ArrayLike) -> float:
    """Share of items whose true count is one of the three most frequent true counts."""
    y = _check_truth(y_true)
    if not len(y):
        return float("nan")
    top = sorted(Counter(y.tolist()).values(), reverse=True)[:3]
    return float(sum(top) / len(y))


# --- scores and tables --------------------------------------------------------------------------


def bias_scores(
    y_true: ArrayLike, y_pred: ArrayLike, *, mass: float = PREFERRED_MASS
) -> BiasScores:
    """Every score of section 5 for one respondent."""
    y, p = _check_counts(y_true, y_pred)
    c = counting_scores(y, p)
    return BiasScores(
        n_items=c.n_items,
        exact_match=c.exact_match,
        acc10=c.acc10,
        mae=c.mae,
        rmse=c.rmse,
        coverage=c.coverage,
        support_size=support_size(p),
        perplexity=prediction_perplexity(p),
        max_local_excess=largest_local_excess(p),
        max_local_deficit=largest_local_deficit(p),
        preferred_values=preferred_values(p, mass=mass),
    )


def bias_table(
    df: pd.DataFrame,
    *,
    by: str = "model",
    truth: str = "n_true",
    prediction: str = "answer",
    oracle: bool = True,
) -> pd.DataFrame:
    """One row per ``by`` group (e.g. the audit's ``episodes.csv``), plus an Oracle row.

    The Oracle predicts the truth on every item of the first group (every group is expected to
    cover the same items, as in the paper's tables).
    """
    missing = [c for c in (by, truth, prediction) if c not in df.columns]
    if missing:
        raise ValueError(f"df lacks columns {missing}; has {list(df.columns)}")
    rows = []
    for name, g in df.groupby(by, sort=True):
        rows.append({by: name, **bias_scores(g[truth].to_numpy(), _preds(g[prediction])).row()})
    if oracle and len(df):
        first = df[df[by] == sorted(df[by].unique())[0]]
        rows.append(
            {by: "Oracle", **bias_scores(first[truth].to_numpy(), first[truth].to_numpy()).row()}
        )
    return pd.DataFrame(rows)


SHAPES: tuple[str, ...] = ("cube", "sphere")
COLORS: tuple[str, ...] = ("red", "green", "blue", "yellow", "purple")
"""The ten object classes of CountVideoBench (Section 4.2): two shapes x five colours, in the
column order of its Table 6."""


def class_table(
    df: pd.DataFrame,
    *,
    by: str = "model",
    truth: str = "n_true",
    prediction: str = "answer",
    cells: bool = False,
) -> pd.DataFrame:
    """Exact match (%) by object class (*CountVideoBench*, Appendix F, Table 6): one row per
    ``by`` group, one column per shape and per colour (``cells=True``: one per shape x colour
    class, ``"red cube"``), each over that group's items of the class (NaN when it has none).
    ``df`` needs ``shape`` and ``color`` columns."""
    missing = [c for c in (by, truth, prediction, "shape", "color") if c not in df.columns]
    if missing:
        raise ValueError(f"df lacks columns {missing}; has {list(df.columns)}")
    pred = pd.to_numeric(df[prediction], errors="coerce")
    hit = (pred == df[truth]).to_numpy(dtype=bool)
    shape = df["shape"].astype(str).str.lower().to_numpy()
    color = df["color"].astype(str).str.lower().to_numpy()
    groups = [(s, shape == s) for s in SHAPES] + [(c, color == c) for c in COLORS]
    if cells:
        groups = [(f"{c} {s}", (shape == s) & (color == c)) for s in SHAPES for c in COLORS]
    rows = []
    for name, idx in df.groupby(by, sort=True).indices.items():
        row: dict[str, Any] = {by: name, "n_items": len(idx)}
        for col, mask in groups:
            sel = idx[mask[idx]]
            row[col] = 100.0 * float(hit[sel].mean()) if len(sel) else float("nan")
        rows.append(row)
    return pd.DataFrame(rows, columns=[by, "n_items", *(c for c, _ in groups)])


def _preds(col: pd.Series) -> list[float | None]:
    return [
        None if (v is None or (isinstance(v, float) and math.isnan(v))) else float(v)
        for v in col.tolist()
    ]


def read_human_responses(path: str | Path) -> pd.DataFrame:
    """A human-responses CSV: ``respondent, stimulus_id, response[, n_true]``.

    ``response`` is an integer, or empty for no answer; ``n_true`` may instead come from a
    truth mapping given to :func:`human_rows`.
    """
    df = pd.read_csv(path, dtype={"respondent": str, "stimulus_id": str})
    missing = [c for c in HUMAN_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(
            f"{path}: missing columns {missing}; need {list(HUMAN_COLUMNS)} (+ optional n_true)"
        )
    return df


def human_rows(
    responses: pd.DataFrame | str | Path, truth: dict[str, int] | None = None
) -> pd.DataFrame:
    """The two human-baseline rows of the paper's Table 4.

    ``Human baseline``: every score computed per respondent over their own responses, then
    averaged over respondents. ``Human (majority vote)``: each item gets the modal answer of its
    respondents (non-answers ignored unless nobody answered; ties go to the smaller value).
    """
    df = read_human_responses(responses) if isinstance(responses, str | Path) else responses.copy()
    if "n_true" not in df.columns:
        if truth is None:
            raise ValueError("responses have no n_true column: pass truth={stimulus_id: n}")
        unknown = sorted(set(df["stimulus_id"]) - set(truth))
        if unknown:
            raise ValueError(f"no truth for stimulus ids {unknown[:5]}")
        df["n_true"] = df["stimulus_id"].map(truth)
    per = [
        bias_scores(g["n_true"].to_numpy(), _preds(g["response"]))
        for _, g in df.groupby("respondent", sort=True)
    ]
    mean = {
        key: float(np.mean([getattr(s, key) for s in per]))
        for key in ("exact_match", "acc10", "mae", "rmse", "coverage", "support_size", "perplexity")
    }
    mean["n_items"] = int(np.mean([s.n_items for s in per]))
    votes: list[int | None] = []
    truths: list[int] = []
    for _sid, g in df.groupby("stimulus_id", sort=True):
        answers = [int(v) for v in _preds(g["response"]) if v is not None]
        if answers:
            c = Counter(answers)
            top = max(c.values())
            votes.append(min(v for v, k in c.items() if k == top))
        else:
            votes.append(None)
        truths.append(int(g["n_true"].iloc[0]))
    vote = bias_scores(truths, votes).row()
    return pd.DataFrame(
        [{"model": "Human baseline", **mean}, {"model": "Human (majority vote)", **vote}]
    )


# --- plots --------------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display needed, also in worker processes
    import matplotlib.pyplot as plt

    return plt


def cardinality_matrix(
    df: pd.DataFrame,
    *,
    metric: str = "exact_match",
    by: str = "model",
    truth: str = "n_true",
    prediction: str = "answer",
) -> pd.DataFrame:
    """Per (model, true count): EM or coverage in percent (rows: models, columns: counts)."""
    if metric not in ("exact_match", "coverage"):
        raise ValueError(f"metric must be 'exact_match' or 'coverage', got {metric!r}")
    d = df[[by, truth]].copy()
    p = pd.to_numeric(df[prediction], errors="coerce")
    d["v"] = (p == df[truth]) if metric == "exact_match" else p.notna()
    return d.groupby([by, truth])["v"].mean().unstack(truth).sort_index(axis=1) * 100.0


def cardinality_heatmap(
    df: pd.DataFrame, *, metric: str = "exact_match", by: str = "model", **cols: str
) -> Any:
    """Heatmap of EM or coverage (%) by true count x model (Figures 3-4); returns the Figure."""
    plt = _plt()
    m = cardinality_matrix(df, metric=metric, by=by, **cols)
    from .facets import panel_title

    # Row labels (model / arm) longer than LABEL_CHARS are shortened in the middle, so a plug-in's
    # module path cannot push the heatmap off the figure.
    labels = [panel_title(r, limit=LABEL_CHARS) for r in m.index]
    label_in = 0.075 * max((len(x) for x in labels), default=0) + 0.4
    # At most REPORT_WIDTH_IN wide: 26 cardinalities fit a 1400 px page at 100 dpi.
    fig, ax = plt.subplots(
        figsize=(min(REPORT_WIDTH_IN, max(6.0, 0.42 * m.shape[1] + 1.6 + label_in)), max(2.0, 0.42 * m.shape[0] + 1.2)),
        layout="constrained",
    )
    im = ax.imshow(m.to_numpy(dtype=float), vmin=0, vmax=100, cmap="viridis", aspect="auto")
    ax.set_xticks(range(m.shape[1]), [str(c) for c in m.columns], fontsize=8)
    ax.set_yticks(range(m.shape[0]), labels, fontsize=9)
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            v = m.iat[i, j]
            if not np.isnan(v):
                ax.text(
                    j,
                    i,
                    f"{v:.0f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if v < 60 else "black",
                )
    ax.set_xlabel("ground-truth count")
    ax.set_title({"exact_match": "Exact match (%)", "coverage": "Coverage (%)"}[metric])
    fig.colorbar(im, ax=ax, fraction=0.025)
    return fig


def prediction_histogram(
    y_pred: ArrayLike, *, title: str = "", truth_values: Iterable[int] | None = None
) -> Any:
    """Bar chart of predicted values with the largest local excess (green) and deficit (red)
    marked (Figure 5); benchmark cardinalities, if given, are ticked on the x axis."""
    plt = _plt()
    counts = prediction_counts(y_pred)
    fig, ax = plt.subplots(figsize=(8, 3), layout="constrained")
    if counts:
        ax.bar(list(counts), list(counts.values()), width=0.85, color="#4c72b0")
        exc, dfc = largest_local_excess(y_pred), largest_local_deficit(y_pred)
        if exc is not None and exc.amount > 0:
            ax.bar(
                [exc.value],
                [counts.get(exc.value, 0)],
                width=0.85,
                color="#2ca02c",
                label=f"max excess +{exc.amount} at {exc.value}",
            )
        if dfc is not None and dfc.amount > 0:
            prof = local_profile(y_pred).set_index("value")
            level = int(min(prof.at[dfc.value, "left"], prof.at[dfc.value, "right"]))
            ax.bar(
                [dfc.value],
                [level],
                width=0.85,
                fill=False,
                edgecolor="#d62728",
                hatch="//",
                label=f"max deficit -{dfc.amount} at {dfc.value}",
            )
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=8, loc="upper right")
    _count_ticks(ax, counts, truth_values)
    ax.set_xlabel("predicted count")
    ax.set_ylabel("predictions")
    from .facets import panel_title

    ax.set_title(panel_title(title, limit=90))
    return fig


def _count_ticks(ax: Any, counts: dict[int, int], truth_values: Iterable[int] | None) -> None:
    """x ticks of a prediction histogram: the benchmark cardinalities when they are at least
    ~2 label widths apart on the axis, else evenly spaced integers (outlying predictions such as
    222 would otherwise squeeze 26 labels into one illegible block)."""
    from matplotlib.ticker import MaxNLocator

    ticks = sorted(set(truth_values or ()))
    lo = min([*ticks, *counts] or [0])
    hi = max([*ticks, *counts] or [1])
    ax.set_xlim(lo - 1, hi + 1)
    width_px = ax.get_position().width * ax.figure.get_figwidth() * 100
    gap = min((b - a for a, b in zip(ticks, ticks[1:], strict=False)), default=hi - lo + 2)
    if ticks and gap * width_px / (hi - lo + 2) >= MIN_TICK_GAP_PX:
        ax.set_xticks(ticks)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=16, integer=True))
    ax.tick_params(axis="x", labelsize=8)


REPORT_WIDTH_IN = 13.0
"""Widest figure (inches); at ``REPORT_DPI`` it fits the report's 1400 px layout."""
REPORT_DPI = 100
LABEL_CHARS = 48
"""Heatmap row labels longer than this are shortened in the middle."""
MIN_TICK_GAP_PX = 18.0
"""Smallest distance between two x tick labels of a histogram (pixels at ``REPORT_DPI``)."""


def save_figure(fig: Any, path: str | Path, *, dpi: int = 150) -> Path:
    """Write a figure as PNG (or by the path's suffix) and close it; the resolution is lowered
    when needed so the image is at most ``REPORT_WIDTH_IN * REPORT_DPI`` pixels wide (the
    report shows it unscaled, so its labels stay readable)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dpi = min(dpi, REPORT_WIDTH_IN * REPORT_DPI / fig.get_figwidth())
    fig.savefig(path, dpi=dpi)
    _plt().close(fig)
    return path


def bias_figures(
    df: pd.DataFrame,
    out_dir: str | Path,
    *,
    by: str = "model",
    truth: str = "n_true",
    prediction: str = "answer",
) -> list[Path]:
    """Write the EM and coverage heatmaps and one prediction histogram per model as PNGs."""
    out = Path(out_dir)
    paths = [
        save_figure(
            cardinality_heatmap(df, metric=m, by=by, truth=truth, prediction=prediction),
            out / f"{m}_by_count.png",
        )
        for m in ("exact_match", "coverage")
    ]
    values: Sequence[int] = sorted(int(v) for v in df[truth].unique())
    for name, g in df.groupby(by, sort=True):
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(name))
        fig = prediction_histogram(_preds(g[prediction]), title=str(name), truth_values=values)
        paths.append(save_figure(fig, out / f"predictions_{safe}.png"))
    return paths
