"""What the dataset cache holds, and cleaning it (``countgym cache``, ``countgym cache clean``).

Entries are the folders of ``cache_root()`` and of its ``derived/`` folder. Each is one of:

- ``complete``: a finished build (it has ``manifest.jsonl``);
- ``building``: a build in progress (its build lock is held by a live process);
- ``partial``: an interrupted build (``.NAME.partial``, which the next build resumes, or a
  folder without a manifest);
- ``stale``: a temporary build folder (``.NAME.*.tmp``) or lock file left by a process that died.

Cleaning never touches an entry whose build lock is held.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .cache import cache_root, derived_cache_root


@dataclass(frozen=True)
class CacheEntry:
    """One folder (or leftover lock file) of the cache."""

    path: Path
    state: str
    """``complete``, ``building``, ``partial`` or ``stale``."""
    bytes: int
    items: int | None
    """Lines of its manifest (stimuli), when complete."""

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
    """The build a temp folder or lock belongs to: ``.NAME.abc123.tmp`` / ``.NAME.lock`` -> NAME."""
    name = path.name
    if name.endswith(".lock"):
        return name[1:-len(".lock")]
    if name.endswith(".tmp"):
        return name[1:-len(".tmp")].rsplit(".", 1)[0]
    if name.endswith(".partial"):
        return name[1:-len(".partial")]
    return name


def _items(manifest: Path) -> int | None:
    try:
        with open(manifest, "rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return None


def cache_entries(roots: Iterable[Path] | None = None) -> list[CacheEntry]:
    """Every entry of the cache folders (default: the battery cache and the derived cache)."""
    extra: list[CacheEntry] = []
    if roots is None:
        derived = derived_cache_root()
        # The derived cache keeps one folder per kind (transforms/, photos/): each is a root,
        # except a kind that holds plain files (fitted/: resized copies of large sources), which
        # is one entry.
        kinds = sorted(p for p in derived.iterdir() if p.is_dir()) if derived.is_dir() else []
        flat = [k for k in kinds if not any(q.is_dir() for q in k.iterdir())]
        roots = [cache_root(), *(k for k in kinds if k not in flat)]
        skip = {derived.resolve()}
        for k in flat:
            files = [q for q in k.iterdir() if q.is_file()]
            extra.append(CacheEntry(k, "complete", sum(q.stat().st_size for q in files), len(files)))
    else:
        skip = set()
    roots = [r for r in roots if r.is_dir()]
    skip |= {r.resolve() for r in roots}
    out: list[CacheEntry] = []
    for root in roots:
        for path in sorted(root.iterdir()):
            if path.resolve() in skip:
                continue  # a cache folder inside another is listed as its own root
            lock = root / f".{_target_name(path)}.lock"
            held = _lock_held(lock)
            if path.name.startswith("."):
                if path.name.endswith(".lock"):
                    if held:
                        continue  # listed with its build
                    state = "stale"
                elif path.name.endswith(".tmp"):
                    state = "building" if held else "stale"
                elif path.name.endswith(".partial"):
                    state = "building" if held else "partial"
                else:
                    continue
                out.append(CacheEntry(path, state, _size(path), None))
                continue
            if not path.is_dir():
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
    never an entry being built. Returns what was (or, with ``dry_run``, would be) removed."""
    wanted = set(names)
    gone: list[CacheEntry] = []
    for e in entries:
        if e.state == "building":
            continue
        if wanted:
            pick = e.name in wanted or _target_name(e.path) in wanted
        else:
            pick = everything or e.state == "stale" or (partial and e.state == "partial")
        if not pick:
            continue
        if not dry_run:
            if e.path.is_dir() and not e.path.is_symlink():
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                e.path.unlink(missing_ok=True)
        gone.append(e)
    return gone


__all__ = ["CacheEntry", "cache_entries", "clean_cache", "format_bytes"]
