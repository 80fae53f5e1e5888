"""Executors for sweeps: the local one is ``countgym.runner``; ``run_sweep_ray`` runs on Ray.

A cell's episodes can be spread over several log files: the main log ``<out>/<cell>.jsonl``
(written by the local runner) and shard logs ``<out>/<cell>.shards/*.jsonl`` (one per Ray task).
Every file holds whole records of distinct episodes, so the audit (which reads every ``*.jsonl``
under a run folder) sees them as one run, and resume by either executor must skip an episode
found in ANY of them. The helpers here are that shared view; they import nothing heavy, so the
local runner can use them without Ray installed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from countgym.errors import is_transient_error
from countgym.logs import iter_records

if TYPE_CHECKING:
    from countgym.runner import CellSpec

SHARDS_SUFFIX = ".shards"

__all__ = [
    "SHARDS_SUFFIX",
    "cell_log_files",
    "clear_cell",
    "clear_log",
    "done_in_cell",
    "done_in_files",
    "drop_transient_errors",
    "log_files_of",
    "run_sweep_ray",
    "shard_dir",
]


def shard_dir(out: str | Path, spec: CellSpec) -> Path:
    """Folder of a cell's shard logs: ``<out>/<cell-stem>.shards``."""
    return shard_dir_of(Path(out) / spec.log_name())


def shard_dir_of(log: str | Path) -> Path:
    """Shard folder beside a cell's main log ``<out>/<cell>.jsonl``: ``<out>/<cell>.shards``."""
    log = Path(log)
    return log.parent / (log.stem + SHARDS_SUFFIX)


def log_files_of(log: str | Path) -> list[Path]:
    """Every existing log file of the cell whose main log is ``log``: the main log first, then
    its shard logs (sorted). The main log need not exist."""
    log = Path(log)
    files = [log] if log.is_file() else []
    shards = shard_dir_of(log)
    if shards.is_dir():
        files.extend(sorted(p for p in shards.glob("*.jsonl") if p.is_file()))
    return files


def cell_log_files(out: str | Path, spec: CellSpec) -> list[Path]:
    """Every existing log file of a cell: the main log first, then its shard logs (sorted)."""
    return log_files_of(Path(out) / spec.log_name())


def done_in_cell(out: str | Path, spec: CellSpec) -> tuple[set[tuple[str, int]], float]:
    """(stimulus_id, repeat) pairs logged in any of a cell's files, and the cost they recorded.

    An episode found twice (which the executors never write) is counted once, cost included.
    """
    return done_in_files(cell_log_files(out, spec))


def done_in_files(files: list[Path]) -> tuple[set[tuple[str, int]], float]:
    """(stimulus_id, repeat) pairs in the given log files and their recorded cost (each once)."""
    done: set[tuple[str, int]] = set()
    cost = 0.0
    for rec in iter_records(files):
        key = (rec.stimulus_id, rec.repeat)
        if key in done:
            continue
        done.add(key)
        cost += sum(s.cost or 0.0 for s in rec.steps)
    return done, cost


def drop_transient_errors(files: list[Path]) -> int:
    """Remove the records of episodes that ended in a transient error (429, 5xx, timeout, dropped
    connection) from log files, so that resuming runs them again instead of keeping a failure
    that says nothing about the model. Each file is rewritten atomically (temporary file, then
    rename), so a kill leaves either the old or the new file. Returns the records removed."""
    dropped = 0
    for f in files:
        keep: list[bytes] = []
        n = 0
        with f.open("rb") as fh:
            for line in fh:
                if _is_transient_line(line):
                    n += 1
                else:
                    keep.append(line)
        if not n:
            continue
        tmp = f.with_name(f".{f.name}.{os.getpid()}.retry.tmp")
        with tmp.open("wb") as out:
            out.write(b"".join(keep))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, f)
        dropped += n
    return dropped


def _is_transient_line(line: bytes) -> bool:
    if b'"end":"error"' not in line and b'"end": "error"' not in line:  # most lines are not errors
        return False
    try:
        data = json.loads(line)
    except ValueError:
        return False  # a corrupt line is the readers' to report, not ours to drop
    return isinstance(data, dict) and data.get("end") == "error" and is_transient_error(data.get("error"))


def clear_cell(out: str | Path, spec: CellSpec) -> None:
    """Delete a cell's main log and shard logs (``--force``)."""
    clear_log(Path(out) / spec.log_name())


def clear_log(log: str | Path) -> None:
    """Delete the main log ``log`` and the shard logs beside it."""
    log = Path(log)
    if log.exists():
        log.unlink()
    shards = shard_dir_of(log)
    if shards.exists():
        shutil.rmtree(shards)


def __getattr__(name: str) -> Any:
    # Lazy, so `import countgym.executors` (done by the local runner) never imports Ray code.
    if name == "run_sweep_ray":
        from countgym.executors.ray_executor import run_sweep_ray

        return run_sweep_ray
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
