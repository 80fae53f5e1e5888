"""One writer per cell: an advisory lock held while a process runs a cell's episodes.

Two processes running the same cell would each see the same episodes as pending and pay for
every one of them twice. The process that runs a cell (``run_cell``, or the driver of a Ray
sweep, whose shard tasks write their own files) holds an exclusive ``flock`` on
``<out>/<cell-stem>.lock`` from before it reads what is done until its last record is written.
A second process either waits for it (``wait=True``; it then resumes, skipping what the first
one logged) or stops at once with one line naming the holder.

The lock belongs to an open file, so the kernel drops it when the holder exits, even on
SIGKILL: a stale lock file never blocks a later run. The file is left in place (deleting it
would race with a process about to lock it); it only holds the last holder's pid, host and
start time, for the message. Where ``fcntl`` does not exist (Windows) no lock is taken.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from countgym.errors import UserError
from countgym.logs import utcnow

LOCK_SUFFIX = ".lock"


class CellBusyError(UserError):
    """Another process is running this cell (its lock is held)."""


def lock_path_of(log: str | Path) -> Path:
    """The lock file of the cell whose main log is ``log``: ``<out>/<cell-stem>.lock``."""
    log = Path(log)
    return log.parent / (log.stem + LOCK_SUFFIX)


@contextmanager
def cell_lock(log: str | Path, *, wait: bool = False) -> Iterator[Path]:
    """Hold the cell's lock for the ``with`` block; yields the lock file's path.

    Raises ``CellBusyError`` (a one-line user error) when another process holds it and
    ``wait`` is False; with ``wait`` blocks until the holder finishes.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks, run unguarded
        yield lock_path_of(log)
        return
    path = lock_path_of(log)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise CellBusyError(
                f"cell {Path(log).stem} is being run by another process ({_holder(path)}); "
                "wait for it to finish (or pass --wait), then run again to resume"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {utcnow()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


def _holder(path: Path) -> str:
    """Who holds the lock, as its holder wrote it (best effort)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text.splitlines()[0][:200] if text else "holder unknown"
