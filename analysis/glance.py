"""Results at a glance: the compact table ``countgym run``, ``sweep`` and ``audit`` print last.

One section per task, each with its own headline metrics, read from the audit's tables
(nothing is computed here that the audit does not compute):

- image tool loop (Give the Model a Finger): n episodes, errors, EM, MAE, R80 (main battery
  only; ``+`` marks a right-censored range) and the point-level audit rates per 100
  ground-truth objects (on-target, duplicate, phantom, omission) where the arm places tags;
- CountVideoBench: EM, MAE, support size |S| and prediction perplexity PP (Section 5.2);
- CounterCount: factual accuracy, counterfactual (CF) accuracy and bias rate (Section 3).

The table fits 100 columns: a name too long for its column is printed as a short key (``A1``
for an arm, ``D1`` a dataset, ``M1`` a model) spelled out in a key table under the table, as
the report's figures do (``facets.LabelKeys``), so the part of a name that tells cells apart is
never cut; numbers are rounded to what a glance needs. The full tables (with confidence intervals) are the
audit's CSVs and report.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from .facets import LabelKeys

if TYPE_CHECKING:
    from countgym.logs import EpisodeRecord

WIDTH = 100
"""The widest line the table may print."""

GLANCE_RESAMPLES = 200
"""Bootstrap resamples when a run computes its own table (only point values are shown)."""

_DASH = "-"


@dataclass(frozen=True)
class Glance:
    """What the table shows: the audit's ``summary`` rows, each group's task (from the
    episodes table) and the CounterCount scores (``cf_scores``), if any."""

    summary: pd.DataFrame
    tasks: dict[tuple[str, str, str], str]
    cf: pd.DataFrame | None = None


# --- building a Glance ------------------------------------------------------------------------
def _task_map(episodes: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    if episodes.empty or not {"dataset", "arm", "model"} <= set(episodes.columns):
        return {}
    task = episodes["task"] if "task" in episodes.columns else pd.Series("image", index=episodes.index)
    frame = pd.DataFrame({"d": episodes["dataset"].astype(str), "a": episodes["arm"].astype(str),
                          "m": episodes["model"].astype(str), "t": task.fillna("image").astype(str)})
    return {(d, a, m): t for d, a, m, t in frame.drop_duplicates(["d", "a", "m"]).itertuples(index=False)}


def glance_of_audit(out_dir: str | Path) -> Glance:
    """The table of an audit folder, read from its ``summary.csv``, ``episodes.csv`` and
    ``countercount/cf_scores.csv``."""
    out = Path(out_dir)
    summary = pd.read_csv(out / "summary.csv")
    episodes = pd.read_csv(out / "episodes.csv", usecols=lambda c: c in {"dataset", "arm", "model", "task"})
    cf_path = out / "countercount" / "cf_scores.csv"
    cf = pd.read_csv(cf_path) if cf_path.is_file() else None
    return Glance(summary, _task_map(episodes), cf)


def glance_of_logs(files: Sequence[Path], *, cache_dir: str | Path) -> Glance | None:
    """The table of some log files, computed as ``countgym audit`` would (answer rules without a
    judge or parser, fewer bootstrap resamples); None when they hold no episode.

    The records stream through once, as in the full audit (``source.RecordSource``): each is
    resolved and taken into the tables on its way; only the CounterCount records are read
    again, for their scores."""
    from .extraction import AnswerResolver
    from .pipeline import NoEpisodes, compute_tables
    from .source import RecordSource
    from .tables import _log_files, _split_sources

    paths, records = _split_sources(list(files))
    source = RecordSource(records, _log_files(paths) if paths else [])
    answers = AnswerResolver(cache_dir=cache_dir)
    cf_positions: list[int] = []

    def note(i: int, rec: EpisodeRecord) -> EpisodeRecord:
        rec = answers.step(i, rec)
        if rec.env_options.get("task") == "countercount":
            cf_positions.append(i)
        return rec

    source.add_hook(note)
    try:
        tables = compute_tables(source, n_resamples=GLANCE_RESAMPLES)
    except NoEpisodes:
        return None
    cf = None
    if cf_positions:
        from . import cf as cf_analysis

        cf = cf_analysis.cf_scores(cf_analysis.cf_frame(source.view(cf_positions)), n_resamples=GLANCE_RESAMPLES)
    return Glance(tables.summary, _task_map(tables.episodes), cf)


# --- rendering --------------------------------------------------------------------------------
def _num(v: Any, fmt: str) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return _DASH
    return _DASH if x != x else format(x, fmt)  # NaN: not measured


def _int(v: Any) -> str:
    return _num(v, ".0f")


def _r80(value: Any, censored: Any) -> str:
    text = _num(value, ".0f")
    return text + "+" if text != _DASH and str(censored).lower() == "true" else text


def _text(v: Any) -> str:
    return str(v) if v is not None and str(v) != "nan" else ""


def _dataset(text: Any) -> str:
    from .naming import short_dataset

    return short_dataset(text)


def _table(head: Sequence[str], rows: list[list[str]], right_from: int) -> list[str]:
    """Columns left-aligned up to ``right_from``, numbers right-aligned after it."""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    lines = []
    for r in (list(head), *rows):
        cells = [c.ljust(w) if i < right_from else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append(("  " + "  ".join(cells)).rstrip())
    return lines


_KEYS: ContextVar[dict[str, LabelKeys] | None] = ContextVar("glance_keys", default=None)
"""The key tables of the table being rendered, one per kind of name (shared by its sections)."""

MIN_NAME = 6
"""The narrowest a name column gets (its keys, ``A12``, and the header fit)."""

KEY_PREFIXES = {"dataset": "D", "arm": "A", "model": "M", "format": "F", "intervention": "I"}
"""Key prefix per name column (``A1`` is an arm)."""


def _name_columns(
    rows: list[list[str]], numeric_width: int, n_names: int, head: Sequence[str] = ()
) -> list[list[str]]:
    """Fit the name columns so every line fits ``WIDTH``: a name longer than its column's width
    becomes a key (``A1``) that ``render`` spells out under the table."""
    budget = WIDTH - 2 - numeric_width - 2 * n_names
    caps = [max((len(_text(r[i])) for r in rows), default=0) for i in range(n_names)]
    # Key the widest columns first, each down to what the others leave (short names in a keyed
    # column stay as they are), until the names fit.
    for i in sorted(range(n_names), key=lambda i: -caps[i]):
        if sum(caps) <= budget:
            break
        caps[i] = max(MIN_NAME, budget - (sum(caps) - caps[i]))
    # Never cut a name (the part that tells cells apart may be anywhere in it): key it instead.
    tables = _KEYS.get()
    if tables is None:
        tables = {}
    cols = []
    for i in range(n_names):
        kind = str(head[i]) if i < len(head) else f"name{i}"
        keys = tables.setdefault(kind, LabelKeys(prefix=KEY_PREFIXES.get(kind, "K")))
        keys.limit = caps[i]
        cols.append(keys.shorts([_text(r[i]) for r in rows]))
    return [[cols[i][j] if i < n_names else c for i, c in enumerate(r)] for j, r in enumerate(rows)]


def _rows_of(g: Glance, task: str) -> pd.DataFrame:
    from .summary import primary_rows

    s = primary_rows(g.summary)
    keep = [g.tasks.get((str(d), str(a), str(m)), "image") == task
            for d, a, m in zip(s["dataset"], s["arm"], s["model"], strict=True)]
    return s[keep]


def _image_section(g: Glance) -> list[str]:
    s = _rows_of(g, "image")
    if s.empty:
        return []
    audited = "n_audited" in s.columns and (pd.to_numeric(s["n_audited"], errors="coerce").fillna(0) > 0).any()
    head = ["dataset", "arm", "model", "n", "err", "EM", "MAE", "R80"]
    if audited:
        head += ["on-tgt", "dup", "phant", "omit"]
    rows = []
    for _, r in s.iterrows():
        row = [_dataset(r["dataset"]), str(r["arm"]), str(r["model"]), _int(r["n_episodes"]), _int(r["errors"]),
               _num(r["em"], ".2f"), _num(r["mae"], ".2f"), _r80(r.get("r80"), r.get("r80_censored"))]
        if audited:
            has = float(r.get("n_audited") or 0) > 0
            row += [_num(r.get(f"{k}_per100"), ".1f") if has else _DASH
                    for k in ("on_target", "duplicate", "phantom", "omission")]
        rows.append(row)
    rows = _name_columns(rows, _numeric_width(head, rows, 3), 3, head)
    title = "image task (EM exact match, MAE mean abs. error, R80 counting range, + censored)"
    if audited:
        title += ";\n  on-tgt, dup, phant, omit: tag audit per 100 ground-truth objects"
        if "audit_note" in s.columns and (s["audit_note"].astype(str) == "arm cannot point").any():
            title += " ('-': arm cannot point)"
    title += ":"
    return [*title.split("\n"), *_table(head, rows, 3)]


def _video_section(g: Glance) -> list[str]:
    s = _rows_of(g, "video")
    if s.empty:
        return []
    head = ["dataset", "arm", "model", "n", "err", "EM", "MAE", "|S|", "PP"]
    rows = [[_dataset(r["dataset"]), str(r["arm"]), str(r["model"]), _int(r["n_episodes"]), _int(r["errors"]),
             _num(r["em"], ".2f"), _num(r["mae"], ".2f"), _int(r.get("support_size")),
             _num(r.get("prediction_perplexity"), ".1f")] for _, r in s.iterrows()]
    rows = _name_columns(rows, _numeric_width(head, rows, 3), 3, head)
    return ["CountVideoBench (EM, MAE, support size |S|, prediction perplexity PP):", *_table(head, rows, 3)]


def _cf_section(g: Glance) -> list[str]:
    if g.cf is None or g.cf.empty:
        return []
    head = ["model", "format", "intervention", "n", "err", "factual", "CF", "bias"]
    rows = []
    for _, r in g.cf.iterrows():
        n = _int(float(r.get("n_factual", 0) or 0) + float(r.get("n_cf", 0) or 0))
        rows.append([str(r["model"]), str(r["format"]), str(r["intervention"]), n, _int(r.get("errors")),
                     _num(r.get("factual_accuracy"), ".2f"), _num(r.get("cf_accuracy"), ".2f"),
                     _num(r.get("bias_rate"), ".2f")])
    rows = _name_columns(rows, _numeric_width(head, rows, 3), 3, head)
    return ["CounterCount (factual and CF accuracy; bias = CF answers equal to the canonical count):",
            *_table(head, rows, 3), *_judge_lines(g.cf)]


def _judge_lines(cf: pd.DataFrame) -> list[str]:
    """Whether the judge ran on the table's replies, how many needed it and how they counted."""
    if "n_judge_needed" not in cf.columns:
        return []
    total = lambda c: int(pd.to_numeric(cf[c], errors="coerce").fillna(0).sum())  # noqa: E731
    needed, judged, left = total("n_judge_needed"), total("n_judged"), total("n_unjudged")
    line = f"judge: {needed} replies named several numbers: {judged} judged, {left} counted as no answer"
    if not left:
        return [line]
    return [line + ";", "  judge them: countgym audit RUNS --out OUT --judge same (the paper's setting)"]


