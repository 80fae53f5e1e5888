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

import pandas as pd

from countgym.analysis.report import esc, generic_table, png_uri
from countgym.logs import EpisodeRecord


def task_of_record(record: EpisodeRecord) -> str:
    """The task an episode ran (``image`` unless its environment says otherwise)."""
    return str(record.env_options.get("task", "image"))


def _section(anchor: str, title: str, note: str, tables: dict[str, pd.DataFrame], figures: Sequence[Path]) -> str:
    parts = [f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2><p class="note">{esc(note)}</p>']
    for name, df in tables.items():
        if df is not None and len(df):
            parts.append(f"<h3>{esc(name)}</h3>")
            parts.append(generic_table(df))
    for fig in figures:
        parts.append(
            f'<figure><img alt="{esc(fig.stem)}" src="{png_uri(fig.read_bytes())}"><figcaption>'
            f"{esc(fig.name)}</figcaption></figure>"
        )
    parts.append("</section>")
    return "\n".join(parts)


_CLASS_ID = re.compile(r"-(red|green|blue|yellow|purple)-(cube|sphere)-", re.IGNORECASE)


def video_frame(records: Sequence[EpisodeRecord], episodes: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per scored video episode: ``model`` (``model / arm label``), ``arm``, ``n_true``,
    ``answer``, ``shape`` and ``color`` (from the stimulus metadata in ``episodes`` when given,
    else read off a generated stimulus id such as ``cvb-n05-red-cube-r0``)."""
    from countgym.analysis.arms import arm_labels

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
            "model": [r.model for r in records],
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


def write_task_sections(
    records: Sequence[EpisodeRecord],
    out: Path,
    *,
    seed: int = 0,
    judge: Any = None,
    episodes: pd.DataFrame | None = None,
) -> tuple[list[Path], list[str]]:
    """Write the per-task outputs of non-image episodes; return (paths, HTML sections).

    ``judge`` (a ``ChatModel``) resolves CounterCount replies with several incompatible numbers
    (Appendix B.2), cached under ``out/countercount/judge-cache``. ``episodes`` (the audit's
    episodes table) supplies the video stimuli's shape and colour."""
    paths: list[Path] = []
    sections: list[str] = []
    cf_records = [r for r in records if task_of_record(r) == "countercount"]
    if cf_records:
        from countgym.analysis import cf

        frame = cf.cf_frame(cf_records)
        if judge is not None:
            frame = cf.judge_ambiguous(frame, judge, cache_dir=out / "countercount" / "judge-cache")
        written = cf.write_cf_report(frame, out / "countercount", seed=seed)
        paths.extend(written)
        sections.append(
            _section(
                "countercount",
                "CounterCount: factual and counterfactual attribute counts",
                "Accuracy on factual and counterfactual (CF) items; bias rate = share of CF "
                "answers equal to the canonical count; other error = any other wrong answer. "
                "95 % bootstrap CIs; paired deltas against the baseline question.",
                {
                    "scores": cf.cf_scores(frame, seed=seed),
                    "by category": cf.scores_by(frame, "category", seed=seed),
                    "by CF count": cf.scores_by(frame, "cf_bin", seed=seed),
                    "interventions (paired deltas)": cf.paired_deltas(frame, seed=seed),
                },
                [p for p in written if p.suffix == ".png"],
            )
        )
    video = [r for r in records if task_of_record(r) == "video"]
    if video:
        from countgym.analysis import bias

        df = video_frame(video, episodes)
        # A failed model call is no wrong answer: left out of every metric, counted in `errors`.
        errored = df["end"] == "error"
        errors = errored.groupby(df["model"]).sum()
        df = df[~errored]
        table = bias.bias_table(df)
        table.insert(1, "errors", [int(errors.get(m, 0)) if m != "Oracle" else 0 for m in table["model"]])
        vout = out / "countvideo"
        vout.mkdir(parents=True, exist_ok=True)
        table.to_csv(vout / "bias.csv", index=False)
        tables = {"bias": table}
        if df["shape"].notna().any():
            tables["EM (%) by object class: shape and colour (Table 6)"] = bias.class_table(df)
            tables["EM (%) by object class: shape x colour"] = bias.class_table(df, cells=True)
            tables["EM (%) by object class: shape and colour (Table 6)"].to_csv(vout / "em_by_class.csv", index=False)
            tables["EM (%) by object class: shape x colour"].to_csv(vout / "em_by_class_cell.csv", index=False)
            paths.extend([vout / "em_by_class.csv", vout / "em_by_class_cell.csv"])
        figs = bias.bias_figures(df, vout / "figures")
        paths.extend([vout / "bias.csv", *figs])
        sections.append(
            _section(
                "countvideo",
                "CountVideoBench: accuracy and prediction bias",
                "EM, Acc@10% (floor rule), MAE/RMSE over answered items, coverage, support size "
                "|S|, prediction perplexity PP = 2^H (non-answers one extra category), largest "
                "local excess N_k − max(L_k, R_k) and deficit min(L_k, R_k) − N_k over the "
                "model's support (predicted values k only; positive excess: k above all four "
                "neighbours, positive deficit: k in a valley between two peaks), preferred "
                "values and Top-3 share; an Oracle row. EM by object class as in Appendix F.",
                tables,
                figs,
            )
        )
    return paths, sections
