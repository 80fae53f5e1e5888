"""The procedural CounterCount battery: factual/CF pairs of drawn subjects, written as a dataset
folder (``images/``, ``masks/``, ``manifest.jsonl``, the dataset-folder format).

Every pair is two manifest lines, ``{pair_id}-factual`` and ``{pair_id}-cf``. A subject's
factual image is drawn once and shared by all its pairs (as in the paper, where one factual image
is the base of several CF edits). ``meta.bbox`` is the same for both lines of a pair: the box
around the attribute parts visible in either image, i.e. the region of the edit, so the blur
intervention keeps the same region sharp on both and the pixels of the two images differ only
inside it. ``meta.mask`` is the object mask of that line's own image.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from shapely.ops import unary_union

from countgym.errors import UserError
from countgym.stimulus import Dataset, Stimulus, write_manifest

from ..cache import progress_bar
from .animals import ANIMALS
from .draw import SIZE, Scene, pixel_box, rasterize, render
from .objects import OBJECTS
from .spec import Subject

GENERATOR_VERSION = 1
"""Bump when any drawing changes: cached batteries are keyed by it."""
BATTERY = "countercount"
PNG_COMPRESS_LEVEL = 6
"""Fixed so the same pixels give the same file bytes (with the same zlib)."""

SUBJECTS: dict[str, Subject] = {s.key: s for s in (*ANIMALS, *OBJECTS)}
"""Every drawn subject by key."""


@dataclass(frozen=True)
class PairSpec:
    """One factual/CF pair of the design."""

    subject: Subject
    cf_count: int

    @property
    def pair_id(self) -> str:
        return f"{self.subject.key}-{self.cf_count}"

    @property
    def edit(self) -> str:
        """``removal`` or ``addition`` (of attribute parts)."""
        return "removal" if self.cf_count < self.subject.canonical else "addition"


def pair_specs() -> list[PairSpec]:
    """All pairs in design order: round-robin over subjects, so any prefix spans categories."""
    subjects = list(SUBJECTS.values())
    depth = max(len(s.cf_counts) for s in subjects)
    return [PairSpec(s, s.cf_counts[k]) for k in range(depth) for s in subjects if k < len(s.cf_counts)]


def palette_index(subject: Subject, seed: int) -> int:
    """Which colour variant ``seed`` gives ``subject`` (stable across machines and runs)."""
    h = hashlib.sha256(f"countercount|{seed}|{subject.key}".encode()).digest()
    return int.from_bytes(h[:4], "little") % len(subject.palettes)


def draw(subject: Subject, count: int, seed: int = 0) -> Scene:
    """The scene of ``subject`` with ``count`` attribute parts, in the colours ``seed`` picks."""
    scene = subject.build(count, subject.palettes[palette_index(subject, seed)])
    shown = scene.n_parts()
    if shown != count:  # a drawing bug, never a user mistake
        raise AssertionError(f"{subject.key}: asked for {count} parts, {shown} visible")
    return scene

BUILD_SECONDS_PER_IMAGE = 0.04
"""Measured: the 214 images (factual and CF) build in about 8 s on one core."""


def make_countercount(
    out: str | Path, *, seed: int = 0, limit: int | None = None, progress: bool = True
) -> Path:
    """Write the procedural CounterCount battery into ``out`` and return ``out``.

    ``seed`` picks the colour variant of every subject (0 = the default battery); ``limit``
    keeps the first K pairs of the round-robin design order (2K manifest lines).
    """
    specs = pair_specs()
    if limit is not None:
        if limit < 1:
            raise UserError(f"--limit must be a positive integer, got {limit}")
        specs = specs[:limit]
    out = Path(out)
    for sub in ("images", "masks"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    writer = _ImageWriter(out, seed)
    bar = progress_bar(specs, total=len(specs), desc=f"scenes {BATTERY}", enabled=progress)
    stimuli = [st for spec in bar for st in writer.pair(spec)]
    write_manifest(out, stimuli)
    return out


class _ImageWriter:
    """Draws and writes each (subject, count) image once; builds the manifest lines of a pair."""

    def __init__(self, out: Path, seed: int) -> None:
        self.out, self.seed = out, seed
        self._done: dict[tuple[str, int], tuple[Scene, dict[str, Any]]] = {}

    def image(self, subject: Subject, count: int) -> tuple[Scene, dict[str, Any]]:
        key = (subject.key, count)
        if key not in self._done:
            scene = draw(subject, count, self.seed)
            stem = f"{subject.key}-n{count}"
            image_rel, mask_rel = f"images/{stem}.png", f"masks/{stem}.png"
            _save_png(render(scene), self.out / image_rel)
            mask = rasterize(scene.object_geometry())
            _save_png(Image.fromarray((mask * 255).astype(np.uint8), "L"), self.out / mask_rel)
            parts = scene.visible_parts()
            info = {
                "image": image_rel,
                "mask": mask_rel,
                "points": [_point(g) for g in parts.values()],
                "object_bbox": pixel_box(scene.object_geometry()),
            }
            self._done[key] = (scene, info)
        return self._done[key]

    def pair(self, spec: PairSpec) -> Iterator[Stimulus]:
        s = spec.subject
        f_scene, f_info = self.image(s, s.canonical)
        c_scene, c_info = self.image(s, spec.cf_count)
        region = unary_union([*f_scene.visible_parts().values(), *c_scene.visible_parts().values()])
        bbox = pixel_box(region)
        for kind, count, info in (("factual", s.canonical, f_info), ("cf", spec.cf_count, c_info)):
            meta = {
                "battery": BATTERY,
                "generator_version": GENERATOR_VERSION,
                "seed": self.seed,
                "subject": s.name,
                "subject_key": s.key,
                "attribute": s.attribute,
                "category": s.category,
                "canonical_count": s.canonical,
                "cf_count": spec.cf_count,
                "kind": kind,
                "pair_id": spec.pair_id,
                "edit": spec.edit,
                "bbox": bbox,
                "mask": info["mask"],
                "object_bbox": info["object_bbox"],
                "image_size": [SIZE, SIZE],
            }
            yield Stimulus(
                id=f"{spec.pair_id}-{kind}",
                n=count,
                obj=s.attribute_plural,
                obj_sing=s.attribute,
                image=info["image"],
                points=info["points"],
                meta=meta,
            )


def _point(geom: Any) -> tuple[float, float]:
    """A point inside the part's visible region (not the centroid: parts can be concave)."""
    p = geom.representative_point()
    return (round(float(p.x), 2), round(float(p.y), 2))


