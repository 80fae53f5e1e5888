"""The papers' human baselines, as the papers state them (no human runs are audited here).

CountVideoBench, Appendix C / Table 4: twenty participants answered the same 104-video subset
(four per cardinality), ten frames each, unconstrained viewing. CounterCount, Section 2.1 /
Figures 1, 8 and 21: 25 qualified annotators per image (Rapidata, at most 25 s per screen), MCQ,
majority vote. *Give the Model a Finger* has no human study: its developmental comparison is
qualitative (Section 6), so it has no row here.
"""

from __future__ import annotations

import html

import pandas as pd

PAPER_VALUE = "paper value"

VIDEO_HUMANS: tuple[dict[str, object], ...] = (
    {"respondent": "Human baseline (mean of 20 participants)", "EM": 90.8, "Acc@10%": 98.8,
     "coverage": 100.0, "|S|": 28.7, "PP": 27.3},
    {"respondent": "Human (majority vote)", "EM": 100.0, "Acc@10%": 100.0, "coverage": 100.0,
     "|S|": 26.0, "PP": 26.0},
    {"respondent": "Oracle", "EM": 100.0, "Acc@10%": 100.0, "coverage": 100.0, "|S|": 26.0, "PP": 26.0},
)  # fmt: skip
"""CountVideoBench Table 4, human and oracle rows (percent; |S| and PP per-respondent means)."""

VIDEO_HUMAN_BY_COUNT: tuple[tuple[str, float], ...] = (
    ("smallest counts", 99.0), ("n = 20", 92.0), ("n = 40", 85.0), ("n = 50", 74.0),
)
"""CountVideoBench Figure 7 / Appendix C: human EM (%) by cardinality, the values the text states."""

CF_HUMANS: tuple[dict[str, object], ...] = (
    {"condition": "MCQ, no instruction (Figure 1)", "factual acc.": 98.9, "CF acc.": 97.5},
    {"condition": "MCQ, with the cue instruction (Figures 8, 21)", "factual acc.": None, "CF acc.": 97.8},
)
"""CounterCount human accuracy (%), majority vote of 25 annotators per image. The paper states
the cued factual accuracy only as "little effect", so it is left empty."""

CF_HUMAN_LINES: dict[str, float] = {"factual_accuracy": 0.989, "cf_accuracy": 0.975}
"""CounterCount human MCQ accuracy without the instruction (rates), drawn as reference lines."""


def video_human_table() -> pd.DataFrame:
    return pd.DataFrame(list(VIDEO_HUMANS))


def cf_human_table() -> pd.DataFrame:
    return pd.DataFrame(list(CF_HUMANS))


def _table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            if v is None or (isinstance(v, float) and v != v):
                cells.append('<td class="num">–</td>')
            elif isinstance(v, float):
                cells.append(f'<td class="num">{v:.1f}</td>')
            else:
                cells.append(f"<td>{html.escape(str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def human_section() -> str:
    """The report's "Human baselines" section: the papers' human rows, labelled as paper values."""
    by_count = ", ".join(f"{k}: {v:.0f} %" for k, v in VIDEO_HUMAN_BY_COUNT)
    return (
        '<section id="human" data-nav="Humans"><h2>Human baselines (paper values)</h2>'
        '<p class="note"><b>Paper values, not computed from these runs.</b> countgym runs no '
        "human study; these rows are what the papers report, for reading the model rows "
        "against. <i>Give the Model a Finger</i> has no human study (its comparison with "
        "children is qualitative).</p>"
        '<h3 id="human-countvideo">CountVideoBench (Table 4, Figure 7): 104-video subset, '
        '20 participants <span class="paper-value">paper values</span></h3>'
        '<p class="note">Percent; |S| and PP are per-participant means. The model rows of Table 4 '
        "are on the same 104 videos; the CountVideoBench section above is on the videos these "
        f"runs used. Human EM by cardinality (Figure 7, as stated in the text): {html.escape(by_count)}; "
        "per-participant EM 71.2–100.0 % (median 91.8).</p>"
        + _table(video_human_table())
        + '<h3 id="human-countercount">CounterCount (Figures 1, 8, 21): 25 annotators per image, '
        'majority vote <span class="paper-value">paper values</span></h3>'
        '<p class="note">Accuracy in percent on the MCQ format. Cued factual accuracy is stated only '
        'as "little effect" (left empty). The MCQ panels of the cross-model figure draw the '
        "uncued values as dotted reference lines.</p>"
        + _table(cf_human_table())
        + "</section>"
    )
