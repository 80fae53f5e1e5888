"""Dataset names for the photograph sets and the transformed copies.

``resolve_photo_dataset(text)`` understands, and returns ``None`` for anything else (so
``countgym.scenes.resolve_dataset`` can try it first and fall through):

==================================  ===========================================================
name                                dataset
==================================  ===========================================================
``fsc147``, ``fsc147:common``       FSC-147 from ``$COUNTGYM_FSC147_ROOT`` (200; subsets
``fsc147:ablation``                 common = 100, ablation = 75)
``pixmo``, ``pixmo:common``         PixMo-Count from ``$COUNTGYM_PIXMO_ROOT`` (180; common = 90)
``countbench``                      CountBench(QA) from ``$COUNTGYM_COUNTBENCH_ROOT``
``/path/to/release[:SUBSET]``       a release folder of any of the three (detected by its files)
``/path/to/prepared:SUBSET``        a prepared photo folder (manifest.jsonl) restricted to a subset
``NAME+rot180``, ``NAME+mirror``    the transformed copy of any resolvable NAME (``+resize1024``
                                    too), e.g. ``dotarrays:ablation+rot180``
==================================  ===========================================================

A named set whose root variable is unset, or whose root lacks release files, raises one
``UserError`` naming what is missing and where the official release is documented.
Prepared sets and transformed copies are built once into ``$COUNTGYM_DERIVED_CACHE`` (default
``<countgym cache>/derived``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from countgym.errors import UserError
from countgym.stimulus import MANIFEST, Dataset

from ..transforms import split_transform, transformed_dataset
from . import countbench, fsc147, pixmo
from .common import PhotoSubsetDataset, has_photo_subsets, missing_files_error
from .download import DownloadReport

Resolver = Callable[[str], Dataset]


@dataclass(frozen=True)
class PhotoSet:
    """A photograph set prepared from a user-given release."""

    name: str
    title: str
    aliases: tuple[str, ...]
    env_var: str
    docs: str
    subsets: tuple[str, ...]
    prepare: Callable[..., Path]
    """``prepare(root, out, *, progress)``: write the dataset folder."""
    cached: Callable[..., Path]
    """``cached(root)``: the prepared folder in the derived-data cache."""
    required: str
    """What the release root must hold (for error messages)."""


PHOTO_SETS: dict[str, PhotoSet] = {
    p.name: p
    for p in (
        PhotoSet("fsc147", "FSC-147", ("fsc-147", "fsc"), fsc147.ROOT_ENV, fsc147.FSC147_DOCS,
                 tuple(fsc147.SUBSET_PER_BIN), fsc147.prepare_fsc147, fsc147.cached_fsc147,
                 f"{fsc147.IMAGE_DIR}/, {fsc147.ANNOTATION_NAMES[0]}, {fsc147.SPLIT_FILE}, {fsc147.CLASS_FILE}"),
        PhotoSet("pixmo", "PixMo-Count", ("pixmo-count", "pixmocount"), pixmo.ROOT_ENV, pixmo.PIXMO_DOCS,
                 tuple(pixmo.SUBSET_PER_COUNT), pixmo.prepare_pixmo, pixmo.cached_pixmo,
                 "data/test-*.parquet (or test.jsonl) and images/"),
        PhotoSet("countbench", "CountBench", ("countbenchqa", "countbench-qa"), countbench.ROOT_ENV,
                 countbench.COUNTBENCH_DOCS, (), countbench.prepare_countbench, countbench.cached_countbench,
                 "CountBench.json and images/, or data/test-*.parquet"),
    )  # fmt: skip
}
_ALIASES: dict[str, str] = {a: p.name for p in PHOTO_SETS.values() for a in (p.name, *p.aliases)}

PAPER_SUBSETS: dict[str, tuple[str, ...]] = {
    "common": ("dotarrays:common", "fsc147:common", "pixmo:common"),
    "ablation": ("dotarrays:ablation", "fsc147:ablation"),
}
"""The paper's named subsets as dataset names: common = 50 + 100 + 90 = 240 images (cross-model
comparisons), ablation = 68 + 75 = 143 (ablations, order, perturbation, strict seriality)."""

ENV_IDS: dict[str, str] = {
    "countgym/FSC147-v0": "fsc147",
    "countgym/PixMoCount-v0": "pixmo",
    "countgym/CountBench-v0": "countbench",
}
"""Gymnasium ids of the photo sets -> the ``dataset`` kwarg of ``CountImageEnv``."""


def photo_set(name: str) -> PhotoSet:
    """The photo set called ``name`` (aliases accepted); unknown names raise ``UserError``."""
    try:
        return PHOTO_SETS[_ALIASES[name.lower()]]
    except KeyError:
        raise UserError(f"unknown photo set {name!r}; valid: {', '.join(PHOTO_SETS)}") from None


def release_root(name: str) -> Path:
    """The release root of a named set from its environment variable; unset -> ``UserError``."""
    ps = photo_set(name)
    value = os.environ.get(ps.env_var, "").strip()
    if not value:
        raise UserError(
            f"{ps.title} needs the official release ({ps.required}): set {ps.env_var}=DIR or give "
            f"the release folder as the dataset (official release: {ps.docs}; see docs/photos.md)"
        )
    return Path(value).expanduser()


def detect_release(path: Path) -> str | None:
    """Which photo release a folder holds (``fsc147``, ``pixmo``, ``countbench``), or None."""
    if fsc147.is_fsc147_release(path):
        return "fsc147"
    if countbench.is_countbench_release(path):
        return "countbench"
    tables = pixmo.is_pixmo_release(path) and pixmo.table_files(path)
    if tables:
        cols = countbench.table_columns(tables[0])
        return "countbench" if "number" in cols and "count" not in cols else "pixmo"
    if any(path.glob("*.parquet")) or any(path.glob("data/*.parquet")):
        return "countbench"
    return None


def open_photo_set(name: str, root: str | Path, subset: str = "", *, label: str | None = None) -> Dataset:
    """The prepared (cached) dataset of a release root, optionally restricted to a subset."""
    ps = photo_set(name)
    root = Path(root).expanduser()
    if not root.is_dir():
        raise missing_files_error(ps.title, root, ["the folder itself"], ps.docs)
    if subset and subset not in ps.subsets:
        raise UserError(f"unknown {ps.title} subset {subset!r}; valid: {', '.join(ps.subsets) or 'none'}")
    folder = ps.cached(root)
    label = label or (f"{ps.name}:{subset}" if subset else ps.name)
    return PhotoSubsetDataset(folder, subset, name=label) if subset else Dataset(folder, name=label)


def make_photo_set(name: str, root: str | Path, out: str | Path, *, progress: bool = True) -> Path:
    """Write a photo set from its release into ``out`` (``countgym scenes make NAME --data ROOT``)."""
    return photo_set(name).prepare(Path(root).expanduser(), out, progress=progress)


def download_photo_images(name: str, root: str | Path, **options: Any) -> DownloadReport:
    """Fetch the listed images of a URL-based release (``pixmo``, ``countbench``) into
    ``root/images`` (``countgym scenes download NAME --data ROOT``); options of ``download_images``."""
    ps = photo_set(name)
    if ps.name == "pixmo":
        return pixmo.download_pixmo_images(root, **options)
    if ps.name == "countbench":
        return countbench.download_countbench_images(root, **options)
    raise UserError(f"{ps.title} ships its images; nothing to download (official release: {ps.docs})")


def resolve_photo_dataset(name_or_path: str | Path, *, resolve_base: Resolver | None = None) -> Dataset | None:
    """A photo set, a photo subset or a transformed copy from its name; None for other names.

    ``resolve_base`` resolves the base of a transformed name that is not a photo name (without
    it such a name gives None; ``countgym.scenes.resolve_dataset`` resolves every name).
    """
    text = str(name_or_path)
    base, kind = split_transform(text)
    if kind is not None:
        base_ds = resolve_photo_dataset(base, resolve_base=resolve_base)
        if base_ds is None:
            if resolve_base is None:
                return None
            base_ds = resolve_base(base)
        return transformed_dataset(base_ds, kind, name=text)
    head, colon, subset = text.rpartition(":")
    if not colon:
        head, subset = text, ""
    if head.lower() in _ALIASES:
        return open_photo_set(head, release_root(head), subset, label=text)
    path = Path(head).expanduser() if head else None
    if path is None or not path.is_dir():
        return None
    if (path / MANIFEST).is_file():
        if not subset:
            return None
        ds = Dataset(path)
        if not has_photo_subsets(ds.stimuli):
            return None
        return PhotoSubsetDataset(path, subset, name=f"{path.name}:{subset}")
    found = detect_release(path)
    if found is None:
        return None
    return open_photo_set(found, path, subset, label=f"{found}:{subset}" if subset else found)


__all__ = [
    "ENV_IDS",
    "PAPER_SUBSETS",
    "PHOTO_SETS",
    "PhotoSet",
    "detect_release",
    "download_photo_images",
    "make_photo_set",
    "open_photo_set",
    "photo_set",
    "release_root",
    "resolve_photo_dataset",
]
