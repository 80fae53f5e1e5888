"""DotArrays batteries: the registry, named subsets, writing dataset folders, and the cache.

Batteries (``countgym scenes make NAME --out DIR``):

========================  ======  =====================================================
name                      images  contents
========================  ======  =====================================================
``dotarrays``             272     main battery (216) + factor sets (56)
``dotarrays-main``        216     main battery only
``dotarrays-xl``          30      n in {80,100,120,150,200}, regular and random, 3 seeds
``lattice``               60      rotated square, hexagonal and holed lattices
========================  ======  =====================================================

Named subsets (``select_subset``, or ``NAME:SUBSET`` in ``resolve_dataset``) are fixed lists of
stimulus ids from the ``dotarrays`` design, so they are the same whatever seed offset built the
folder; a folder holding only part of the design yields the part of the subset it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from countgym.errors import UserError
from countgym.stimulus import Dataset, Stimulus, write_manifest

# Relative: ruff cannot tell that countgym.scenes is first-party (it lives in scenes/).
from .cache import CACHE_ENV, build_once, cache_root, progress_bar  # noqa: F401 - cache_root, CACHE_ENV re-exported
from .dotarrays import GENERATOR_VERSION, ArraySpec, factor_arrangement, generate

MAIN_LEVELS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 25, 30, 40, 50, 60)
ARRANGEMENTS = ("regular", "random", "clustered")
REPLICATES = 4
FACTOR_LEVELS: dict[str, tuple[int, ...]] = {
    "heterogeneous": (8, 15, 25, 40),
    "distractor": (6, 12, 20, 30),
    "dense": (15, 30, 50),
    "small": (20, 40, 60),
}
XL_LEVELS = (80, 100, 120, 150, 200)
XL_ARRANGEMENTS = ("regular", "random")
XL_REPLICATES = 3
LATTICE_LEVELS = (12, 20, 30, 40, 50)
LATTICE_KINDS = ("rotated", "hex", "holed")

PNG_COMPRESS_LEVEL = 6
"""Fixed so the same pixels give the same file bytes (with the same zlib)."""
_T = TypeVar("_T")
BUILD_SECONDS_PER_ITEM = 0.01
"""Measured: the 272-image ``dotarrays`` battery builds in about 2-3 s with 2 workers."""
_POOL_MIN_IMAGES = 16  # below this, starting worker processes costs more than it saves


# --------------------------------------------------------------------------- design


def main_specs() -> list[ArraySpec]:
    """The 216 main-battery cells: 18 levels x 3 arrangements x 4 seeds."""
    return [
        ArraySpec("dotarrays", "main", a, n, rep)
        for n in MAIN_LEVELS
        for a in ARRANGEMENTS
        for rep in range(REPLICATES)
    ]


def factor_specs() -> list[ArraySpec]:
    """The 56 factor-set cells (heterogeneous, distractor, dense, small; 4 seeds each)."""
    return [
        ArraySpec("dotarrays", s, factor_arrangement(s), n, rep)
        for s, levels in FACTOR_LEVELS.items()
        for n in levels
        for rep in range(REPLICATES)
    ]


def xl_specs() -> list[ArraySpec]:
    """The 30 extension cells: 5 levels x regular/random x 3 seeds."""
    return [
        ArraySpec("dotarrays-xl", "xl", a, n, rep)
        for n in XL_LEVELS
        for a in XL_ARRANGEMENTS
        for rep in range(XL_REPLICATES)
    ]


def lattice_specs() -> list[ArraySpec]:
    """The 60 lattice controls: 3 kinds x 5 levels x 4 seeds."""
    return [
        ArraySpec("lattice", "lattice", k, n, rep)
        for k in LATTICE_KINDS
        for n in LATTICE_LEVELS
        for rep in range(REPLICATES)
    ]


@dataclass(frozen=True)
class Battery:
    """A named, generated battery."""

    name: str
    description: str
    specs: Callable[[], list[ArraySpec]]


BATTERIES: dict[str, Battery] = {
    b.name: b
    for b in (
        Battery(
            "dotarrays",
            "DotArrays main battery + factor sets (272)",
            lambda: main_specs() + factor_specs(),
        ),
        Battery("dotarrays-main", "DotArrays main battery (216)", main_specs),
        Battery("dotarrays-xl", "DotArrays extension, n = 80-200 (30)", xl_specs),
        Battery("lattice", "lattice controls: rotated, hexagonal, holed (60)", lattice_specs),
    )
}


def battery_specs(name: str) -> list[ArraySpec]:
    """The design cells of a battery, in manifest order; unknown names raise ``UserError``."""
    return _battery(name).specs()


def _battery(name: str) -> Battery:
    try:
        return BATTERIES[name]
    except KeyError:
        raise UserError(
            f"unknown battery {name!r}; valid batteries: {dataset_names(subsets=False)}"
            f"{_did_you_mean(name)}"
        ) from None


# --------------------------------------------------------------------------- subsets


@dataclass(frozen=True)
class Subset:
    """A named subset: ``size`` ids stratified by count over ``candidates``."""

    name: str
    size: int
    description: str
    candidates: Callable[[], list[ArraySpec]]


SUBSETS: dict[str, Subset] = {
    s.name: s
    for s in (
        Subset("common", 50, "50 main-battery arrays stratified by count", main_specs),
        Subset(
            "ablation",
            68,
            "68 main + factor arrays with n >= 5 stratified by count",
            lambda: [s for s in main_specs() + factor_specs() if s.n >= 5],
        ),
    )
}


def stratified_sample(specs: Sequence[ArraySpec], size: int) -> list[ArraySpec]:
    """Deterministic sample of ``size`` cells spread evenly over the count levels.

    Each of the L levels gets ``size // L`` cells; the ``size % L`` extra cells go to the
    levels at evenly spaced positions ``floor((2j + 1) L / (2 extra))``. Inside level ``i`` the
    cells are grouped by (set, arrangement) in design order and taken round-robin, starting at
    group ``i mod G``; the ``j``-th group in that order yields its replicates in order starting
    at ``(i + j) mod R``, so arrangements, sets and seeds rotate across levels.
    """
    levels = sorted({s.n for s in specs})
    chosen: list[ArraySpec] = []
    for i, (n, quota) in enumerate(zip(levels, level_quotas(len(levels), size), strict=True)):
        groups: dict[tuple[str, str], list[ArraySpec]] = {}
        for s in specs:
            if s.n == n:
                groups.setdefault((s.set, s.arrangement), []).append(s)
        order = list(groups.values())
        order = _rotate(order, i)
        picks = list(_round_robin([_rotate(g, i + j) for j, g in enumerate(order)]))
        if quota > len(picks):
            raise ValueError(f"level n={n} has {len(picks)} cells, {quota} wanted")
        chosen.extend(picks[:quota])
    return chosen


def level_quotas(n_levels: int, size: int) -> list[int]:
    """How many of ``size`` items each of ``n_levels`` count levels gets: ``size // L`` each,
    and the ``size % L`` extra ones go to the levels at evenly spaced positions
    ``floor((2j + 1) L / (2 extra))`` (the named subsets' rule)."""
    base, extra = divmod(size, n_levels)
    bonus = {(2 * j + 1) * n_levels // (2 * extra) for j in range(extra)}
    return [base + (i in bonus) for i in range(n_levels)]


def _rotate(items: list[_T], k: int) -> list[_T]:
    k %= len(items)
    return items[k:] + items[:k]


def _round_robin(groups: list[list[ArraySpec]]) -> Iterator[ArraySpec]:
    for t in range(max(map(len, groups), default=0)):
        for g in groups:
            if t < len(g):
                yield g[t]


@cache
def subset_ids(name: str) -> frozenset[str]:
    """The stimulus ids of a named subset (``common`` or ``ablation``)."""
    try:
        sub = SUBSETS[name]
    except KeyError:
        raise UserError(f"unknown subset {name!r}; valid subsets: {', '.join(SUBSETS)}") from None
    return frozenset(s.stimulus_id for s in stratified_sample(sub.candidates(), sub.size))


def select_subset(stimuli: Iterable[Stimulus], name: str) -> list[Stimulus]:
    """The stimuli (in their given order) that belong to the named subset."""
    ids = subset_ids(name)
    chosen = [s for s in stimuli if s.id in ids]
    if not chosen:
        raise UserError(
            f"subset {name!r} selects nothing here: it is drawn from the 'dotarrays' battery"
        )
    return chosen


class SubsetDataset(Dataset):
    """A dataset folder restricted to one named subset of its stimuli."""

    def __init__(self, root: str | Path, subset: str, name: str | None = None) -> None:
        super().__init__(root, name or f"{Path(root).name}:{subset}")
        self.subset = subset
        self.stimuli = select_subset(self.stimuli, subset)
        self._by_id = {s.id: s for s in self.stimuli}


# --------------------------------------------------------------------------- writing


def make_battery(
    name: str,
    out: str | Path,
    *,
    seed: int = 0,
    limit: int | None = None,
    progress: bool = True,
    workers: int = 2,
) -> Path:
    """Write a battery's PNGs into ``out/images/`` and its ``out/manifest.jsonl``.

    ``seed`` offsets every image seed (0 = the paper's battery). ``limit`` keeps K images
    spread evenly over the battery's design order, so a small K still spans the counts.
    Returns ``out``.
    """
    specs = battery_specs(name)
    if limit is not None:
        if limit < 1:
            raise UserError(f"--limit must be a positive integer, got {limit}")
        specs = _spread(specs, limit)
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    tasks = [(s, seed, str(out)) for s in specs]
    bar: dict[str, Any] = {"total": len(tasks), "desc": f"scenes {name}", "enabled": progress}
    if workers <= 1 or len(tasks) < _POOL_MIN_IMAGES:
        stimuli = list(progress_bar(map(_write_one, tasks), **bar))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            stream = pool.map(_write_one, tasks, chunksize=4)
            stimuli = list(progress_bar(stream, **bar))
    write_manifest(out, stimuli)
    return out


def _write_one(task: tuple[ArraySpec, int, str]) -> Stimulus:
    spec, seed_offset, root = task
    stimulus, image = generate(spec, seed_offset=seed_offset, indexed=True)
    assert stimulus.image is not None
    image.save(
        Path(root) / stimulus.image, format="PNG", optimize=False, compress_level=PNG_COMPRESS_LEVEL
    )
    return stimulus


def _spread(specs: list[ArraySpec], k: int) -> list[ArraySpec]:
    if k >= len(specs):
        return specs
    return [specs[(2 * i + 1) * len(specs) // (2 * k)] for i in range(k)]


# --------------------------------------------------------------------------- resolving


def cached_battery(name: str, *, progress: bool = True) -> Path:
    """The folder of a battery in the cache, built once (seed offset 0)."""
    _battery(name)
    final = cache_root() / f"{name}-v{GENERATOR_VERSION}"
    return build_once(
        final,
        lambda tmp: make_battery(name, tmp, progress=progress),
        items=len(battery_specs(name)),
        seconds_per_item=BUILD_SECONDS_PER_ITEM,
    )


def _countercount() -> Dataset:
    from .counterfactual import resolve_countercount

    return resolve_countercount("countercount")


def _countvideo(per_level: int | None = None) -> Dataset:
    from .video import cached_countvideo

    name = "countvideo" if per_level is None else f"countvideo:k{per_level}"
    return Dataset(cached_countvideo(per_level=per_level), name=name)


def limit_source(name: str, limit: int) -> str:
    """The dataset a cell with ``limit`` stimuli of battery ``name`` reads: for ``countvideo``
    (2,600 videos built on first use, about 25 minutes on 2 cores) the smallest balanced subset
    ``countvideo:kK`` (K videos per cardinality) that holds ``limit``, so a short run builds
    26 K videos, not 2,600; every other name unchanged."""
    if name != "countvideo":
        return name
    from .video.specs import CARDINALITIES, CLASSES, VIDEOS_PER_CLASS

    per_level = -(-limit // len(CARDINALITIES))
    return name if per_level >= len(CLASSES) * VIDEOS_PER_CLASS else f"countvideo:k{per_level}"


# Batteries of the other studies, built into the cache on first use like the DotArrays ones.
OTHER_BATTERIES: dict[str, Callable[[], Dataset]] = {"countercount": _countercount, "countvideo": _countvideo}


def resolve_dataset(name_or_path: str | Path) -> Dataset:
    """A dataset from a folder path, a battery name (built into the cache once), or either
    followed by ``:SUBSET`` (e.g. ``dotarrays:ablation``, ``dotarrays-main:common``)."""
    text = str(name_or_path)
    # Transformed copies (+rot180, +mirror, +resize1024) of any dataset, then photo sets
    # (fsc147, pixmo, countbench, their subsets): their names would otherwise look like
    # unknown subsets.
    from .transforms import split_transform, transformed_dataset

    base, kind = split_transform(text)
    if kind is not None:
        return transformed_dataset(resolve_dataset(base), kind, name=text)
    from .photos.resolve import resolve_photo_dataset

    photo = resolve_photo_dataset(text)
    if photo is not None:
        return photo
    if text in OTHER_BATTERIES:
        return OTHER_BATTERIES[text]()
    if text.startswith("countvideo:k") and text[len("countvideo:k"):].isdigit():
        # A balanced subset: K videos per cardinality, classes balanced.
        return _countvideo(int(text[len("countvideo:k"):]))
    path = Path(text).expanduser()
    if path.is_dir():
        return Dataset(path)
    base, colon, subset = text.rpartition(":")
    if not colon:
        base, subset = text, ""
    if subset and subset not in SUBSETS:
        import difflib

        close = difflib.get_close_matches(subset, list(SUBSETS), n=1)
        hint = f" (did you mean {base}:{close[0]}?)" if close else ""
        raise UserError(f"unknown subset {subset!r} in {text!r}; valid names: {dataset_names()}{hint}")
    if base in BATTERIES:
        folder, label = cached_battery(base), base
    elif base and Path(base).expanduser().is_dir():
        folder, label = Path(base).expanduser(), Path(base).name
    else:
        raise UserError(
            f"unknown dataset {text!r}: give a folder with manifest.jsonl or one of "
            f"{dataset_names()}{_did_you_mean(base)}"
        )
    if not subset:
        return Dataset(folder, name=label)
    return SubsetDataset(folder, subset, name=f"{label}:{subset}")



def check_dataset_name(name_or_path: str | Path) -> None:
    """Refuse a dataset name that no resolver knows, with the resolver's own message and nearest
    match, without building or reading anything (a cell checks its dataset before its arm)."""
    from .photos.resolve import _ALIASES
    from .transforms import split_transform

    text = str(name_or_path)
    base, kind = split_transform(text)
    if kind is not None:
        check_dataset_name(base)
        return
    if text in OTHER_BATTERIES or Path(text).expanduser().exists():
        return
    if text.startswith("countvideo:k") and text[len("countvideo:k"):].isdigit():
        return
    head, colon, subset = text.rpartition(":")
    if not colon:
        head, subset = text, ""
    if head.lower() in _ALIASES or (head and Path(head).expanduser().is_dir()):
        return
    if head in BATTERIES:
        if subset and subset not in SUBSETS:
            import difflib

            close = difflib.get_close_matches(subset, list(SUBSETS), n=1)
            hint = f" (did you mean {head}:{close[0]}?)" if close else ""
            raise UserError(f"unknown subset {subset!r} in {text!r}; valid names: {dataset_names()}{hint}")
        return
    raise UserError(
        f"unknown dataset {text!r}: give a folder with manifest.jsonl or one of "
        f"{dataset_names()}{_did_you_mean(head)}"
    )


def dataset_names(*, subsets: bool = True) -> str:
    """Every dataset name the resolver knows, for error messages and help: the generated
    batteries of all three studies, the photo sets, and (``subsets``) their named subsets and
    the ``+transform`` copies."""
    from .photos.resolve import PHOTO_SETS
    from .transforms import TRANSFORMS

    names = [*BATTERIES, *OTHER_BATTERIES, *PHOTO_SETS]
    if not subsets:
        return ", ".join(names)
    photo = [f"{p.name}:{{{','.join(p.subsets)}}}" for p in PHOTO_SETS.values() if p.subsets]
    return (
        f"{', '.join(names)}; subsets: dotarrays[-main]:{{{','.join(SUBSETS)}}}, {', '.join(photo)}, "
        f"countvideo:kK (K videos per cardinality); any of them +{{{','.join(TRANSFORMS)}}}"
    )


def _did_you_mean(name: str) -> str:
    import difflib

    from .photos.resolve import PHOTO_SETS

    close = difflib.get_close_matches(name, [*BATTERIES, *OTHER_BATTERIES, *PHOTO_SETS], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


resolve_with_photos = resolve_dataset
"""The same resolver (it reads photo sets first); kept for callers of the earlier name."""

__all__ = [
    "ARRANGEMENTS",
    "BATTERIES",
    "FACTOR_LEVELS",
    "LATTICE_KINDS",
    "LATTICE_LEVELS",
    "MAIN_LEVELS",
    "SUBSETS",
    "XL_LEVELS",
    "Battery",
    "Subset",
    "SubsetDataset",
    "battery_specs",
    "check_dataset_name",
    "cache_root",
    "cached_battery",
    "factor_specs",
    "lattice_specs",
    "main_specs",
    "make_battery",
    "resolve_dataset",
    "select_subset",
    "stratified_sample",
    "subset_ids",
    "xl_specs",
]
