"""Report sections of the single-step tasks (CounterCount; CountVideoBench when present).

``write_task_sections`` writes each task's own tables and figures into a subfolder of the audit
folder and returns the HTML sections the report embeds, so one ``countgym audit`` over a mixed
run folder covers every task.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from countgym.analysis.report import ci_table, esc, figure_html, section_open
from countgym.logs import EpisodeRecord

COLUMN_LABELS: dict[str, str] = {
    "factual_accuracy": "factual acc.",
    "cf_accuracy": "CF acc.",
    "bias_rate": "bias rate",
    "other_error_rate": "other error",
    "no_answer_rate": "no answer",
    "accuracy_delta": "accuracy Δ",
    "bias_rate_delta": "bias rate Δ",
    "n_factual": "factual items",
    "n_cf": "CF items",
    "n_pairs": "pairs",
    "cf_bin": "CF count",
    "exact_match": "EM",
    "acc10": "Acc@10%",
    "mae": "MAE",
    "rmse": "RMSE",
    "n_items": "items",
    "support_size": "|S|",
    "perplexity": "PP",
    "preferred_values": "preferred values",
    "max_local_excess": "max excess",
    "max_local_excess_value": "excess at",
    "max_local_deficit": "max deficit",
    "max_local_deficit_value": "deficit at",
    "n_judge_needed": "needed judge",
    "n_judged": "judged",
    "n_unjudged": "no answer for want of judge",
    "ci_note": "[–]: why no CI",
}
"""Report headers of the task tables (the CSVs keep the column names)."""


def task_of_record(record: EpisodeRecord) -> str:
    """The task an episode ran (``image`` unless its environment says otherwise)."""
    return str(record.env_options.get("task", "image"))


def _section(
    anchor: str, title: str, nav: str, note: str, tables: dict[str, pd.DataFrame], figures: Sequence[Path], root: Path,
    caption: str | None = None,
) -> str:
    """A task section: its tables in the Summary's ``value [95% CI]`` format, each with
    ``caption`` under it when given, then its figures (captioned with their file in the audit
    folder)."""
    parts = [section_open(anchor, title, nav), f'<p class="note">{esc(note)}</p>']
    if caption:
        parts.append(f'<p class="note judge-note"><b>Judge</b>: {esc(caption)}</p>')
    for name, df in tables.items():
        if df is not None and len(df):
            parts.append(f"<h3>{esc(name)}</h3>")
            parts.append(ci_table(df, labels=COLUMN_LABELS))
            if caption:
                parts.append(f'<p class="note judge-caption">judge: {esc(caption)}</p>')
    seen_anchors: set[str] = set()
    for fig in figures:
        base = re.sub(r"_\d+$", "", fig.stem)
        caption = FIGURE_CAPTIONS.get(base, FIGURE_CAPTIONS.get(fig.stem, ""))
        if fig.stem.startswith("predictions_"):
            caption = ("Predicted counts (Figures 5, 8-15), titled by model and arm: largest local "
                       "excess in green, largest local deficit hatched red.")  # fmt: skip
        fig_anchor = FIGURE_ANCHORS.get(base)
        if fig_anchor in seen_anchors:
            fig_anchor = None
        elif fig_anchor:
            seen_anchors.add(fig_anchor)
        parts.append(figure_html(fig.read_bytes(), caption, fig.relative_to(root).as_posix(), anchor=fig_anchor))
    parts.append("</section>")
    return "\n".join(parts)


FIGURE_CAPTIONS: dict[str, str] = {
    "cf_mean": "Factual accuracy, CF accuracy and bias rate per model (95 % CIs over items) and "
               "their mean over the models (hatched; 95 % percentile bootstrap CI over models), one "
               "figure per format and intervention (Figures 4a, 13, 14). The mean panel is the only "
               "average; it averages models, never formats or interventions.",
    "cf_category": "CF accuracy and bias rate (%) by category (Figures 15-16): one row per model · "
                   "format · intervention, nothing pooled across them.",
    "cf_intervention": "CF accuracy and bias rate (%) by intervention (Figures 7-9, 17-24): one row "
                       "per model · format, nothing pooled across them.",
    "cf_count": "CF accuracy and bias rate (%) by CF count (Figure 6a): one row per model · format · "
                "intervention, nothing pooled across them.",
    "exact_match_by_count": "Exact match (%) by ground-truth count, one row per model and arm "
                            "(Figures 4 and 16).",
    "coverage_by_count": "Coverage (%) by ground-truth count, one row per model and arm (Figure 3).",
    "cv_class_count": "Exact match (%) by ground-truth count and object class, one block per model "
                      "and arm (Figure 17): shape rows pool the colours, colour rows pool the shapes.",
    "cf_blur_sweep": "Blur sweep (Appendix C.5.3, Figure 20): CF accuracy and bias rate across blur radii "
    "and feathering values, mean of MCQ and OE (95 % CI band) and each format, one row per model.",
}
"""Captions of the task figures by file stem (a page suffix ``_2`` ... is ignored; prediction
histograms are captioned by model)."""

FIGURE_ANCHORS: dict[str, str] = {"cf_mean": "cf-mean", "cv_class_count": "cv-class-count"}
"""Anchors of the figures the paper map links to (the first page of each)."""


def _write_pages(pages: Sequence[Any], folder: Path, stem: str) -> list[Path]:
    """PNG files of a faceted figure's pages: ``stem.png``, ``stem_2.png``, ..."""
    from countgym.analysis.plots import figure_png

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, page in enumerate(pages):
        path = folder / (f"{stem}.png" if i == 0 else f"{stem}_{i + 1}.png")
        path.write_bytes(figure_png(page.fig))
        paths.append(path)
    return paths


