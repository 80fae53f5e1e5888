"""The marks that say a folder is countgym's cache, and which of its entries countgym built.

``cache clean`` deletes folders, so it must never mistake a user's folder for a build (the cache
variables may point anywhere: a home folder, a project). Two marks decide:

- ``ROOT_MARKER`` (``.countgym-cache``), a file in a cache root (``COUNTGYM_CACHE``,
  ``COUNTGYM_DERIVED_CACHE``), written when countgym creates the root. ``cache clean`` refuses a
  root without it.
- ``BUILD_MARKER`` (``.countgym-build``), a file in every folder a build writes (the finished
  dataset, its ``.NAME.*.tmp`` or ``.NAME.partial`` folder), written before the build's first
  item; a build lock file holds ``LOCK_TEXT``. Only entries with these marks are listed and
  cleaned; anything else in a root is left alone.

A cache made before the marks existed is *adopted*: a root without ``ROOT_MARKER`` whose every
entry is recognisably a countgym build (by the names countgym gives its builds, below) gets both
marks the next time countgym builds into it or runs ``cache list``/``cache clean``. A root that
holds anything else is never marked by countgym: builds still go into it, but ``cache clean``
refuses it (a user who wants it cleaned points the variable at a dedicated folder).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT_MARKER = ".countgym-cache"
BUILD_MARKER = ".countgym-build"
LOCK_TEXT = "countgym build lock\n"
ROOT_TEXT = ("This folder is a countgym dataset cache. `countgym cache clean` removes only the builds "
             "in it that carry a .countgym-build file.\n")
BUILD_TEXT = "a countgym build (countgym cache clean may remove this folder)\n"

DERIVED_KINDS = ("transforms", "photos", "fitted", "sent")
"""The folders of the derived cache: each holds builds, except ``fitted`` and ``sent`` (plain
files: fitted copies of large sources; small files recording a source file checked before it
was first sent as stored, ``countgym.envs.originals``)."""
FLAT_KINDS = ("fitted", "sent")

_BATTERY_NAME = re.compile(
    r"(?:dotarrays(?:-main|-xl)?|lattice|countercount|countvideo)-v\d+(?:-[A-Za-z0-9x]+)*|countvideo-released-[0-9a-f]{10}"
)
"""Names countgym gives its builds in ``COUNTGYM_CACHE`` (``dotarrays-v2``,
``countvideo-v3-k1-1920x1080``, ``countvideo-released-0123456789``)."""
_DERIVED_NAME = re.compile(r"[A-Za-z0-9.+-]+-[0-9a-f]{4,64}")
"""Names of derived builds (``dotarrays-rotate180-0123456789ab``, ``fsc147-v1-0123456789ab``)."""
_FITTED_FILE = re.compile(r"[0-9a-f]{40}\.png")
_FITTED_TMP = re.compile(r"\.[0-9a-f]{40}\.png\.\d+\.\d+\.tmp")
_SENT_FILE = re.compile(r"[0-9a-f]{40}")
JPEG_VERDICT = re.compile(r"jpeg((?: [0-9]{1,15}){4,})")
"""A JPEG's recorded verdict in ``sent/`` (``countgym.envs.originals``): ``jpeg``, its width and
height, then the ends of the byte spans sent, ASCII digits one space apart. Kept as the target of
a symbolic link named like a record (``sent_link``), or as a record's content."""


def fitted_file(name: str) -> bool:
    """Whether ``name`` is a fitted copy (or its temp file) that countgym writes in ``fitted/``."""
    return bool(_FITTED_FILE.fullmatch(name) or _FITTED_TMP.fullmatch(name))


def flat_file(name: str) -> bool:
    """Whether ``name`` is a plain file countgym writes in a folder of ``FLAT_KINDS``: a fitted
    copy (or its temp file), or a record of a checked source file."""
    return fitted_file(name) or bool(_SENT_FILE.fullmatch(name))


def sent_link(path: Path) -> bool:
    """Whether ``path`` is a JPEG verdict countgym keeps as a link in ``sent/``: a symbolic link
    named like a record whose target is a verdict (``JPEG_VERDICT``), text that names no file."""
    if not _SENT_FILE.fullmatch(path.name):
        return False
    try:
        return JPEG_VERDICT.fullmatch(os.readlink(path)) is not None
    except OSError:  # not a link
        return False


def flat_entry(path: Path) -> bool:
    """Whether ``path``, in a folder of ``FLAT_KINDS``, is what countgym writes there: a plain file
    named as ``flat_file`` says, or a JPEG verdict's link (``sent_link``). No other link is."""
    if path.is_symlink():
        return sent_link(path)
    return path.is_file() and flat_file(path.name)


def target_name(name: str) -> str:
    """The build a temp folder or lock belongs to: ``.NAME.abc123.tmp`` / ``.NAME.lock`` /
    ``.NAME.partial`` -> NAME; any other name as it is."""
    if name.startswith("."):
        if name.endswith(".lock"):
            return name[1:-len(".lock")]
        if name.endswith(".tmp"):
            return name[1:-len(".tmp")].rsplit(".", 1)[0]
        if name.endswith(".partial"):
            return name[1:-len(".partial")]
    return name


def has_build_marker(path: Path) -> bool:
    """Whether ``path`` is a real folder (not a link) that carries ``BUILD_MARKER``."""
    return path.is_dir() and not path.is_symlink() and (path / BUILD_MARKER).is_file()


