"""Reading episode logs, and the entry points that audit them into tables and files.

This is the I/O layer over ``pipeline`` (tables) and ``bundle`` (files): corrupt log lines are
reported by ``countgym.logs.iter_records`` (file and line) and skipped, the rest is audited.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from countgym.errors import UserError
from countgym.logs import EpisodeRecord, LogLineError, find_logs, iter_records

from . import bundle
from .audit import TAU_SCALES, Resolver, audit_episodes
from .bundle import AuditFiles
from .pipeline import NoEpisodes, compute_tables
from .principles import PrincipleOptions
from .source import RecordSource
from .summary import DEFAULT_BY
from .viewer import ViewerOptions

PathLike = str | Path
Source = PathLike | EpisodeRecord


def _split_sources(sources: Source | Iterable[Source]) -> tuple[list[Path], list[EpisodeRecord]]:
    if isinstance(sources, str | Path | EpisodeRecord):
        sources = [sources]
    paths: list[Path] = []
    records: list[EpisodeRecord] = []
    for s in sources:
        if isinstance(s, EpisodeRecord):
            records.append(s)
        elif isinstance(s, str | Path):
            paths.append(Path(s))
        else:
            raise TypeError(
                f"paths_or_records items must be paths or EpisodeRecords, got {type(s).__name__}"
            )
    return paths, records


def _log_files(paths: Sequence[Path]) -> list[Path]:
    """Log files under the given paths, each once even when folders overlap."""
    seen: set[Path] = set()
    out: list[Path] = []
    for f in find_logs(paths):
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            out.append(f)
    return out


def read_episode_records(
    sources: Source | Iterable[Source], *, errors: list[LogLineError] | None = None
) -> list[EpisodeRecord]:
    """Records from log files, run folders and/or records; bad lines go to ``errors`` (and warn)."""
    paths, records = _split_sources(sources)
    if paths:
        records.extend(iter_records(_log_files(paths), errors))
    return records


def iter_episode_records(
    sources: Source | Iterable[Source], *, errors: list[LogLineError] | None = None
) -> Iterator[EpisodeRecord]:
    """``read_episode_records`` one record at a time: the given records, then each log line as
    it is read (log files are listed, and missing paths reported, before the first record)."""
    paths, records = _split_sources(sources)
    files = _log_files(paths) if paths else []
    yield from records
    if files:
        yield from iter_records(files, errors)


def load_episodes(
    paths: Source | Iterable[Source],
    *,
    resolve: Resolver | None = None,
    errors: list[LogLineError] | None = None,
    tau_scales: Sequence[float] = TAU_SCALES,
) -> pd.DataFrame:
    """The audited episodes table (one row per episode) of log files or run folders.

    The logs are streamed: each record becomes its row and is dropped, so memory holds the
    table, not the records."""
    return audit_episodes(
        iter_episode_records(paths, errors=errors), resolve=resolve, tau_scales=tau_scales
    )


def report_tables(
    paths: Source | Iterable[Source],
    *,
    resolve: Resolver | None = None,
    by: str | Sequence[str] = DEFAULT_BY,
    n_resamples: int = 2000,
    seed: int = 0,
    tau_scales: Sequence[float] = TAU_SCALES,
    principle_options: PrincipleOptions | None = None,
    errors: list[LogLineError] | None = None,
) -> dict[str, pd.DataFrame]:
    """The report's tables as DataFrames: ``episodes``, ``summary``, ``accuracy_by_n``,
    ``contrasts`` and the principle tables that apply (``traversal``, ``order_effect``,
    ``transform_consistency``, ``perturbation``, ``tags_vs_direct``, ``departures``,
    ``lattice``), the same tables ``write_audit`` writes as CSV."""
    records = read_episode_records(paths, errors=errors)
    if not records:
        raise UserError(f"no valid episode records in {paths}")
    return compute_tables(
        records,
        resolve=resolve,
        by=by,
        n_resamples=n_resamples,
        seed=seed,
        tau_scales=tau_scales,
        principle_options=principle_options,
    ).as_dict()


def write_audit(
    paths_or_records: Source | Iterable[Source],
    out_dir: PathLike,
    *,
    resolve: Resolver | None = None,
    by: str | Sequence[str] = DEFAULT_BY,
    n_resamples: int = 2000,
    seed: int = 0,
    tau_scales: Sequence[float] = TAU_SCALES,
    report: bool = True,
    viewer: ViewerOptions | None = None,
) -> dict[str, Path]:
    """Audit logs into ``out_dir``: ``episodes.csv``, ``summary.csv``, ``contrasts.csv``,
    ``accuracy_by_n.csv``, the applicable principle tables, ``figures/*.png`` and
    ``report.html`` (the last two unless ``report=False``); see ``bundle`` for the layout.

    Returns ``{"episodes": path, "summary": path}`` plus ``"log_errors"`` when some log lines
    were skipped (the paths of every file: ``write_audit_files``). ``viewer`` caps the
    trajectory viewer (default ``ViewerOptions()``, or ``COUNTGYM_VIEWER_EPISODES`` episodes).
    """
    files = write_audit_files(
        paths_or_records,
        out_dir,
        resolve=resolve,
        by=by,
        n_resamples=n_resamples,
        seed=seed,
        tau_scales=tau_scales,
        report=report,
        viewer=viewer,
    )
    return {k: files.tables[k] for k in ("episodes", "summary", "log_errors") if k in files.tables}


def write_audit_files(
    paths_or_records: Source | Iterable[Source],
    out_dir: PathLike,
    *,
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
    warn: Any = None,
    command: Sequence[str] | None = None,
) -> AuditFiles:
    """Like ``write_audit``, returning every written path (tables, figures, report).

    ``judge`` (a ``ChatModel``, or ``"same"``: each reply's own model) resolves ambiguous
    CounterCount replies (Appendix B.2); ``parser`` (a ``ChatModel``) resolves video replies
    the rules left open (CountVideoBench, Section 5.1); see ``countgym.analysis.extraction``.
    ``command``: the audit's command line, from which the report spells the command that judges
    replies left unjudged."""
    errors: list[LogLineError] = []
    paths, records = _split_sources(paths_or_records)
    files = _log_files(paths) if paths else []
    # Streamed: the records are read once, then again only those a later stage shows or tests.
    source = RecordSource(records, files, errors)
    try:
        return bundle.write_audit_files(
            source,
            out_dir,
            errors=errors,
            n_logs=len(files),
            resolve=resolve,
            by=by,
            n_resamples=n_resamples,
            seed=seed,
            tau_scales=tau_scales,
            report=report,
            viewer=viewer or bundle.default_viewer_options(),
            principle_options=principle_options,
            judge=judge,
            parser=parser,
            judge_backend=judge_backend,
            warn=warn,
            command=command,
        )
    except NoEpisodes:
        raise UserError(
            f"no valid episode records in {', '.join(str(p) for p in paths) or 'the given records'}"
            + (f" ({len(errors)} invalid lines)" if errors else "")
        ) from None