def countercount_figures(frame: pd.DataFrame, out: Path, *, seed: int = 0) -> list[Path]:
    """The CounterCount figures (``cf_figures``) under ``out/figures``; the per-breakdown files
    replace the pooled ones of ``cf.write_cf_report`` (same names)."""
    from countgym.analysis import cf_figures

    folder = out / "figures"
    for old in folder.glob("cf_*.png"):
        if re.fullmatch(r"cf_(category|intervention|count|mean)(_\d+)?", old.stem):
            old.unlink()
    paths = _write_pages(cf_figures.cross_model_pages(frame, seed=seed), folder, "cf_mean")
    for factor, stem in (("category", "cf_category"), ("cf_bin", "cf_count"), ("intervention", "cf_intervention")):
        if factor == "intervention" and frame["intervention"].nunique() < 2:
            continue
        paths += _write_pages(cf_figures.breakdown_pages(frame, factor, seed=seed), folder, stem)
    return paths


def _cross_model(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    from countgym.analysis.cf_figures import cross_model_table

    t = cross_model_table(frame, seed=seed)
    return t if len(t) and (t["n_models"] > 1).any() else t.iloc[:0]


def video_scores(df: pd.DataFrame, *, seed: int = 0, n_resamples: int = 2000) -> pd.DataFrame:
    """EM (unanswered = wrong) and MAE (over answered items) per ``model`` with 95 % percentile
    bootstrap CIs over the items, as in the Summary."""
    from countgym.analysis.bootstrap import bootstrap_ratio_ci

    rows = []
    for name, g in df.groupby("model", sort=True):
        pred = pd.to_numeric(g["answer"], errors="coerce").to_numpy(dtype=float)
        truth = g["n_true"].to_numpy(dtype=float)
        answered = ~np.isnan(pred)
        hit = answered & (pred == truth)
        err = np.where(answered, np.abs(np.nan_to_num(pred) - truth), 0.0)
        em = bootstrap_ratio_ci(hit.astype(float), n_resamples=n_resamples, seed=seed)
        mae = bootstrap_ratio_ci(err, answered.astype(float), n_resamples=n_resamples, seed=seed)
        from countgym.analysis.bootstrap import join_notes

        rows.append({"model": name, "exact_match_low": em.low, "exact_match_high": em.high,
                     "mae_low": mae.low, "mae_high": mae.high,
                     "ci_note": join_notes({"exact_match": em.note, "mae": mae.note})})  # fmt: skip
    return pd.DataFrame(rows, columns=["model", "exact_match_low", "exact_match_high", "mae_low", "mae_high", "ci_note"])


_CLASS_ID = re.compile(r"-(red|green|blue|yellow|purple)-(cube|sphere)-", re.IGNORECASE)


def video_frame(records: Sequence[EpisodeRecord], episodes: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per scored video episode: ``model`` (``model / arm label``), ``arm``, ``n_true``,
    ``answer``, ``shape`` and ``color`` (from the stimulus metadata in ``episodes`` when given,
    else read off a generated stimulus id such as ``cvb-n05-red-cube-r0``)."""
    from countgym.analysis.arms import arm_labels
    from countgym.analysis.naming import model_labels

    meta: dict[str, tuple[Any, Any]] = {}
    if episodes is not None and {"episode_id", "shape", "color"} <= set(episodes.columns):
        for eid, sh, co in zip(episodes["episode_id"], episodes["shape"], episodes["color"], strict=True):
            if isinstance(sh, str) and isinstance(co, str):
                meta[str(eid)] = (sh, co)
    shapes, colors = [], []
    for r in records:
        sh, co = meta.get(r.episode_id, (None, None))
        if sh is None:
            m = _CLASS_ID.search(r.stimulus_id)
            sh, co = (m.group(2).lower(), m.group(1).lower()) if m else (None, None)
        shapes.append(sh)
        colors.append(co)
    df = pd.DataFrame(
        {
            "model": model_labels(records),
            "arm": arm_labels(records),
            "n_true": [r.truth.n if r.truth else None for r in records],
            "answer": [r.answer for r in records],
            "end": [r.end for r in records],
            "shape": shapes,
            "color": colors,
        }
    ).dropna(subset=["n_true"])
    df["n_true"] = df["n_true"].astype(int)
    df["model"] = df["model"] + " / " + df["arm"]
    return df


def _judge_note_of(frame: pd.DataFrame) -> str:
    """The judge line of a CounterCount frame resolved outside the audit's pass."""
    from countgym.analysis import cf

    c = cf.judge_counts(frame)
    ran = "ran" if c["n_judged"] else "did not run"
    return (f"{ran}; {c['n_judge_needed']} of {len(frame)} replies named several numbers and needed it: "
            f"{c['n_judged']} judged, {c['n_unjudged']} counted as no answer")


def _with_cis(table: pd.DataFrame, cis: pd.DataFrame) -> pd.DataFrame:
    """``table`` with each ``X_low``/``X_high`` of ``cis`` placed right after its column ``X``."""
    merged = table.merge(cis, on="model", how="left")
    order: list[str] = []
    for c in table.columns:
        order.append(c)
        order += [b for b in (f"{c}_low", f"{c}_high") if b in cis.columns]
    order += [c for c in cis.columns if c == "ci_note" and c not in order]
    return merged[order]


def write_task_sections(
    records: Sequence[EpisodeRecord],
    out: Path,
    *,
    seed: int = 0,
    judge: Any = None,
    episodes: pd.DataFrame | None = None,
    judge_note: str | None = None,
) -> tuple[list[Path], list[str]]:
    """Write the per-task outputs of non-image episodes; return (paths, HTML sections).

    ``judge`` (a ``ChatModel``) resolves CounterCount replies with several incompatible numbers
    (Appendix B.2), cached under ``out/countercount/judge-cache``. ``episodes`` (the audit's
    episodes table) supplies the video stimuli's shape and colour. ``judge_note`` (whether the
    judge ran, how many replies needed it, how they were counted: ``Resolution.judge_summary``)
    heads the CounterCount section and captions each of its tables."""
    paths: list[Path] = []
    sections: list[str] = []
    # One pass: each pass over an audit's records reads and validates every log line again.
    by_task: dict[str, list[EpisodeRecord]] = {"countercount": [], "video": []}
    for r in records:
        kept = by_task.get(task_of_record(r))
        if kept is not None:
            kept.append(r)
    for kept in by_task.values():  # episode-id order, not log order: the same tables however logged
        kept.sort(key=lambda r: r.episode_id)
    cf_records = by_task["countercount"]
    if cf_records:
        from countgym.analysis import cf

        frame = cf.cf_frame(cf_records)
        if judge is not None:
            frame = cf.judge_ambiguous(frame, judge, cache_dir=out / "countercount" / "judge-cache")
        # the pooled figures would be replaced by countercount_figures' pages: not drawn
        tables = cf.cf_tables(frame, seed=seed)
        written = cf.write_cf_report(frame, out / "countercount", seed=seed, pooled_figures=False, tables=tables)
        drawn = countercount_figures(frame, out / "countercount", seed=seed)
        tables_written = [p for p in written if p.suffix != ".png"]
        others = [p for p in written if p.suffix == ".png" and p.exists() and p not in drawn]
        written = [*tables_written, *drawn, *others]
        paths.extend(written)
        sections.append(
            _section(
                "countercount",
                "CounterCount: factual and counterfactual attribute counts",
                "CounterCount",
                "Accuracy on factual and counterfactual (CF) items; bias rate = share of CF "
                "answers equal to the canonical count; other error = any other wrong answer. "
                "95 % bootstrap CIs; paired deltas against the baseline question. Every table row "
                "and figure row is one model, format and intervention; the only average is the "
                "cross-model mean, marked as such.",
                {
                    "scores": tables["cf_scores.csv"],
                    "by category": tables["cf_by_category.csv"],
                    "by CF count": tables["cf_by_count.csv"],
                    "by edit (removal vs addition, Figure 6b)": tables["cf_by_edit.csv"],
                    "cross-model mean (Figure 4a)": _cross_model(frame, seed),
                    "interventions (paired deltas)": tables["cf_deltas.csv"],
                    "blur sweep (Figure 20)": tables["cf_blur_sweep.csv"],
                },
                [p for p in written if p.suffix == ".png"],
                out,
                caption=judge_note or _judge_note_of(frame),
            )
        )
    video = by_task["video"]
    if video:
        from countgym.analysis import bias
        from countgym.analysis.csvout import write_csv

        df = video_frame(video, episodes)
        # A failed model call is no wrong answer: left out of every metric, counted in `errors`.
        errored = df["end"] == "error"
        errors = errored.groupby(df["model"]).sum()
        df = df[~errored]
        table = bias.bias_table(df)
        table.insert(1, "errors", [int(errors.get(m, 0)) if m != "Oracle" else 0 for m in table["model"]])
        table = _with_cis(table, video_scores(df, seed=seed))
        vout = out / "countvideo"
        vout.mkdir(parents=True, exist_ok=True)
        write_csv(table, vout / "bias.csv")
        tables = {"bias": table}
        if df["shape"].notna().any():
            tables["EM (%) by object class: shape and colour (Table 6)"] = bias.class_table(df)
            tables["EM (%) by object class: shape x colour"] = bias.class_table(df, cells=True)
            write_csv(tables["EM (%) by object class: shape and colour (Table 6)"], vout / "em_by_class.csv")
            write_csv(tables["EM (%) by object class: shape x colour"], vout / "em_by_class_cell.csv")
            paths.extend([vout / "em_by_class.csv", vout / "em_by_class_cell.csv"])
        figs = bias.bias_figures(df, vout / "figures")
        from countgym.analysis.video_figures import class_count_pages

        figs[2:2] = _write_pages(class_count_pages(df), vout / "figures", "cv_class_count")
        paths.extend([vout / "bias.csv", *figs])
        sections.append(
            _section(
                "countvideo",
                "CountVideoBench: accuracy and prediction bias",
                "CountVideoBench",
                "EM, Acc@10% (floor rule), MAE/RMSE over answered items, coverage, support size "
                "|S|, prediction perplexity PP = 2^H (non-answers one extra category), largest "
                "local excess N_k − max(L_k, R_k) and deficit min(L_k, R_k) − N_k over the "
                "model's support (predicted values k only; positive excess: k above all four "
                "neighbours, positive deficit: k in a valley between two peaks), preferred "
                "values and Top-3 share; an Oracle row. EM by object class as in Appendix F.",
                tables,
                figs,
                out,
            )
        )
    return paths, sections
