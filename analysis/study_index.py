"""One study, several reports: the index page of a rehearsal (or any set of audit folders) and
the links that make each report point at its siblings.

A study's reports are written one folder at a time (``runs/finger-audit``,
``runs/countercount-audit``, ``runs/countvideo-audit``), so none knows the others when it is
rendered. Once all exist, :func:`link_sibling_reports` adds to each report a line linking the
others and, in its paper map, a pointer from each paper it does not hold to the sibling report
that does (instead of "needs CounterCount runs" in the video report of a study that ran them).
:func:`write_study_index` writes ``index.html`` beside the folders: every report with its paper
and how many of that paper's tables and figures it holds, plus any preformatted text (the
rehearsal's injected-vs-recovered table).
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .paper_map import PAPERS, audit_facts, paper_map_rows

_PAPER_TITLES = dict(PAPERS)
SIBLINGS_CLASS = "cg-siblings"
"""Class of the sibling line a report carries (replaced, never duplicated, on a re-link)."""


@dataclass(frozen=True)
class StudyReport:
    """One audit folder of a study: its report and the paper it holds (None: not a paper's
    shared folder)."""

    audit_dir: Path
    paper: str | None

    @property
    def report(self) -> Path:
        return self.audit_dir / "report.html"

    @property
    def label(self) -> str:
        return _PAPER_TITLES.get(self.paper or "", self.audit_dir.name)


def _rel(target: Path, start: Path) -> str:
    """``target`` relative to the folder ``start``, as a URL path (``/`` separators)."""
    return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()


def _held(report: StudyReport) -> tuple[int, int]:
    """(items of the report's paper it holds, items of that paper) from its paper map."""
    if report.paper is None or not report.report.is_file():
        return 0, 0
    rows = [r for r in paper_map_rows(audit_facts(report.audit_dir)) if r.paper == report.paper]
    return sum(r.anchor is not None for r in rows), len(rows)


_SIBLING_LINE = re.compile(r'<p class="' + SIBLINGS_CLASS + r'">.*?</p>\n?', re.S)
_SIBLING_NOTE = re.compile(r'<p class="' + SIBLINGS_CLASS + r'-paper">.*?</p>', re.S)


def link_sibling_reports(reports: Sequence[StudyReport], index: Path | None = None) -> int:
    """Add to each report a line linking the study's other reports (and ``index``), and in its
    paper map, under each paper it holds none of, a link to the sibling report that holds it.
    Idempotent: a report linked again keeps one line. Returns the number of reports changed."""
    present = [r for r in reports if r.report.is_file()]
    changed = 0
    for me in present:
        page = me.report.read_text(encoding="utf-8")
        page = _SIBLING_NOTE.sub("", _SIBLING_LINE.sub("", page))
        others = [r for r in present if r.audit_dir != me.audit_dir]
        links = [f'<a href="{html.escape(_rel(r.report, me.audit_dir))}">{html.escape(r.label)} report</a>'
                 for r in others]  # fmt: skip
        if index is not None:
            links.insert(0, f'<a href="{html.escape(_rel(index, me.audit_dir))}">study index</a>')
        if links:
            line = f'<p class="{SIBLINGS_CLASS}">This study\'s other pages: {" · ".join(links)}</p>\n'
            page = page.replace("<main>", line + "<main>", 1)
        for key, _title in PAPERS:
            holder = next((r for r in others if r.paper == key), None)
            if holder is None or me.paper == key:
                continue
            href = html.escape(_rel(holder.report, me.audit_dir) + f"#paper-map-{key}")
            note = (f'<p class="{SIBLINGS_CLASS}-paper">This report holds no runs of this paper: the '
                    f'study\'s <a href="{href}">{html.escape(holder.label)} report</a> has them.</p>')
            head = re.search(rf'<h3 id="paper-map-{key}">.*?</h3></summary>', page, flags=re.S)
            if head is not None:
                page = page[: head.end()] + note + page[head.end() :]
        me.report.write_text(page, encoding="utf-8")
        changed += 1
    return changed


def write_study_index(
    path: Path,
    reports: Sequence[StudyReport],
    *,
    title: str,
    facts: Sequence[str] = (),
    sections: Sequence[tuple[str, str]] = (),
    simulated: bool = False,
) -> Path:
    """Write ``path`` (``index.html``): ``facts`` (one line each), a table of the reports
    (paper, folder, items of the paper held) linked relative to ``path``, then each
    ``(heading, preformatted text)`` of ``sections``. Every string is escaped."""
    where = path.parent
    rows = []
    for r in reports:
        held, total = _held(r)
        link = (f'<a href="{html.escape(_rel(r.report, where))}">{html.escape(r.label)}</a>'
                if r.report.is_file() else f"{html.escape(r.label)} (no report)")  # fmt: skip
        items = f"{held} of {total}" if total else "–"
        rows.append(f"<tr><td>{link}</td><td><code>{html.escape(_rel(r.audit_dir, where))}</code></td>"
                    f"<td>{items}</td></tr>")  # fmt: skip
    banner = ('<p class="sim">SIMULATED: every episode of this study was answered by a simulated model; '
              "the numbers test the pipeline, not a model.</p>") if simulated else ""  # fmt: skip
    body = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>", banner,
        *(f"<p>{html.escape(f)}</p>" for f in facts),
        "<h2>Reports</h2>",
        "<table><thead><tr><th>report</th><th>audit folder</th><th>tables and figures of its paper held</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>",
        *(f"<h2>{html.escape(h)}</h2><pre>{html.escape(t)}</pre>" for h, t in sections if t.strip()),
        "</body></html>",
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(b for b in body if b), encoding="utf-8")
    return path


_CSS = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px;max-width:1200px;color:#1d1d1f}"
    "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left}"
    "pre{background:#f6f6f6;border:1px solid #ddd;padding:8px;overflow:auto;font-size:12px}"
    ".sim{background:#b00020;color:#fff;padding:6px 10px;border-radius:4px}"
)
