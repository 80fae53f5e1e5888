"""The self-contained HTML report: tables, figures and the trajectory viewer in one file.

Everything is inline (CSS, JavaScript, figures and viewer images as ``data:`` URIs), so the
file opens offline and can be mailed around. Safety: every string that comes from the logs
(replies, ids, model and arm names, dataset paths) is HTML-escaped with ``html.escape`` when
written as markup; the viewer's data travels as JSON inside a ``<script
type="application/json">`` block with ``<``, ``>`` and ``&`` written as ``\\u003c`` etc., so no
reply can close the script element, and the viewer's JavaScript inserts text only through
``textContent``.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .naming import short_dataset
from .pipeline import AuditTables
from .viewer import ViewerData

Cell = Callable[[Mapping[str, Any]], str]


@dataclass(frozen=True)
class ReportFigure:
    """One embedded figure: file stem, caption and PNG bytes; ``keys`` spells out the short
    keys its labels use (key, label), ``anchor`` is an id to link to."""

    name: str
    caption: str
    png: bytes
    keys: Sequence[tuple[str, str]] = ()
    anchor: str | None = None


# --- safe embedding -----------------------------------------------------------------------------


def esc(value: object) -> str:
    """HTML-escaped text of any value (quotes included)."""
    return html.escape(str(value), quote=True)


def _jsonable(obj: object) -> object:
    """NaN and infinities become null (JSON has no NaN); containers are walked."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj


