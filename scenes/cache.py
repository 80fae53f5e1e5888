"""Building a dataset folder in the cache exactly once, safely under concurrency, and audibly.

Parallel workers (vector-env sub-processes, sweep workers) that ask for the same battery take a
file lock beside the target: the first one builds, the others wait for it and then read its
folder, so a battery is built once rather than once per worker. A build announces itself on
stderr with its size and an estimate, reports progress with a running estimate of the time
left, and says when it is done; it never runs silently.

A build that can keep its finished items (``build_once(..., resumable=True)``, the video
battery) writes into a fixed ``.NAME.partial`` folder beside the target: when it is interrupted
(Ctrl-C, or SIGTERM, which a build turns into the same interruption) the finished items stay
there and the next build resumes from them. Any other build writes into a fresh temp folder
that is removed however it ends, SIGTERM included.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from countgym.errors import UserError

from .cache_marks import LOCK_TEXT, ensure_root, mark_build

CACHE_ENV = "COUNTGYM_CACHE"
DERIVED_CACHE_ENV = "COUNTGYM_DERIVED_CACHE"


def cache_root() -> Path:
    """Where batteries are built on demand: ``$COUNTGYM_CACHE`` or ``~/.cache/countgym``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "countgym"


def derived_cache_root() -> Path:
    """``$COUNTGYM_DERIVED_CACHE``, else ``<countgym cache>/derived``."""
    env = os.environ.get(DERIVED_CACHE_ENV)
    return Path(env).expanduser() if env else cache_root() / "derived"


class Terminated(KeyboardInterrupt):
    """SIGTERM during a build: unwinds like Ctrl-C, so the build's clean-up runs."""


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``Terminated`` in the main thread instead of ending the
    process at once (which skips every ``finally``). Elsewhere than the main thread: no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise Terminated(f"signal {signum}")

    try:
        old = signal.signal(signal.SIGTERM, _raise)
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def ensure_cache_root(final: Path) -> None:
    """Create (and mark, see ``cache_marks``) the cache root that ``final`` goes into: the
    derived cache, the battery cache, or, for a folder in neither, ``final``'s own folder."""
    derived, battery = derived_cache_root(), cache_root()
    if final.parent == derived or derived in final.parents:
        if derived.parent == battery:
            ensure_root(battery, derived=derived)
        ensure_root(derived, derived=derived)
    elif final.parent == battery or battery in final.parents:
        ensure_root(battery, derived=derived)
    else:
        ensure_root(final.parent)


def partial_folder(final: Path) -> Path:
    """Where a resumable build of ``final`` keeps its finished items until it completes."""
    return final.parent / f".{final.name}.partial"


def _ready(final: Path) -> bool:
    return (final / "manifest.jsonl").is_file()


@contextmanager
def build_lock(final: Path, *, stream: TextIO | None = None) -> Iterator[None]:
    """An exclusive ``flock`` on ``.NAME.lock`` beside ``final`` (released on exit or death).

    The lock file is removed once ``final`` is complete. That is safe because every holder
    re-checks for the manifest after acquiring: a process still waiting on the removed file,
    or one that creates a fresh lock file, finds the folder built and returns. The file holds
    ``cache_marks.LOCK_TEXT``, so that ``cache clean`` knows it for countgym's."""
    ensure_cache_root(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    path = final.parent / f".{final.name}.lock"
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"countgym: waiting for another process that is building {final.name} ...",
                file=stream or sys.stderr,
                flush=True,
            )
            fcntl.flock(fh, fcntl.LOCK_EX)
        if fh.seek(0, os.SEEK_END) == 0:
            fh.write(LOCK_TEXT)
            fh.flush()
        try:
            yield
            if _ready(final):
                path.unlink(missing_ok=True)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def format_duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``1.2 h``."""
    if seconds < 1:
        return "<1 s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def build_once(
    final: Path,
    build: Callable[[Path], Any],
    *,
    items: int | None = None,
    seconds_per_item: float | None = None,
    stream: TextIO | None = None,
    tip: str | None = None,
    resumable: bool = False,
) -> Path:
    """``final`` if it holds a manifest; else build into a temp folder beside it and rename.

    A reader sees no folder or a complete one. Under the build lock only one process builds;
    the others wait and then find the manifest. ``items`` and ``seconds_per_item`` (measured on
    a 2-core machine) make the opening line's estimate (without ``items`` neither the opening nor the closing line);
    ``stream`` defaults to stderr; ``tip`` ends the opening line (e.g. where a smaller set is).
    ``resumable``: ``build`` skips the items already finished in its folder, which is then the
    fixed :func:`partial_folder` and is kept when the build is interrupted (Ctrl-C, SIGTERM) or
    fails; otherwise the temp folder is removed however the build ends.
    """
    if _ready(final):
        return final
    out = stream or sys.stderr
    with build_lock(final, stream=out):
        if _ready(final):  # another process built it while this one waited
            return final
        size = f"{items} items" if items is not None else "a dataset"
        guess = (
            f", estimated {format_duration(items * seconds_per_item)}"
            if items is not None and seconds_per_item is not None
            else ""
        )
        if items is not None:
            # A generated set announces its size and cost; preparing a user's download (no
            # item count known) checks the release first, so a missing file stays one line.
            print(
                f"countgym: building {final.name} ({size}{guess}) into {final.parent} on first use; "
                "later runs read the cache" + (f"; {tip}" if tip else ""),
                file=out,
                flush=True,
            )
        start = time.monotonic()
        if resumable:
            tmp = partial_folder(final)
            tmp.mkdir(exist_ok=True)
        else:
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
        mark_build(tmp)  # before the first item: what ``cache clean`` may remove carries it
        done = False
        try:
            with sigterm_as_interrupt():
                build(tmp)
            try:
                tmp.rename(final)
            except OSError:
                if not _ready(final):
                    raise UserError(
                        f"cache folder {final} exists but holds no manifest.jsonl; delete it"
                    ) from None
            done = True
        finally:
            if tmp.exists() and (done or not resumable):
                shutil.rmtree(tmp, ignore_errors=True)
            elif resumable and tmp.exists():
                print(
                    f"countgym: the build of {final.name} stopped; its finished items are kept in {tmp} "
                    "and the next run resumes from them",
                    file=out,
                    flush=True,
                )
        if items is not None:
            print(
                f"countgym: built {final.name} in {format_duration(time.monotonic() - start)}",
                file=out,
                flush=True,
            )
    return final


def progress_bar(
    iterable: Any, *, total: int | None, desc: str, enabled: bool = True, every_s: float = 10.0
) -> Any:
    """Progress with elapsed time and an estimate of the time left, on stderr: a tqdm bar on a
    terminal, else one line per ``every_s`` seconds and a last line (logs stay readable)."""
    if not enabled:
        return iterable
    if sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, file=sys.stderr)
    return _progress_lines(iterable, total, desc, every_s)


def _progress_lines(iterable: Any, total: int | None, desc: str, every_s: float) -> Iterator[Any]:
    start = last = time.monotonic()
    n = 0
    for n, item in enumerate(iterable, 1):
        yield item
        now = time.monotonic()
        if now - last >= every_s or n == total:
            last = now
            elapsed = now - start
            left = (
                f", about {format_duration(elapsed / n * (total - n))} left"
                if total and n < total
                else ""
            )
            of = f"/{total}" if total else ""
            print(f"{desc}: {n}{of} done in {format_duration(elapsed)}{left}", file=sys.stderr, flush=True)
