"""Report sections of the single-step tasks (CounterCount; CountVideoBench when present).

``write_task_sections`` writes each task's own tables and figures into a subfolder of the audit
folder and returns the HTML sections the report embeds, so one ``countgym audit`` over a mixed
run folder covers every task.
"""

from __future__ import annotations

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


def write_task_sections(
    records: Sequence[EpisodeRecord], out: Path, *, seed: int = 0, judge: Any = None
) -> tuple[list[Path], list[str]]:
    """Write the per-task outputs of non-image episodes; return (paths, HTML sections).

    ``judge`` (a ``ChatModel``) resolves CounterCount replies with several incompatible numbers
    (Appendix B.2), cached under ``out/countercount/judge-cache``."""
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

        df = pd.DataFrame(
            {
                "model": [r.model for r in video],
                "arm": [r.arm.name for r in video],
                "n_true": [r.truth.n if r.truth else None for r in video],
                "answer": [r.answer for r in video],
            }
        ).dropna(subset=["n_true"])
        df["n_true"] = df["n_true"].astype(int)
        df["model"] = df["model"] + " / " + df["arm"]
        table = bias.bias_table(df)
        vout = out / "countvideo"
        vout.mkdir(parents=True, exist_ok=True)
        table.to_csv(vout / "bias.csv", index=False)
        figs = bias.bias_figures(df, vout / "figures")
        paths.extend([vout / "bias.csv", *figs])
        sections.append(
            _section(
                "countvideo",
                "CountVideoBench: accuracy and prediction bias",
                "EM, Acc@10% (floor rule), MAE/RMSE over answered items, coverage, support size "
                "|S|, prediction perplexity PP = 2^H (non-answers one extra category), largest "
                "local excess and deficit, preferred values and Top-3 share; an Oracle row.",
                {"bias": table},
                figs,
            )
        )
    return paths, sections
