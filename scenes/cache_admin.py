"""What the dataset cache holds, and cleaning it (``countgym cache``, ``countgym cache clean``).

Entries are the builds in ``cache_root()`` and in the derived cache's folders (``transforms/``,
``photos/``, and ``fitted/`` and ``sent/`` as one entry each). Only what carries countgym's marks
(``cache_marks``) is an entry; anything else in a root is not listed and never removed. Each is:

- ``complete``: a finished build (it has ``manifest.jsonl``);
- ``building``: a build in progress (its build lock is held by a live process);
- ``partial``: an interrupted build (``.NAME.partial``, which the next build resumes, or a
  marked folder without a manifest);
- ``stale``: a temporary build folder (``.NAME.*.tmp``) or lock file left by a process that died.

Cleaning refuses a root without ``cache_marks.ROOT_MARKER`` and never touches an entry whose
build lock is held.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from countgym.errors import UserError

from .cache import cache_root, derived_cache_root
from .cache_marks import (
    BUILD_MARKER,
    DERIVED_KINDS,
    FLAT_KINDS,
    ROOT_MARKER,
    ensure_root,
    flat_entry,
    has_build_marker,
    is_lock_file,
    is_marked_root,
    target_name,
)


@dataclass(frozen=True)
class CacheEntry:
    """One build folder (or leftover lock file) of the cache."""

    path: Path
    state: str
    """``complete``, ``building``, ``partial`` or ``stale``."""
    bytes: int
    items: int | None
    """Lines of its manifest (stimuli), when complete."""
    files: tuple[Path, ...] = field(default=())
    """For a folder of plain files (``fitted/``): the files countgym wrote, which are all that
    cleaning it removes."""

    @property
    def name(self) -> str:
        return self.path.name


def _size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += (Path(root) / f).lstat().st_size
            except OSError:
                pass
    return total


def _lock_held(lock: Path) -> bool:
    """Whether a live process holds the build lock ``lock`` (False if it does not exist)."""
    if not lock.is_file():
        return False
    try:
        with open(lock, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


def _target_name(path: Path) -> str:
    return target_name(path.name)


def _items(manifest: Path) -> int | None:
    try:
        with open(manifest, "rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return None


def cache_roots() -> list[Path]:
    """The cache roots in use: the battery cache and the derived cache (once each)."""
    roots = [cache_root(), derived_cache_root()]
    return [r for i, r in enumerate(roots) if r not in roots[:i]]


def unmarked_roots() -> list[Path]:
    """The existing cache roots without countgym's marker, after adopting the old countgym caches
    among them (``cache_marks.ensure_root``): the roots ``cache clean`` refuses."""
    derived = derived_cache_root()
    out = []
    for root in cache_roots():
        if root.exists() and not ensure_root(root, derived=derived):
            out.append(root)
    return out


def _flat_entry(kind: Path) -> CacheEntry | None:
    if not has_build_marker(kind):
        return None
    files = tuple(q for q in sorted(kind.iterdir()) if flat_entry(q))
    return CacheEntry(kind, "complete", sum(q.lstat().st_size for q in files), len(files), files)


def cache_entries(roots: Iterable[Path] | None = None) -> list[CacheEntry]:
    """Every countgym build in the cache folders (default: the battery cache and the folders of
    the derived cache); folders and files without countgym's marks are not entries."""
    extra: list[CacheEntry] = []
    if roots is None:
        derived = derived_cache_root()
        # The derived cache keeps one folder per kind (transforms/, photos/): each is a root,
        # except a kind that holds plain files (fitted/: resized copies of large sources; sent/:
        # records of checked source PNGs), which is one entry.
        kinds = ([derived / k for k in DERIVED_KINDS if (derived / k).is_dir() and not (derived / k).is_symlink()]
                 if derived.is_dir() else [])
        roots = [cache_root(), *(k for k in kinds if k.name not in FLAT_KINDS)]
        skip = {derived.resolve()}
        for k in kinds:
            if k.name in FLAT_KINDS and (entry := _flat_entry(k)) is not None:
                extra.append(entry)
    else:
        skip = set()
    roots = [r for r in roots if r.is_dir()]
    skip |= {r.resolve() for r in roots}
    out: list[CacheEntry] = []
    for root in roots:
        for path in sorted(root.iterdir()):
            if path.is_symlink() or path.resolve() in skip:
                continue  # a cache folder inside another is listed as its own root
            lock = root / f".{_target_name(path)}.lock"
            held = _lock_held(lock) if is_lock_file(lock) else False
            if path.name.startswith("."):
                if path.name.endswith(".lock"):
                    if held or not is_lock_file(path):
                        continue  # listed with its build, or not countgym's
                    state = "stale"
                elif not has_build_marker(path):
                    continue
                elif path.name.endswith(".tmp"):
                    state = "building" if held else "stale"
                elif path.name.endswith(".partial"):
                    state = "building" if held else "partial"
                else:
                    continue
                out.append(CacheEntry(path, state, _size(path), None))
                continue
            if not has_build_marker(path):
                continue
            manifest = path / "manifest.jsonl"
            if manifest.is_file():
                out.append(CacheEntry(path, "complete", _size(path), _items(manifest)))
            else:
                out.append(CacheEntry(path, "building" if held else "partial", _size(path), None))
    return out + extra