def _numeric_width(head: Sequence[str], rows: list[list[str]], n_names: int) -> int:
    """Width of the number columns with their separators."""
    cols = list(zip(head, *rows, strict=True))[n_names:]
    return sum(max(len(x) for x in col) + 2 for col in cols)


def _key_lines(tables: dict[str, LabelKeys]) -> list[str]:
    """The key table: each key and the full name it stands for (wrapped, never cut)."""
    entries = [(key, kind, label) for kind, keys in tables.items() for key, label in keys.table]
    if not entries:
        return []
    width = max(len(k) for k, _, _ in entries)
    lines = ["keys (names too long for the table):"]
    for key, kind, label in entries:
        first = f"  {key.ljust(width)}  {kind}: "
        lines.extend(textwrap.wrap(label, WIDTH, initial_indent=first, subsequent_indent=" " * len(first),
                                   break_on_hyphens=False, break_long_words=True) or [first.rstrip()])
    return lines


def _selection_lines(g: Glance) -> list[str]:
    """Which stimuli the rows hold, when some row holds less than its whole dataset (``--limit``)."""
    from .summary import primary_rows

    s = primary_rows(g.summary)
    if "selection" not in s.columns:
        return []
    found = [str(v) for v in s["selection"].tolist() if isinstance(v, str) and v]
    if not found or all(v.startswith("all ") for v in found):
        return []
    counts: dict[str, int] = {}
    for v in found:
        counts[v] = counts.get(v, 0) + 1
    parts = [f"{v} ({k} row{'s' if k != 1 else ''})" if len(counts) > 1 else v for v, k in counts.items()]
    return _wrap("stimuli: " + "; ".join(parts))


def _wrap(text: str) -> list[str]:
    """``text`` in lines of at most ``WIDTH`` characters (continuations indented)."""
    return textwrap.wrap(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False)


def render(g: Glance, *, where: str) -> str:
    """The table as text (every line at most ``WIDTH`` characters), ending with ``where``: the
    line that says where the full tables are."""
    tables: dict[str, LabelKeys] = {}
    token = _KEYS.set(tables)
    try:
        sections = [s for s in (_image_section(g), _video_section(g), _cf_section(g)) if s]
    finally:
        _KEYS.reset(token)
    simulated = "simulated" in g.summary.columns and g.summary["simulated"].astype(str).str.lower().eq("true").any()
    lines: list[str] = []
    for s in sections:
        if simulated:  # every table says so, as the report does
            lines.append("SIMULATED: answered by a simulated model (--simulate), not a real model")
        lines.extend(s)
    lines.extend(_key_lines(tables))
    lines.extend(_selection_lines(g))
    lines.append(where)
    return "\n".join(lines) + "\n"