def _save_png(img: Image.Image, path: Path) -> None:
    img.save(path, format="PNG", optimize=False, compress_level=PNG_COMPRESS_LEVEL)


def cached_countercount(*, progress: bool = True) -> Path:
    """The default battery (seed 0) in the countgym cache, built once."""
    from countgym.scenes.cache import build_once, cache_root

    final = cache_root() / f"{BATTERY}-v{GENERATOR_VERSION}"
    return build_once(
        final,
        lambda tmp: make_countercount(tmp, progress=progress),
        items=2 * len(pair_specs()),
        seconds_per_item=BUILD_SECONDS_PER_IMAGE,
    )


def resolve_countercount(dataset: str | Path | Dataset) -> Dataset:
    """A CounterCount dataset from a ``Dataset``, the battery name ``countercount`` (built into
    the cache once), a dataset folder with ``manifest.jsonl``, or a released-data root."""
    if isinstance(dataset, Dataset):
        return dataset
    text = str(dataset)
    if text == BATTERY:
        return Dataset(cached_countercount(), name=BATTERY)
    path = Path(text).expanduser()
    if (path / "manifest.jsonl").is_file():
        return Dataset(path)
    if path.is_dir():
        from .loader import load_countercount

        return load_countercount(path)
    raise UserError(
        f"unknown CounterCount dataset {text!r}: use 'countercount' (the drawn battery), a dataset "
        "folder with manifest.jsonl, or the root of the released CounterCount data"
    )