def format_bytes(n: int) -> str:
    """``512 B``, ``3.4 MB``, ``1.20 GB``."""
    if n < 1000:
        return f"{n} B"
    if n < 1000**2:
        return f"{n / 1000:.0f} kB"
    if n < 1000**3:
        return f"{n / 1000**2:.1f} MB"
    return f"{n / 1000**3:.2f} GB"


def clean_cache(
    entries: list[CacheEntry], *, partial: bool = False, everything: bool = False,
    names: Iterable[str] = (), dry_run: bool = False,
) -> list[CacheEntry]:
    """Remove stale entries (and ``partial`` builds, or ``everything``, or the named entries);
    never an entry being built, never anything without countgym's marks (each is checked again
    just before it goes). Returns what was (or, with ``dry_run``, would be) removed."""
    wanted = set(names)
    gone: list[CacheEntry] = []
    for e in entries:
        if e.state == "building":
            continue
        if wanted:
            pick = e.name in wanted or _target_name(e.path) in wanted
        else:
            pick = everything or e.state == "stale" or (partial and e.state == "partial")
        if not pick or not _still_countgyms(e):
            continue
        if not dry_run:
            _remove(e)
        gone.append(e)
    return gone


def _still_countgyms(e: CacheEntry) -> bool:
    if e.files:
        return True  # only the listed files go, each one named as countgym names them
    if e.path.name.endswith(".lock") and not e.path.is_dir():
        return is_lock_file(e.path)
    return has_build_marker(e.path)


def _remove(e: CacheEntry) -> None:
    if e.files:
        for f in e.files:
            if flat_entry(f):
                f.unlink(missing_ok=True)
        return
    if e.path.is_dir() and not e.path.is_symlink():
        shutil.rmtree(e.path, ignore_errors=True)
    else:
        e.path.unlink(missing_ok=True)


def refuse_unmarked(roots: list[Path]) -> None:
    """One line (a ``UserError``) when a cache root lacks countgym's marker."""
    if not roots:
        return
    root = roots[0]
    var = "COUNTGYM_DERIVED_CACHE" if root == derived_cache_root() and root != cache_root() else "COUNTGYM_CACHE"
    raise UserError(
        f"cache clean: {root} ({var}) holds files countgym did not make and has no {ROOT_MARKER} "
        f"marker, so nothing in it is removed; point {var} at a folder of its own (or unset it "
        f"for ~/.cache/countgym) and remove old builds in {root} by hand"
    )


__all__ = ["BUILD_MARKER", "CacheEntry", "cache_entries", "cache_roots", "clean_cache", "format_bytes",
           "is_marked_root", "refuse_unmarked", "unmarked_roots"]
