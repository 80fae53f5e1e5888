"""Writing a whole audit folder: CSV tables, figures and the self-contained HTML report.

Layout of ``OUT`` (``countgym audit RUNS --out OUT``)::

    episodes.csv, summary.csv          always
    contrasts.csv, accuracy_by_n.csv   always (possibly header-only)
    log_errors.csv                     when some log lines were skipped
    traversal.csv, order_effect.csv, transform_consistency.csv, perturbation.csv,
    tags_vs_direct.csv, departures.csv, lattice.csv      when the logs hold the needed runs
    figures/*.png                      accuracy_vs_n, arm_comparison, capacity_profile,
                                       tau_sensitivity (each when there is something to draw)
    report.html                        one file, opens offline
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from countgym.errors import UserError
from countgym.logs import EpisodeRecord, LogLineError
from countgym.secrets import scrub_text

from .audit import TAU_SCALES
from .pipeline import AuditTables, compute_tables
from .principles import PrincipleOptions
from .report import ReportFigure, render_report
from .source import RecordSource
from .stimuli import Resolver, StimulusCache
from .summary import DEFAULT_BY
from .viewer import ViewerData, ViewerOptions, build_viewer, check_viewer_options

PathLike = str | Path


@dataclass(frozen=True)
class AuditFiles:
    """Every file one audit wrote: tables (CSV) by name, figures (PNG) by name, the report."""

    tables: dict[str, Path]
    figures: dict[str, Path]
    report: Path | None
    viewer_shown: int = 0
    viewer_total: int = 0


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    """Write a table atomically (temp file, then rename), so readers never see half of it, with
    text a spreadsheet would run as a formula escaped (``countgym.analysis.csvout``)."""
    from countgym.analysis.csvout import write_csv as write

    return write(df, path)


def _write_bytes(data: bytes | str, path: Path) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(data, str):
        tmp.write_text(scrub_text(data), encoding="utf-8")  # no known secret reaches a report
    else:
        tmp.write_bytes(data)
    tmp.replace(path)
    return path


def build_figures(
    tables: AuditTables, tau_scales: Sequence[float] = TAU_SCALES
) -> dict[str, list[ReportFigure]]:
    """The report's figures per section (``range``, ``arms``, ``capacity``), as PNG bytes. A
    faceted plot with more panels than one figure holds continues in ``NAME_2``, ``NAME_3``."""
    from . import plots
    from .summary import primary_rows

    summary = primary_rows(tables.summary)
    specs = (
        ("range", "accuracy_vs_n", None, plots.accuracy_vs_n_pages(tables.accuracy_by_n, summary, tables.counting_range),
         "Exact accuracy vs n, one panel per dataset and model (at most 12 arms each): dots = "
         "observed, steps = isotonic fit, dashed = R80, bar at 80 % = its 95 % CI, triangle = "
         "right-censored."),
        ("arms", "arm_comparison", None, plots.arm_comparison_pages(summary),
         "Exact accuracy per arm (95 % CI), one panel per dataset and model."),
        ("arms", "arm_contrasts", None, plots.contrast_pages(tables.contrasts),
         "Paired EM contrasts b − a against each panel's baseline arm a (direct when it ran; every "
         "pair is in the Arm contrasts table), 95 % paired bootstrap CI, filled = CI-solid; one "
         "panel per dataset and model."),
        ("capacity", "tag_gain", "fig-tag_gain", plots.tag_gain_pages(summary, tables.contrasts),
         "Gain from tagging vs pointing error (Finger Figure 4): per dataset, one point per model: "
         "EM(tag) − EM(direct) on the same images (95 % paired CI) against the tag arm's pointing "
         "error."),
        ("capacity", "capacity_profile", None, plots.capacity_pages(summary),
         "Error mix per 100 ground-truth objects (omission, duplicate, phantom), one panel per "
         "dataset, one bar per model and tagging arm."),
        ("capacity", "tau_sensitivity", "fig-tau_sensitivity", plots.tau_sensitivity_pages(summary, tau_scales),
         "Tau sensitivity (Finger Table 6): audit rates per 100 objects with tau scaled by 0.75, 1 "
         "and 1.5; one row of panels per group of at most 12 dataset · model · arm lines."),
    )  # fmt: skip
    out: dict[str, list[ReportFigure]] = {}
    for section, name, anchor, pages, caption in specs:
        for i, page in enumerate(pages):
            stem = name if i == 0 else f"{name}_{i + 1}"
            cap = caption if len(pages) == 1 else f"{caption} (part {i + 1} of {len(pages)})"
            out.setdefault(section, []).append(
                ReportFigure(stem, cap, plots.figure_png(page.fig), tuple(page.keys), anchor if i == 0 else None)
            )
    return out


def _provenance(
    versions: set[str], tables: AuditTables, n_logs: int, n_resamples: int, seed: int
) -> dict[str, object]:
    ep = tables.episodes
    return {
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "countgym": ", ".join(sorted(versions)),
        "episodes": len(ep),
        "log files": n_logs,
        "datasets": ep["dataset"].nunique(),
        "models": ep["model"].nunique(),
        "arms": ep["arm"].nunique(),
        "bootstrap": f"{n_resamples} resamples, seed {seed}",
    }


YOUNG_THRESHOLD = 5000
"""Allocations between two young-generation collections while an audit runs (Python's
default is 700)."""


def _fewer_collections(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``fn`` with the objects alive before it (modules, classes: about a million) moved out
    of the collector's way (``gc.freeze``) and young collections every ``YOUNG_THRESHOLD``
    allocations; both undone after. The audit allocates millions of short-lived objects, and
    each older-generation collection walked every imported object again (0.45 s of CPU over
    10,000 trajectories, 0.3 s with this). What is collected is the same, only later; a caller's
    own freeze and threshold are left as they are."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not gc.isenabled():
            return fn(*args, **kwargs)
        threshold = gc.get_threshold()
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        gc.set_threshold(max(threshold[0], YOUNG_THRESHOLD), *threshold[1:])
        try:
            return fn(*args, **kwargs)
        finally:
            gc.set_threshold(*threshold)
            if freeze:
                gc.unfreeze()

    return wrapper


@_fewer_collections
def write_audit_files(
    records: Sequence[EpisodeRecord],
    out_dir: PathLike,
    *,
    errors: Iterable[LogLineError] = (),
    n_logs: int = 0,
    resolve: Resolver | None = None,
    by: str | Sequence[str] = DEFAULT_BY,
    n_resamples: int = 2000,
    seed: int = 0,
    tau_scales: Sequence[float] = TAU_SCALES,
    report: bool = True,
    viewer: ViewerOptions | None = None,
    principle_options: PrincipleOptions | None = None,
    judge: Any = None,
    parser: Any = None,
    judge_backend: Any = None,
    warn: Callable[[str], None] | None = None,
    command: Sequence[str] | None = None,
) -> AuditFiles:
    """Audit ``records`` and write every table, figure and the HTML report into ``out_dir``.

    ``records`` (a sequence, or a ``source.RecordSource`` over log files) is read once in
    full; the later stages read again only the records they show or test (see ``source``).

    ``judge`` (a ``ChatModel``, or ``"same"`` for each reply's own model) resolves ambiguous
    CounterCount replies (Appendix B.2); ``parser`` (a ``ChatModel``) resolves video replies the
    rules left without a count (CountVideoBench, Section 5.1). Both are cached under
    ``out_dir`` (``countercount/judge-cache``, ``countvideo/parser-cache``); see
    ``countgym.analysis.extraction``; ``judge_backend(model, api_base)`` builds the same-model
    judge. ``warn`` receives one line per extraction problem. ``command`` (the audit's command
    line) lets the report spell the command that judges replies left unjudged."""
    from countgym.analysis.extraction import AnswerResolver
    from countgym.analysis.task_sections import task_of_record

    vopts = viewer or ViewerOptions()
    check_viewer_options(vopts)
    source = records if isinstance(records, RecordSource) else RecordSource(records)
    # One pass over the records: each reply is resolved (parser, judge) before the audit takes
    # its row; the versions and the positions of the task sections' records are noted.
    answers = AnswerResolver(
        parser=parser, judge=judge, cache_dir=Path(out_dir), make_backend=judge_backend, warn=warn
    )
    versions: set[str] = set()
    task_positions: list[int] = []
    sim_sources: set[str] = set()

    def note(i: int, rec: EpisodeRecord) -> EpisodeRecord:
        rec = answers.step(i, rec)
        versions.add(rec.countgym_version)
        if rec.simulated is not None:
            sim_sources.add(str(rec.simulated.get("source") or "built-in"))
        if task_of_record(rec) in ("countercount", "video"):
            task_positions.append(i)
        return rec

    source.add_hook(note)
    stimuli = StimulusCache(resolve)
    tables = compute_tables(
        source,
        stimuli=stimuli,
        by=by,
        n_resamples=n_resamples,
        seed=seed,
        tau_scales=tau_scales,
        principle_options=principle_options,
    )
    resolution = answers.finish()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {name: write_csv(df, out / f"{name}.csv") for name, df in tables.as_dict().items()}
    from .finger_sections import finger_extra_tables, finger_sections

    extras = finger_extra_tables(tables, n_resamples=n_resamples, seed=seed)
    written.update({name: write_csv(df, out / f"{name}.csv") for name, df in extras.items() if len(df)})
    errs = list(errors)
    if errs:
        table = pd.DataFrame([e.model_dump() for e in errs], columns=["file", "line", "error"])
        written["log_errors"] = write_csv(table, out / "log_errors.csv")
    if not report:
        return AuditFiles(written, {}, None)

    figures = build_figures(tables, tau_scales)
    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    fig_paths = {
        f.name: _write_bytes(f.png, fig_dir / f"{f.name}.png") for fs in figures.values() for f in fs
    }
    from countgym.analysis.task_sections import write_task_sections

    task_paths, sections = write_task_sections(
        source.view(task_positions), out, seed=seed, episodes=tables.episodes,
        judge_note=resolution.judge_summary(command),
    )
    fig_paths.update({p.stem: p for p in task_paths if p.suffix == ".png"})
    # Every task's episodes: the viewer replays each one's observation (tool-loop steps,
    # CounterCount images with their interventions, video frames as a contact sheet).
    view: ViewerData = build_viewer(source, tables.episodes, stimuli, vopts)
    page = render_report(
        tables,
        figures=figures,
        viewer=view,
        provenance={**_provenance(versions, tables, n_logs, n_resamples, seed), **resolution.provenance(command)},
        extra_sections=[*finger_sections(extras), *sections],
        simulated=sorted(sim_sources) if sim_sources else None,
    )
    report_path = _write_bytes(page, out / "report.html")
    return AuditFiles(written, fig_paths, report_path, view.shown, view.total)


def default_viewer_options() -> ViewerOptions:
    """Viewer options, with ``COUNTGYM_VIEWER_EPISODES`` overriding the episode cap."""
    raw = os.environ.get("COUNTGYM_VIEWER_EPISODES")
    if raw is None:
        return ViewerOptions()
    try:
        n = int(raw)
    except ValueError:
        raise UserError(f"COUNTGYM_VIEWER_EPISODES must be an integer >= 0, got {raw!r}") from None
    if n < 0:
        raise UserError(f"COUNTGYM_VIEWER_EPISODES must be an integer >= 0, got {raw!r}")
    return ViewerOptions(max_episodes=n)
