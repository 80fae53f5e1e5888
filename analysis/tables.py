"""Reading episode logs into the episodes table and writing the audit's CSV tables.

This is the I/O layer over ``audit`` and ``summary``: corrupt log lines are reported by
``countgym.logs.iter_records`` (file and line) and skipped, the rest is audited.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from countgym.errors import UserError
from countgym.logs import EpisodeRecord, LogLineError, find_logs, iter_records

from .audit import TAU_SCALES, Resolver, audit_episodes
from .summary import DEFAULT_BY, summarize

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


def load_episodes(
    paths: Source | Iterable[Source],
    *,
    resolve: Resolver | None = None,
    errors: list[LogLineError] | None = None,
    tau_scales: Sequence[float] = TAU_SCALES,
) -> pd.DataFrame:
    """The audited episodes table (one row per episode) of log files or run folders."""
    return audit_episodes(
        read_episode_records(paths, errors=errors), resolve=resolve, tau_scales=tau_scales
    )


def _write_csv(df: pd.DataFrame, path: Path) -> Path:
    # Write then rename, so a reader never sees half a table.
    tmp = path.with_name(path.name + ".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)
    return path


def write_audit(
    paths_or_records: Source | Iterable[Source],
    out_dir: PathLike,
    *,
    resolve: Resolver | None = None,
    by: str | Sequence[str] = DEFAULT_BY,
    n_resamples: int = 2000,
    seed: int = 0,
    tau_scales: Sequence[float] = TAU_SCALES,
) -> dict[str, Path]:
    """Audit logs and write ``episodes.csv`` and ``summary.csv`` (plus ``log_errors.csv`` when
    some log lines were skipped); returns ``{"episodes": path, "summary": path, ...}``.
    """
    errors: list[LogLineError] = []
    records = read_episode_records(paths_or_records, errors=errors)
    if not records:
        raise UserError(
            f"no valid episode records in {paths_or_records!r}"
            + (f" ({len(errors)} invalid lines)" if errors else "")
        )
    episodes = audit_episodes(records, resolve=resolve, tau_scales=tau_scales)
    summary = summarize(episodes, by, n_resamples=n_resamples, seed=seed, tau_scales=tau_scales)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {
        "episodes": _write_csv(episodes, out / "episodes.csv"),
        "summary": _write_csv(summary, out / "summary.csv"),
    }
    if errors:
        table = pd.DataFrame([e.model_dump() for e in errors], columns=["file", "line", "error"])
        written["log_errors"] = _write_csv(table, out / "log_errors.csv")
    return written
