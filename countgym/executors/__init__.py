"""Executors of a sweep's cells: the local one is ``countgym.sweep.run_sweep`` (the run loop of
``countgym.runner``); ``run_sweep_ray`` runs the same cells on Ray.

The layers go one way: cells (``countgym.cells``) -> run loop (``countgym.runner``) -> sweep
(``countgym.sweep``) -> executors. The log-file helpers re-exported here live in
``countgym.cells``; nothing in this package is imported by the layers below it.
"""

from __future__ import annotations

from typing import Any

from countgym.cells import (
    SHARDS_SUFFIX,
    cell_log_files,
    clear_cell,
    clear_log,
    done_in_cell,
    done_in_files,
    drop_transient_errors,
    log_files_of,
    shard_dir,
    shard_dir_of,
)

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
    "shard_dir_of",
]


def __getattr__(name: str) -> Any:
    # Lazy, so `import countgym.executors` never imports Ray code.
    if name == "run_sweep_ray":
        from countgym.executors.ray_executor import run_sweep_ray

        return run_sweep_ray
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