def is_lock_file(path: Path) -> bool:
    """Whether ``path`` is a build lock countgym wrote (a regular file holding ``LOCK_TEXT``)."""
    if path.is_symlink() or not path.is_file() or not path.name.endswith(".lock"):
        return False
    try:
        text = path.read_bytes()[:4096].decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    lines = text.splitlines(keepends=True)
    return bool(lines) and all(line == LOCK_TEXT for line in lines)


def mark_build(folder: Path) -> None:
    """Write ``BUILD_MARKER`` into ``folder`` (a build's own folder)."""
    (folder / BUILD_MARKER).write_text(BUILD_TEXT, encoding="utf-8")


def is_marked_root(root: Path) -> bool:
    """Whether ``root`` carries ``ROOT_MARKER``."""
    return (root / ROOT_MARKER).is_file() and not (root / ROOT_MARKER).is_symlink()


def _legacy(path: Path, names: re.Pattern[str]) -> bool:
    """Whether ``path`` is recognisably a build (or a build's temp folder or lock) named by
    ``names``, made by a countgym that wrote no marks."""
    if path.is_symlink():
        return False
    name = path.name
    if name == BUILD_MARKER and path.is_file():
        return True
    if name.startswith("."):
        if name.endswith(".lock"):
            return path.is_file() and names.fullmatch(target_name(name)) is not None and (
                path.stat().st_size == 0 or is_lock_file(path))
        if not (name.endswith(".tmp") or name.endswith(".partial")):
            return False
    return path.is_dir() and names.fullmatch(target_name(name)) is not None


def _adoptable_derived(root: Path) -> bool:
    for kind in root.iterdir():
        if kind.name == ROOT_MARKER and kind.is_file():
            continue
        if kind.name not in DERIVED_KINDS or kind.is_symlink() or not kind.is_dir():
            return False
        for entry in kind.iterdir():
            if kind.name in FLAT_KINDS:
                ok = flat_entry(entry) or (entry.name == BUILD_MARKER and entry.is_file() and not entry.is_symlink())
            else:
                ok = _legacy(entry, _DERIVED_NAME)
            if not ok:
                return False
    return True


def adoptable(root: Path, *, derived: Path | None = None) -> bool:
    """Whether an unmarked ``root`` holds nothing but countgym builds (``derived``: the derived
    cache's root, which may sit inside the cache root)."""
    try:
        if root == derived:
            return _adoptable_derived(root)
        for entry in root.iterdir():
            if entry.name == ROOT_MARKER and entry.is_file():
                continue
            if entry == derived and not entry.is_symlink() and entry.is_dir():
                if not (is_marked_root(entry) or _adoptable_derived(entry)):
                    return False
                continue
            if not _legacy(entry, _BATTERY_NAME):
                return False
    except OSError:
        return False
    return True


def _adopt_entries(root: Path, names: re.Pattern[str]) -> None:
    for entry in root.iterdir():
        if entry.is_symlink():
            continue
        if entry.is_dir() and names.fullmatch(target_name(entry.name)):
            if not (entry / BUILD_MARKER).exists():
                mark_build(entry)
        elif entry.is_file() and entry.name.endswith(".lock") and entry.stat().st_size == 0:
            if names.fullmatch(target_name(entry.name)):
                entry.write_text(LOCK_TEXT, encoding="utf-8")


def _adopt(root: Path, derived: Path | None) -> None:
    """Mark an adoptable root and every build in it (see ``adoptable``)."""
    if root == derived:
        for kind in root.iterdir():
            if kind.name in FLAT_KINDS:
                if not (kind / BUILD_MARKER).exists():
                    mark_build(kind)
            elif kind.name in DERIVED_KINDS:
                _adopt_entries(kind, _DERIVED_NAME)
    else:
        _adopt_entries(root, _BATTERY_NAME)
        if derived is not None and derived.parent == root and derived.is_dir() and not is_marked_root(derived):
            _adopt(derived, derived)
            (derived / ROOT_MARKER).write_text(ROOT_TEXT, encoding="utf-8")
    (root / ROOT_MARKER).write_text(ROOT_TEXT, encoding="utf-8")


def ensure_root(root: Path, *, derived: Path | None = None) -> bool:
    """Make sure ``root`` exists; mark it when countgym creates it now, or when it is an old
    countgym cache (``adoptable``). Returns whether it is marked. Never raises for a root that
    cannot be written (the caller's own write reports that)."""
    try:
        if not root.exists():
            root.mkdir(parents=True, exist_ok=True)
            (root / ROOT_MARKER).write_text(ROOT_TEXT, encoding="utf-8")
            return True
        if is_marked_root(root):
            return True
        if root.is_dir() and adoptable(root, derived=derived):
            _adopt(root, derived)
            return True
    except OSError:
        pass
    return is_marked_root(root)


__all__ = [
    "BUILD_MARKER", "DERIVED_KINDS", "FLAT_KINDS", "JPEG_VERDICT", "LOCK_TEXT", "ROOT_MARKER", "adoptable",
    "ensure_root", "fitted_file", "flat_entry", "flat_file", "has_build_marker", "is_lock_file", "is_marked_root",
    "mark_build", "sent_link", "target_name",
]