def json_for_script(obj: object) -> str:
    """JSON safe to place inside a ``<script>`` element: ``<``, ``>``, ``&`` (and every
    non-ASCII character) are ``\\uXXXX`` escapes, so the text cannot contain ``</script>``.
    NaN becomes null."""
    text = json.dumps(_jsonable(obj), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def png_uri(png: bytes) -> str:
    import base64

    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


# --- cell formatting ----------------------------------------------------------------------------


def _missing(v: object) -> bool:
    if v is None or v is pd.NA:
        return True
    try:
        return bool(isinstance(v, float | np.floating) and math.isnan(v))
    except TypeError:
        return False


def fmt_num(v: object, digits: int = 2) -> str:
    """Numbers for humans: ints as ints, floats with ``digits`` decimals, missing as a dash."""
    if _missing(v):
        return "–"
    if isinstance(v, bool | np.bool_):
        return "yes" if v else "no"
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        return str(int(f)) if f.is_integer() and abs(f) < 1e15 and digits == 0 else f"{f:.{digits}f}"
    return str(v)


def fmt_ci(est: object, lo: object, hi: object, digits: int = 2) -> str:
    """``est [lo, hi]``; ``est [–]`` when the interval is not estimable (``ci_note`` says
    why), never ``[x, x]``; just ``–`` without an estimate."""
    s = fmt_num(est, digits)
    if _missing(est):
        return s
    if _missing(lo) or _missing(hi) or lo == hi:
        return f"{s} [–]"
    return f"{s} [{fmt_num(lo, digits)}, {fmt_num(hi, digits)}]"


def fmt_r80(row: Mapping[str, Any]) -> str:
    """R80 with its CI; ``≥`` marks a right-censored range."""
    r = row.get("r80")
    if _missing(r):
        return "–"
    prefix = "≥ " if row.get("r80_censored") is True or row.get("r80_censored") == 1 else ""
    return prefix + fmt_ci(r, row.get("r80_ci_low"), row.get("r80_ci_high"), 0)


def html_table(
    df: pd.DataFrame,
    columns: Sequence[tuple[str, Cell | str]],
    *,
    table_id: str | None = None,
    numeric: Sequence[str] = (),
    wrap_at: int | None = None,
) -> str:
    """A table whose every cell is escaped; ``columns`` = (header, column name or cell function).
    Text cells longer than ``wrap_at`` characters (default ``LONG_CELL``) may wrap."""
    wrap_at = LONG_CELL if wrap_at is None else wrap_at
    # Long snake_case headers may break after an underscore (the table must fit the page).
    head = "".join(f"<th>{esc(h).replace('_', '_<wbr>')}</th>" for h, _ in columns)
    body = []
    for row in df.to_dict("records"):
        cells = []
        for h, c in columns:
            text = c(row) if callable(c) else fmt_num(row.get(c), _digits(c))
            if h in numeric or not callable(c) and _is_num(row.get(c)):
                cls = ' class="num"'
            else:
                cls = ' class="long"' if len(text) > LONG_CELL else ' class="wrap"' if len(text) > wrap_at else ""
            cells.append(f"<td{cls}>{esc(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    tid = f' id="{esc(table_id)}"' if table_id else ""
    return (
        f'<div class="table-wrap"><table{tid}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


LONG_CELL = 28
"""Text cells longer than this many characters may wrap (lists of values, long labels)."""


def _is_num(v: object) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)


def _digits(column: str) -> int:
    if column.startswith("n_") or column in ("repeat", "support_size"):
        return 0
    return 3 if any(k in column for k in ("tau", "rho", "slope", "_r", "share", "rate")) else 2


def _short_dataset_cell(column: str) -> Cell:
    """A table cell: the row's dataset name in ``column``, shortened."""
    return lambda r: short_dataset(r.get(column))


def _interval_cell(column: str, lo: str, hi: str, digits: int) -> Cell:
    """A table cell: the row's value in ``column`` with its interval ``[lo, hi]``."""
    return lambda r: fmt_ci(r.get(column), r.get(lo), r.get(hi), digits)


def generic_table(df: pd.DataFrame, *, short: Sequence[str] = ("dataset", "dataset_transformed"),
                  table_id: str | None = None) -> str:  # fmt: skip
    """Every column of ``df``, dataset paths shortened."""
    cols: list[tuple[str, Cell | str]] = []
    for c in df.columns:
        if c in short:
            cols.append((c, _short_dataset_cell(c)))
        else:
            cols.append((c, c))
    return html_table(df, cols, table_id=table_id)


CI_SUFFIXES: tuple[tuple[str, str], ...] = (("_ci_low", "_ci_high"), ("_low", "_high"))
"""Column-name pairs that hold a column's 95 % interval (``em_ci_low``; ``bias_rate_low``)."""


def ci_table(
    df: pd.DataFrame,
    *,
    labels: Mapping[str, str] | None = None,
    digits: int = 2,
    table_id: str | None = None,
    wrap_at: int | None = None,
) -> str:
    """A table in the Summary's format: every column ``X`` that has ``X_low``/``X_high`` (or
    ``X_ci_low``/``X_ci_high``) siblings becomes one ``X [95% CI]`` cell, ``value [low, high]``;
    the other columns are shown as in ``generic_table``. ``labels`` renames headers (the CI
    suffix is added to renamed CI columns too)."""
    labels = dict(labels or {})
    bounds: set[str] = set()
    intervals: dict[str, tuple[str, str]] = {}
    for c in df.columns:
        for lo_suf, hi_suf in CI_SUFFIXES:
            lo, hi = f"{c}{lo_suf}", f"{c}{hi_suf}"
            if lo in df.columns and hi in df.columns:
                intervals[c] = (lo, hi)
                bounds.update((lo, hi))
                break
    cols: list[tuple[str, Cell | str]] = []
    numeric: list[str] = []
    for c in df.columns:
        if c in bounds:
            continue
        head = labels.get(c, c)
        if c in intervals:
            lo, hi = intervals[c]
            head = f"{head} [95% CI]"
            cols.append((head, _interval_cell(c, lo, hi, digits)))
            numeric.append(head)
        elif c in ("dataset", "dataset_transformed"):
            cols.append((head, _short_dataset_cell(c)))
        else:
            cols.append((head, c))
    return html_table(df, cols, table_id=table_id, numeric=numeric, wrap_at=wrap_at)


# --- sections -----------------------------------------------------------------------------------


SUMMARY_KEYS: list[tuple[str, Cell | str]] = [
    ("dataset", lambda r: short_dataset(r["dataset"]) if "dataset" in r else ""),
    ("set", lambda r: "" if _missing(r.get("set")) else str(r.get("set"))),
    ("model", "model"),
    ("arm", "arm"),
]
SUMMARY_COUNTING: list[tuple[str, Cell | str]] = [
    ("episodes", "n_episodes"),
    ("EM [95% CI]", lambda r: fmt_ci(r["em"], r["em_ci_low"], r["em_ci_high"])),
    ("Acc@10%", "acc10"),
    ("MAE [95% CI]", lambda r: fmt_ci(r["mae"], r["mae_ci_low"], r["mae_ci_high"])),
    ("coverage", "coverage"),
    ("R80 [95% CI]", fmt_r80),
    ("|S|", "support_size"),
    ("PP", "prediction_perplexity"),
]
SUMMARY_AUDIT: list[tuple[str, Cell | str]] = [
    ("audited", "n_audited"),
    ("on-target", "on_target_per100"),
    ("duplicate", "duplicate_per100"),
    ("phantom", "phantom_per100"),
    ("omission", "omission_per100"),
    ("card. cons.", "cardinality_consistency"),
    ("pointing err.", "pointing_error"),
    ("revision", "revision_rate"),
]
"""The Summary's columns: the counting table for every row, the point-level audit table for
the rows with audited tags (two tables, so each fits the 1400 px layout)."""


def _present(cols: list[tuple[str, Cell | str]], df: pd.DataFrame) -> list[tuple[str, Cell | str]]:
    return [c for c in cols if callable(c[1]) or c[1] in df.columns]


def summary_section(summary: pd.DataFrame) -> str:
    counting = html_table(summary, _present(SUMMARY_KEYS + SUMMARY_COUNTING, summary), table_id="summary-table")
    audited = summary[summary["n_audited"] > 0] if "n_audited" in summary.columns else summary.iloc[:0]
    audit = ""
    if len(audited):
        audit = (
            '<h3 id="summary-audit">Point-level audit</h3><p class="note">The rows whose '
            "episodes placed tags on stimuli with ground-truth points (audited = episodes "
            "audited). Rates per 100 ground-truth objects; pointing error in thousandths of the "
            "shorter image side; card. cons. = announced count equals the number of tags; "
            "revision = share of tagging trajectories with a second tag call.</p>"
            + html_table(audited, _present(SUMMARY_KEYS + SUMMARY_AUDIT, audited), table_id="summary-audit-table")
        )
    audit += _no_pointing_note(summary) + ci_notes_html(summary)
    return (
        '<section id="summary"><h2>Summary</h2>'
        "<p class=\"note\">One row per dataset, arm and model; a dataset holding several "
        "stimulus sets (the full DotArrays battery: main and factor sets) gets its pooled row "
        "(set: all) and one row per set. EM = exact match (unanswered = "
        "wrong); MAE over answered items; R80 = counting range fitted on the main battery only "
        "(≥: right-censored, still at or above 80 % at the largest n); |S| = support size, "
        "PP = prediction perplexity 2^H.</p>" + counting + audit + "</section>"
    )


MAX_CI_NOTES = 12
"""Rows whose not-estimable intervals a table's footnote explains one by one."""


def ci_notes_html(df: pd.DataFrame, keys: Sequence[str] = ("dataset", "arm", "model")) -> str:
    """The footnote under a table with ``[–]`` intervals: which rows, and why not estimable."""
    from .bootstrap import CI_NOTE, MIN_CI_ITEMS

    if CI_NOTE not in df.columns:
        return ""
    rows = df[df[CI_NOTE].map(lambda v: isinstance(v, str) and bool(v))]
    if rows.empty:
        return ""
    items = []
    for r in rows.head(MAX_CI_NOTES).to_dict("records"):
        name = " · ".join(short_dataset(r[k]) if k == "dataset" else str(r[k]) for k in keys if k in r)
        items.append(f"<li>{esc(name)}: {esc(r[CI_NOTE])}</li>")
    more = f"<li>and {len(rows) - MAX_CI_NOTES} more rows (column {CI_NOTE})</li>" if len(rows) > MAX_CI_NOTES else ""
    return (
        f'<div class="note ci-notes"><p>[–]: interval not estimable, never shown as [x, x]: the bootstrap '
        f"cannot vary with fewer than {MIN_CI_ITEMS} items, when every outcome is alike, or (R80) with one "
        f"image per count level. The reason is in the {CI_NOTE} column of the CSV.</p><ul>"
        + "".join(items) + more + "</ul></div>"
    )


def _no_pointing_note(summary: pd.DataFrame) -> str:
    """The footnote naming the arms left out of the point-level audit because they cannot point."""
    from .audit import NO_POINTING

    if "audit_note" not in summary.columns or "arm" not in summary.columns:
        return ""
    rows = summary[summary["audit_note"].astype(str) == NO_POINTING]
    if rows.empty:
        return ""
    arms = ", ".join(sorted({str(a) for a in rows["arm"]}))
    return (
        f'<p class="note" id="summary-no-pointing">Not in the point-level audit, {NO_POINTING} (the tool '
        "set its log records offers no tag, or the prompt asks for a number only): on-target, "
        "duplicate, phantom, omission, cardinality consistency, pointing error and revision are "
        f"empty for these arms (audit_note in episodes.csv and summary.csv), not 0 or 100: {esc(arms)}.</p>"
    )


def contrasts_section(contrasts: pd.DataFrame) -> str:
    if contrasts.empty:
        return (
            '<section id="contrasts" data-nav="Contrasts"><h2>Arm contrasts</h2><p class="note">No paired contrasts: '
            "they need two arms of one model on the same stimuli and repeats.</p></section>"
        )
    cols: list[tuple[str, Cell | str]] = [
        ("dataset", lambda r: short_dataset(r["dataset"])),
        ("model", "model"),
        ("arm a (baseline)", "arm_a"),
        ("arm b", "arm_b"),
        ("metric", "metric"),
        ("pairs", "n_pairs"),
        ("images", "n_images"),
        ("a", lambda r: fmt_num(r["value_a"], 3)),
        ("b", lambda r: fmt_num(r["value_b"], 3)),
        ("b − a [95% CI]", lambda r: fmt_ci(r["difference"], r["ci_low"], r["ci_high"], 3)),
        ("CI-solid", lambda r: "yes" if r["ci_solid"] else "no"),
    ]
    return (
        '<section id="contrasts" data-nav="Contrasts"><h2>Arm contrasts</h2><p class="note">Paired over the same '
        "stimulus and repeat; 95 % percentile bootstrap over images. CI-solid: the interval "
        "excludes zero. MAE differences use the pairs where both arms answered.</p>"
        + html_table(contrasts, cols, table_id="contrasts-table")
        + ci_notes_html(contrasts, ("dataset", "model", "arm_a", "arm_b", "metric"))
        + "</section>"
    )


PRINCIPLE_TEXT: dict[str, tuple[str, str]] = {
    "traversal": (
        "Realised traversal",
        "Kendall tau-b between tag index and vertical position, trajectories with at least "
        "five tags (reading order > 0, reverse order < 0).",
    ),
    "order_effect": (
        "Order irrelevance",
        "repeat = share of same-order repeat pairs with different answers (mean of both "
        "orders); cross = share of opposite-order pairs with different answers; order effect = "
        "cross − repeat (95 % bootstrap CI over stimuli).",
    ),
    "transform_consistency": (
        "Rotation and mirror consistency",
        "The same arm on a stimulus and on its transformed copy (meta transform_of or id "
        "suffix): agreement, repeat control and effect = disagreement − repeat disagreement.",
    ),
    "perturbation": (
        "Tag-perturbation probe",
        "remove: repaired = the removed object is tagged again after the probe; add: repaired = "
        "the model starts over (mode: replace). visible / emitted share = answers equal to the "
        "tags on the image / the tags the model drew, among trajectories where these differ. "
        "Answer shift = perturbed − unperturbed answer on the same stimulus.",
    ),
    "tags_vs_direct": (
        "Tags vs direct answers",
        "Share of images whose tag count equals the model's own direct answer, and Spearman "
        "rho of the per-image errors (tag count − n vs direct answer − n).",
    ),
    "departures": (
        "Departures of the announced count from the tag count",
        "departure rate = share announcing a count different from their tags; closer / "
        "farther = share of departures whose answer is closer to / farther from the truth "
        "than the tag count.",
    ),
    "lattice": (
        "Lattice control",
        "On-target tags on regular/lattice arrays: slope of tag offset on dot offset from the "
        "ideal cell centre (≈1: tags on dots, ≈0: tags on the grid), and how many times "
        "closer tags lie to the dot than to the cell centre.",
    ),
}


def principles_section(principles: Mapping[str, pd.DataFrame]) -> str:
    if not principles:
        return (
            '<section id="principles"><h2>Principle tests</h2><p class="note">None applies to '
            "these logs (they need tagging trajectories, order or perturbation arms, a direct "
            "arm, transformed stimuli or lattice stimuli).</p></section>"
        )
    parts = ['<section id="principles" data-nav="Principle tests"><h2>Principle tests and controls</h2>']
    for name, df in principles.items():
        title, text = PRINCIPLE_TEXT.get(name, (name, ""))
        parts.append(
            f'<h3 id="p-{esc(name)}">{esc(title)} <span class="file">{esc(name)}.csv</span></h3>'
            f'<p class="note">{esc(text)}</p>'
            # Many columns: intervals as "value [low, high]" cells, labels wrap past 12 characters.
            + ci_table(df, digits=3, table_id=f"table-{name}", wrap_at=12)
        )
    parts.append("</section>")
    return "".join(parts)


def range_table(ranges: pd.DataFrame) -> str:
    """R80 per model and arm: the main battery, and main + XL as one curve (Table 7)."""
    if ranges is None or ranges.empty:
        return ""
    cols: list[tuple[str, Cell | str]] = [
        ("model", "model"), ("arm", "arm"), ("curve", "curve"), ("n", lambda r: f"{fmt_num(r['n_min'], 0)}–{fmt_num(r['n_max'], 0)}"),
        ("images", "n_images"), ("levels", "n_levels"), ("R80 [95% CI]", fmt_r80),
    ]  # fmt: skip
    return (
        '<p class="note">R80 per model and arm over every dataset: <b>main</b> = the DotArrays '
        "main battery only (factor sets are never pooled into the curve); <b>main+xl</b> = the "
        "main battery and the extension battery fitted as one curve over n = 1–200, with the "
        "same image-resampling CI.</p>" + html_table(ranges, cols, table_id="r80-table")
    )


def capacity_table_html(capacity: pd.DataFrame) -> str:
    """Capacity profile per battery and the pooled DotArrays + FSC-147 row (Table 2)."""
    if capacity is None or capacity.empty:
        return ""
    cols: list[tuple[str, Cell | str]] = [
        ("model", "model"), ("arm", "arm"), ("pool", "pool"), ("images", "n_audited"),
        ("pointing err. [95% CI]", lambda r: fmt_ci(r["pointing_error"], r["pointing_error_ci_low"], r["pointing_error_ci_high"], 1)),
        ("on-target", "on_target_per100"), ("duplicate", "duplicate_per100"),
        ("phantom", "phantom_per100"), ("omission", "omission_per100"),
        ("card. cons.", "cardinality_consistency"), ("revision", "revision_rate"),
    ]  # fmt: skip
    return (
        '<p class="note">Capacity profile per battery and, pooled as in the paper\'s Table 2, '
        "over DotArrays (main and factor sets) and FSC-147 together: pointing error = median "
        "over images of the per-image median on-target distance (thousandths of the shorter "
        "side), 95 % bootstrap CI over images; rates per 100 objects.</p>"
        + html_table(capacity, cols, table_id="capacity-table")
    )


def figure_html(
    png: bytes, caption: str, file: str, keys: Sequence[tuple[str, str]] = (), anchor: str | None = None
) -> str:
    """One embedded figure, scaled down to the page width when wider, with its file name and,
    when its labels use short keys, the key table."""
    fid = f' id="{esc(anchor)}"' if anchor else ""
    key_table = ""
    if keys:
        rows = "".join(f"<tr><td>{esc(k)}</td><td class=\"long\">{esc(v)}</td></tr>" for k, v in keys)
        key_table = (
            '<details class="keys" open><summary>Label keys of this figure</summary><div class="table-wrap">'
            f"<table><thead><tr><th>key</th><th>label</th></tr></thead><tbody>{rows}</tbody></table></div></details>"
        )
    return (
        f'<figure class="plot"{fid}><img src="{png_uri(png)}" alt="{esc(caption)}">'
        f'<figcaption>{esc(caption)} <span class="file">{esc(file)}</span></figcaption>{key_table}</figure>'
    )


def section_open(anchor: str, title: str, nav: str | None = None) -> str:
    """A section's opening tag and heading; ``nav`` is its (shorter) label in the navigation."""
    label = f' data-nav="{esc(nav)}"' if nav else ""
    return f'<section id="{esc(anchor)}"{label}><h2>{esc(title)}</h2>'


ARMS_LEAD = (
    '<p class="note">One panel per dataset and model, at most 12 arms or contrasts per panel '
    "(more continue in a further panel); labels longer than 24 characters are drawn as keys "
    "spelled out under the figure. Nothing is pooled across datasets or models.</p>"
)


def figures_section(
    figures: Sequence[ReportFigure], anchor: str, title: str, lead: str = "", nav: str | None = None
) -> str:
    if not figures and not lead:
        return ""
    body = lead + "".join(
        figure_html(f.png, f.caption, f"figures/{f.name}.png", f.keys, f.anchor) for f in figures
    )
    return f"{section_open(anchor, title, nav)}{body}</section>"


def viewer_section(viewer: ViewerData | None) -> str:
    if viewer is None or viewer.shown == 0:
        return (
            '<section id="viewer"><h2>Trajectory viewer</h2><p class="note">Disabled or no '
            "episodes; use <code>countgym replay</code> to render any observation.</p></section>"
        )
    if viewer.capped_by == "count":
        cap = (
            f"Showing {viewer.shown} of {viewer.total} episodes (viewer cap: "
            f"{viewer.options.max_episodes} episodes, whole stimuli spread over n)."
        )
    elif viewer.capped_by == "bytes":
        cap = (
            f"Showing {viewer.shown} of {viewer.total} episodes (image budget of "
            f"{viewer.options.max_bytes / 1e6:.1f} MB reached)."
        )
    else:
        cap = f"Showing all {viewer.total} episodes."
    data = {"episodes": list(viewer.episodes)}
    return (
        '<section id="viewer"><h2>Trajectory viewer</h2>'
        f'<p class="note" id="cg-cap">{esc(cap)} Other episodes: <code>countgym replay RUNFILE '
        "--episode ID --step K --out IMAGE.png</code>. Images are down-scaled JPEG re-renders "
        "of what the policy saw.</p>"
        '<div class="viewer"><div class="viewer-list">'
        '<input id="cg-search" type="search" placeholder="Filter: id, model, arm, stimulus…" '
        'aria-label="filter episodes">'
        '<select id="cg-select" size="14" aria-label="episodes"></select>'
        '<div class="viewer-nav"><button id="cg-prev" type="button">◀ previous</button>'
        '<button id="cg-next" type="button">next ▶</button></div></div>'
        '<div id="cg-episode" class="viewer-episode"></div></div>'
        f'<script type="application/json" id="cg-viewer-data">{json_for_script(data)}</script>'
        f"<script>{VIEWER_JS}</script></section>"
    )


VIEWER_JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("cg-viewer-data").textContent);
  var eps = data.episodes;
  var sel = document.getElementById("cg-select");
  var search = document.getElementById("cg-search");
  var box = document.getElementById("cg-episode");
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function val(v) { return v === null || v === undefined ? "none" : String(v); }
  // The model is named only when the episodes come from several: the list stays narrow.
  var models = {};
  eps.forEach(function (e) { models[e.model] = true; });
  var multiModel = Object.keys(models).length > 1;
  function label(e, i) {
    return (i + 1) + ". " + (multiModel ? e.model + " · " : "") + e.arm + " · " + e.stimulus +
      " r" + e.repeat + " — n=" + val(e.n_true) + ", answer=" + val(e.answer);
  }
  function fill() {
    var q = search.value.toLowerCase();
    var cur = sel.value;
    sel.textContent = "";
    eps.forEach(function (e, i) {
      var t = label(e, i);
      var hay = (t + " " + e.id + " " + e.model + " " + e.dataset).toLowerCase();
      if (q && hay.indexOf(q) < 0) { return; }
      var o = el("option", null, t);
      o.value = String(i);
      sel.appendChild(o);
    });
    var keep = false;
    for (var k = 0; k < sel.options.length; k++) {
      if (sel.options[k].value === cur) { sel.selectedIndex = k; keep = true; }
    }
    if (!keep && sel.options.length) { sel.selectedIndex = 0; }
  }
  function picture(src, caption) {
    var f = el("figure", "frame");
    if (src) {
      var img = el("img");
      img.src = src;
      img.alt = caption;
      f.appendChild(img);
    }
    f.appendChild(el("figcaption", null, caption));
    return f;
  }
  function fact(dl, k, v) { dl.appendChild(el("dt", null, k)); dl.appendChild(el("dd", null, val(v))); }
  function textBlock(parent, title, text, cls) {
    if (text === null || text === undefined || text === "") { return; }
    parent.appendChild(el("div", "label", title));
    parent.appendChild(el("pre", cls || null, text));
  }
  function show(i) {
    var e = eps[i];
    if (!e) { return; }
    box.textContent = "";
    box.setAttribute("data-episode", e.id);
    box.appendChild(el("h3", "episode-title", e.id));
    var dl = el("dl", "facts");
    fact(dl, "dataset", e.dataset); fact(dl, "model", e.model); fact(dl, "arm", e.arm);
    fact(dl, "stimulus", e.stimulus); fact(dl, "repeat", e.repeat); fact(dl, "true n", e.n_true);
    fact(dl, "answer", e.answer); fact(dl, "tags", e.n_tags); fact(dl, "end", e.end);
    fact(dl, "correct", e.correct === null ? null : (e.correct ? "yes" : "no"));
    if (e.audit) {
      fact(dl, "on-target / dup. / phantom / omission",
        e.audit.on_target + " / " + e.audit.duplicate + " / " + e.audit.phantom + " / " + e.audit.omission);
    }
    box.appendChild(dl);
    if (e.note) { box.appendChild(el("p", "note", e.note)); }
    if (e.error) { textBlock(box, "error", e.error, "error"); }
    if (e.prompt) {
      var asked = el("details", "asked");
      asked.open = true;
      asked.appendChild(el("summary", null, "what the model was asked (first observation)"));
      textBlock(asked, "system prompt", e.prompt.system, "prompt");
      textBlock(asked, "tools (native protocol)", e.prompt.tools, "prompt");
      textBlock(asked, "user message", e.prompt.user, "prompt");
      box.appendChild(asked);
    }
    e.steps.forEach(function (s, j) {
      var row = el("div", "step");
      row.appendChild(picture(e.frames[j] || null, "observation " + j + (j === 0 ? " (start)" : "")));
      var t = el("div", "step-text");
      t.appendChild(el("h4", null, "step " + s.k));
      textBlock(t, "model reply", s.reply, "reply");
      textBlock(t, "parsed action", s.action, "action");
      textBlock(t, "parse error", s.parse_error, "error");
      textBlock(t, "environment message", s.message, "message");
      if (s.perturbation) { textBlock(t, "harness perturbation", s.perturbation, "error"); }
      t.appendChild(el("p", "meta", s.tags_added + " tag(s) drawn" + (s.cleared ? ", earlier tags cleared" : "")));
      row.appendChild(t);
      box.appendChild(row);
    });
    var last = el("div", "step final");
    var n = e.steps.length;
    // Single-step tasks show one observation (at the step); the final one is the same pixels.
    if (!e.single_step) { last.appendChild(picture(e.frames[n] || null, "observation " + n + " (final)")); }
    if (e.overlay) {
      var ov = picture(e.overlay, "audit overlay");
      var lg = el("p", "legend");
      [["on-target", "ok"], ["duplicate", "dup"], ["phantom", "ph"], ["omission (hollow)", "om"]].forEach(function (p) {
        var sw = el("span", "swatch " + p[1]);
        lg.appendChild(sw);
        lg.appendChild(document.createTextNode(" " + p[0] + "  "));
      });
      ov.appendChild(lg);
      last.appendChild(ov);
    }
    box.appendChild(last);
  }
  function step(d) {
    if (!sel.options.length) { return; }
    var k = Math.min(sel.options.length - 1, Math.max(0, sel.selectedIndex + d));
    sel.selectedIndex = k;
    show(Number(sel.value));
  }
  sel.addEventListener("change", function () { show(Number(sel.value)); });
  search.addEventListener("input", function () { fill(); if (sel.options.length) { show(Number(sel.value)); } });
  document.getElementById("cg-prev").addEventListener("click", function () { step(-1); });
  document.getElementById("cg-next").addEventListener("click", function () { step(1); });
  fill();
  if (eps.length) { show(0); }
})();
"""

CSS = """
:root { --fg: #1d232b; --muted: #5b6573; --line: #d9dee5; --bg: #ffffff; --alt: #f5f7fa;
        --accent: #1f5fbf; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--fg); background: var(--bg); margin: 0; }
header, main { max-width: 1400px; margin: 0 auto; padding: 0 24px; }
header { padding-top: 20px; border-bottom: 1px solid var(--line); }
h1 { font-size: 24px; margin: 0 0 6px; }
h2 { font-size: 19px; margin: 30px 0 8px; border-bottom: 2px solid var(--accent); padding-bottom: 3px; }
h3 { font-size: 15px; margin: 20px 0 4px; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
.note { color: var(--muted); margin: 4px 0 10px; max-width: 1100px; }
.file { color: var(--muted); font-weight: normal; font-size: 12px; font-family: ui-monospace, monospace; }
.table-wrap { overflow: auto; max-height: 560px; border: 1px solid var(--line); border-radius: 4px; }
/* Tables fit the page: headers and long text cells wrap, numbers and "value [CI]" cells do not. */
table { border-collapse: collapse; font-size: 12px; width: 100%; }
th, td { padding: 3px 6px; border-bottom: 1px solid var(--line); text-align: left; }
th { position: sticky; top: 0; background: #e9eef5; z-index: 1; vertical-align: bottom; }
td { white-space: nowrap; }
td.long { white-space: normal; overflow-wrap: anywhere; min-width: 10em; }
td.wrap { white-space: normal; overflow-wrap: anywhere; min-width: 6em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: var(--alt); }
figure.plot { margin: 12px 0 22px; }
main img { max-width: 100%; height: auto; }
figure.plot img { border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 12.5px; }
.viewer { display: grid; grid-template-columns: 400px minmax(0, 1fr); gap: 16px; align-items: start; }
.viewer-list { position: sticky; top: 8px; }
.viewer-list input, .viewer-list select { width: 100%; font: inherit; font-size: 12.5px; }
.viewer-list select { margin-top: 6px; }
.viewer-nav { display: flex; gap: 6px; margin-top: 6px; }
.viewer-nav button { flex: 1; font: inherit; }
.facts { display: grid; grid-template-columns: max-content 1fr max-content 1fr; gap: 2px 12px; margin: 4px 0 10px; }
.facts dt { color: var(--muted); } .facts dd { margin: 0; font-weight: 600; }
.step { display: grid; grid-template-columns: minmax(220px, 384px) 1fr; gap: 14px;
        border-top: 1px solid var(--line); padding: 10px 0; }
.step.final { grid-template-columns: minmax(220px, 384px) minmax(220px, 512px); }
.frame { margin: 0; } .frame img { width: 100%; border: 1px solid var(--line); }
.step-text h4 { margin: 0 0 4px; }
.label { color: var(--muted); font-size: 11.5px; text-transform: uppercase; letter-spacing: .04em; margin-top: 6px; }
pre { white-space: pre-wrap; word-break: break-word; background: var(--alt); border: 1px solid var(--line);
      border-radius: 3px; padding: 6px 8px; margin: 2px 0; font-size: 12px; max-height: 260px; overflow: auto; }
pre.error { background: #fff1f0; } pre.reply { background: #f0f6ff; }
pre.prompt { background: #f7f3ea; } details.asked { margin: 4px 0 8px; } details.asked > summary { cursor: pointer; color: var(--muted); }
.meta { color: var(--muted); font-size: 12px; margin: 4px 0; }
.legend { font-size: 12px; color: var(--muted); }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 50%; border: 3px solid; vertical-align: -1px; }
.swatch.ok { border-color: rgb(0,170,60); } .swatch.dup { border-color: rgb(255,140,0); }
.swatch.ph { border-color: rgb(220,0,0); } .swatch.om { border-color: rgb(0,90,255); background: transparent; }
.simulated-banner { background: #b00020; color: #fff; padding: 6px 10px; border-radius: 4px; margin: 6px 0; }
caption.simulated { caption-side: top; text-align: left; color: #b00020; font-weight: 700; font-size: 11px;
                    padding: 2px 6px; }
b.simulated { color: #b00020; }
.missing { color: var(--muted); }
.table-wrap.full { max-height: none; }
#paper-map details > summary { cursor: pointer; } #paper-map details > summary h3 { display: inline; }
table.paper-map td:first-child { width: 6em; }
details.keys { margin-top: 4px; font-size: 12px; max-width: 1100px; }
details.keys summary { color: var(--muted); cursor: pointer; }
.paper-value { color: #8a5a00; font-size: 12px; font-weight: normal; border: 1px solid #e0c080;
               border-radius: 3px; padding: 0 4px; margin-left: 6px; }
footer { max-width: 1400px; margin: 30px auto; padding: 10px 24px; color: var(--muted); border-top: 1px solid var(--line); }
"""


def display_title(title: str) -> str:
    """A report title for display: a run folder's path shows as its name (``/a/b/runs`` ->
    ``runs``), so no absolute path of the machine that wrote the report appears in it."""
    text = str(title).strip()
    if "/" in text or "\\" in text:
        text = re.split(r"[\\/]", text.rstrip("/\\"))[-1]
    return text or "countgym audit report"


_SECTION_RE = re.compile(r'<section id="([^"]+)"(?: data-nav="([^"]*)")?>\s*<h2>(.*?)</h2>', re.DOTALL)


def nav_links(sections: Sequence[str]) -> list[tuple[str, str]]:
    """(anchor, label) of every section in ``sections``, in page order: the ``data-nav``
    label when the section has one, else its heading. Built from the rendered sections, so
    the navigation lists exactly the sections present."""
    links = []
    for part in sections:
        for anchor, short, heading in _SECTION_RE.findall(part):
            label = short or re.sub(r"<[^>]+>", "", heading)
            links.append((anchor, html.unescape(label)))
    return links


SIMULATED_NOTE = (
    "SIMULATED: a simulated model answered {what}; the numbers measure the pipeline and the "
    "injected behaviour, not any real model."
)


def simulated_banner(sources: Sequence[str], share: str = "") -> str:
    """The header's SIMULATED banner, naming the simulation profiles in force."""
    what = "these episodes" if not share else f"{share} of these episodes"
    prof = f" Profiles: {', '.join(sources)}." if sources else ""
    return f'<p class="simulated-banner" id="simulated"><b>{esc(SIMULATED_NOTE.format(what=what))}</b>{esc(prof)}</p>'


_TABLE_OPEN = re.compile(r"(<table\b[^>]*>)")
_FIGCAPTION_OPEN = "<figcaption>"


def mark_simulated(section: str) -> str:
    """Every table of ``section`` gets a SIMULATED caption, every figure caption a SIMULATED
    prefix."""
    section = _TABLE_OPEN.sub(r'\1<caption class="simulated">SIMULATED</caption>', section)
    return section.replace(_FIGCAPTION_OPEN, _FIGCAPTION_OPEN + '<b class="simulated">SIMULATED</b> ')


def render_report(
    tables: AuditTables,
    *,
    figures: Mapping[str, Sequence[ReportFigure]],
    viewer: ViewerData | None,
    provenance: Mapping[str, object],
    title: str = "countgym audit report",
    extra_sections: Sequence[str] = (),
    simulated: Sequence[str] | None = None,
    paper_map: bool = True,
) -> str:
    """The report as one HTML string. ``figures`` maps a section (``range``, ``arms``,
    ``capacity``) to its figures; ``provenance`` lists facts shown in the header.

    ``simulated`` (the profile sources; given, or found in the episodes' ``simulated``
    column) marks the header and every table and figure SIMULATED. ``paper_map`` adds the
    "Paper map" section first, linking every table and figure of the three papers to where
    this report has it."""
    from .human import human_section
    from .paper_map import facts_from, paper_map_html, report_anchors

    ep = tables.episodes
    n_sim = int(ep["simulated"].sum()) if "simulated" in ep.columns else 0
    is_sim = simulated is not None or n_sim > 0
    facts = " · ".join(f"{esc(k)}: <b>{esc(v)}</b>" for k, v in provenance.items())
    title = display_title(title)
    sections = [
        s for s in (
            summary_section(tables.summary),
            figures_section(
                figures.get("range", ()), "range", "Counting range (accuracy vs n)",
                range_table(tables.counting_range), nav="Counting range",
            ),
            contrasts_section(tables.contrasts),
            figures_section(
                figures.get("arms", ()), "arms", "Arm comparison", ARMS_LEAD if figures.get("arms") else "",
                nav="Arms",
            ),
            figures_section(
                figures.get("capacity", ()), "capacity", "Capacity profile",
                capacity_table_html(tables.capacity),
            ),
            principles_section(tables.principles),
            *extra_sections,
            human_section(),
            viewer_section(viewer),
        ) if s
    ]  # fmt: skip
    if paper_map:
        anchors = set().union(*(report_anchors(s) for s in sections))
        sections.insert(0, paper_map_html(facts_from(anchors, ep, simulated=is_sim)))
    banner = ""
    if is_sim:
        sections = [mark_simulated(s) for s in sections]
        share = "" if n_sim in (0, len(ep)) else f"{n_sim} of {len(ep)}"
        banner = simulated_banner(list(simulated or ()), share)
        title = f"SIMULATED · {title}"
    nav = "".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t in nav_links(sections))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f'<header><h1>{esc(title)}</h1>{banner}<p class="note">{facts}</p><nav>{nav}</nav></header>',
        "<main>",
        *sections,
        "</main>",
        '<footer>Self-contained report written by <code>countgym audit</code>: the tables are '
        "also in the audit folder as CSV, the figures as PNG.</footer>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)
