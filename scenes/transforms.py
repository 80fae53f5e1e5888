"""Stimulus transforms for the controls, with the ground truth transformed alongside the image.

*Give the Model a Finger* (Section 4, Appendices D and F) uses a 180-degree rotation control and
a horizontal-mirror consistency probe; every image is resized to at most 1024 px on the long
side before an arm sees it; FSC-147 images are upscaled to a height of 768 px with their dots.

Coordinates are continuous pixel coordinates: pixel ``(i, j)`` covers ``[i, i+1) x [j, j+1)``,
so a 180-degree rotation maps ``(x, y)`` to ``(W - x, H - y)`` and a mirror maps ``x`` to
``W - x`` (the same convention as ``scenes/dotarrays.py``). Point-like metadata moves with the
image: ``points``, meta ``cells`` (lattice cell centres), meta ``bbox`` (pixel ``xyxy``) and the
meta ``mask`` image.

``write_transformed_dataset`` writes a transformed copy of a dataset folder: ids get a suffix
(``-rot180``, ``-mirror``, ``-r1024``), meta ``transform`` names the transform and meta
``transform_of`` the original id (what ``countgym.analysis`` pairs on). ``transformed_dataset``
does the same into the derived-data cache, once; ``countgym.scenes.photos.resolve_photo_dataset``
reaches it from a dataset name such as ``dotarrays:ablation+rot180``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from PIL import Image
from tqdm import tqdm

from countgym.errors import UserError
from countgym.stimulus import Dataset, Stimulus, write_manifest

TransformName = Literal["rot180", "mirror", "resize1024"]
TRANSFORM_VERSION = 1
"""Bump when a transform's pixels or manifest fields change (renames the cached copies)."""
MAX_LONG_SIDE = 1024
"""The long-side cap every arm's image respects (Appendix D)."""
FSC_HEIGHT = 768
"""FSC-147 images (native height 384) are upscaled to this height (Appendix D)."""
PNG_COMPRESS_LEVEL = 6

Points = list[tuple[float, float]]


@dataclass(frozen=True)
class Transform:
    """A named stimulus transform: the image operation and the point map it implies."""

    name: str
    suffix: str
    """Appended to the stimulus id of the transformed copy."""
    description: str


TRANSFORMS: dict[str, Transform] = {
    t.name: t
    for t in (
        Transform("rot180", "-rot180", "180-degree rotation about the image centre"),
        Transform("mirror", "-mirror", "horizontal mirror (left-right flip)"),
        Transform("resize1024", "-r1024", "resize so the long side is at most 1024 px"),
    )
}


def _check_kind(kind: str) -> Transform:
    try:
        return TRANSFORMS[kind]
    except KeyError:
        raise UserError(f"unknown transform {kind!r}; valid transforms: {', '.join(TRANSFORMS)}") from None


# --------------------------------------------------------------------------- geometry


def transform_points(
    points: Sequence[Sequence[float]], kind: str, size: tuple[int, int], new_size: tuple[int, int] | None = None
) -> Points:
    """Map pixel points of an image of ``size`` (W, H) through a transform.

    ``new_size`` is the size after a resize (``resize1024``); rotation and mirror keep the size.
    """
    _check_kind(kind)
    w, h = size
    if kind == "rot180":
        return [(w - float(x), h - float(y)) for x, y in points]
    if kind == "mirror":
        return [(w - float(x), float(y)) for x, y in points]
    nw, nh = new_size if new_size is not None else fit_size(size, MAX_LONG_SIDE)
    return [(float(x) * nw / w, float(y) * nh / h) for x, y in points]


def transform_box(box: Sequence[float], kind: str, size: tuple[int, int], new_size: tuple[int, int] | None = None) -> list[float]:
    """Map a pixel ``xyxy`` box through a transform (corners re-sorted)."""
    (x1, y1), (x2, y2) = transform_points([(box[0], box[1]), (box[2], box[3])], kind, size, new_size)
    return [min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)]


def fit_size(size: tuple[int, int], max_side: int = MAX_LONG_SIDE) -> tuple[int, int]:
    """The size after resizing so the long side is at most ``max_side`` (the env's rounding)."""
    w, h = size
    if max(w, h) <= max_side:
        return w, h
    k = max_side / max(w, h)
    return max(1, math.floor(w * k + 0.5)), max(1, math.floor(h * k + 0.5))


def rotate180(image: Image.Image, points: Sequence[Sequence[float]] | None = None) -> tuple[Image.Image, Points | None]:
    """The image rotated by 180 degrees and its points mapped with it."""
    out = image.transpose(Image.Transpose.ROTATE_180)
    return out, None if points is None else transform_points(points, "rot180", image.size)


def mirror(image: Image.Image, points: Sequence[Sequence[float]] | None = None) -> tuple[Image.Image, Points | None]:
    """The image mirrored left-right and its points mapped with it."""
    out = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return out, None if points is None else transform_points(points, "mirror", image.size)


def fit_long_side(
    image: Image.Image, points: Sequence[Sequence[float]] | None = None, max_side: int = MAX_LONG_SIDE
) -> tuple[Image.Image, Points | None]:
    """Resize so the long side is at most ``max_side`` (aspect kept, Lanczos), points scaled."""
    new = fit_size(image.size, max_side)
    out = image if new == image.size else image.resize(new, Image.Resampling.LANCZOS)
    if points is None:
        return out, None
    return out, transform_points(points, "resize1024", image.size, new)


def upscale_to_height(
    image: Image.Image, points: Sequence[Sequence[float]] | None = None, height: int = FSC_HEIGHT
) -> tuple[Image.Image, Points | None]:
    """Resize to ``height`` px (width by the same factor, rounded; bicubic), points scaled per axis.

    The FSC-147 preparation: native 384-px-high images become 768 px high with their dots.
    """
    if height < 1:
        raise ValueError(f"height must be >= 1, got {height}")
    w, h = image.size
    new = (max(1, math.floor(w * height / h + 0.5)), height)
    out = image if new == image.size else image.resize(new, Image.Resampling.BICUBIC)
    if points is None:
        return out, None
    return out, [(float(x) * new[0] / w, float(y) * new[1] / h) for x, y in points]


def _image_op(kind: str) -> Callable[[Image.Image], Image.Image]:
    if kind == "rot180":
        return lambda im: im.transpose(Image.Transpose.ROTATE_180)
    if kind == "mirror":
        return lambda im: im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return lambda im: fit_long_side(im)[0]


# --------------------------------------------------------------------------- stimuli


def transform_stimulus(
    stimulus: Stimulus, image: Image.Image, kind: str, *, image_path: str | None = None
) -> tuple[Stimulus, Image.Image]:
    """A transformed copy of one stimulus and its image.

    The copy's id is the original id plus the transform's suffix; ``points``, meta ``cells`` and
    meta ``bbox`` are mapped; meta ``transform``/``transform_of`` are set. ``image_path`` is the
    copy's relative image path (default ``images/<new id>.png``). A meta ``mask`` keeps its path
    here; ``write_transformed_dataset`` writes the transformed mask file.
    """
    t = _check_kind(kind)
    if stimulus.frames:
        raise UserError(f"stimulus {stimulus.id!r} is a video; transforms apply to images only")
    size = image.size
    out_image = _image_op(kind)(image)
    new_size = out_image.size
    meta: dict[str, Any] = dict(stimulus.meta)
    if isinstance(meta.get("cells"), list) and meta["cells"]:
        meta["cells"] = [list(p) for p in transform_points(meta["cells"], kind, size, new_size)]
    if isinstance(meta.get("bbox"), list | tuple) and len(meta["bbox"]) == 4:
        meta["bbox"] = transform_box(meta["bbox"], kind, size, new_size)
    meta["transform"] = kind
    meta["transform_of"] = stimulus.id
    new_id = f"{stimulus.id}{t.suffix}"
    points = None if stimulus.points is None else transform_points(stimulus.points, kind, size, new_size)
    new = stimulus.model_copy(
        update={
            "id": new_id,
            "image": image_path or f"images/{_safe_name(new_id)}.png",
            "points": points,
            "meta": meta,
        }
    )
    return new, out_image


def _safe_name(stimulus_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", stimulus_id)


def write_transformed_dataset(
    source: Dataset | str | Path, out: str | Path, kind: str, *, progress: bool = True
) -> Path:
    """Write a transformed copy of a dataset (folder or ``Dataset``) into ``out``; return ``out``.

    Images are written as PNG (lossless, so the copy differs from the original only by the
    transform); stimuli keep their manifest order.
    """
    _check_kind(kind)
    ds = source if isinstance(source, Dataset) else Dataset(source)
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    stimuli: list[Stimulus] = []
    for stim in tqdm(ds.stimuli, desc=f"transform {kind}", unit="img", disable=None if progress else True):
        new, image = transform_stimulus(stim, ds.load_image(stim), kind)
        assert new.image is not None
        image.save(out / new.image, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
        mask = new.meta.get("mask")
        if isinstance(mask, str) and mask:
            new = _transform_mask(ds, stim, new, mask, kind, out)
        stimuli.append(new)
    write_manifest(out, stimuli)
    return out


def _transform_mask(ds: Dataset, stim: Stimulus, new: Stimulus, mask: str, kind: str, out: Path) -> Stimulus:
    src = (ds.root / mask).resolve()
    if ds.root.resolve() not in src.parents or not src.is_file():
        raise UserError(f"stimulus {stim.id!r}: mask {mask!r} is missing or outside the dataset folder")
    with Image.open(src) as m:
        moved = _image_op(kind)(m.copy())
    rel = f"masks/{_safe_name(new.id)}.png"
    (out / "masks").mkdir(parents=True, exist_ok=True)
    moved.save(out / rel, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return new.model_copy(update={"meta": {**new.meta, "mask": rel}})


# --------------------------------------------------------------------------- cache


def _fingerprint(ds: Dataset, kind: str) -> str:
    h = hashlib.sha256(f"v{TRANSFORM_VERSION}|{kind}|{ds.root.resolve()}".encode())
    for s in ds.stimuli:
        h.update(json.dumps(s.model_dump(mode="json"), sort_keys=True).encode())
    return h.hexdigest()[:12]


def transformed_dataset(base: Dataset, kind: str, *, name: str | None = None, progress: bool = False) -> Dataset:
    """The transformed copy of ``base`` from the derived-data cache (written once).

    The cache key covers the transform version, the base folder and every stimulus record, so
    a changed base gets a fresh copy. ``name`` defaults to ``<base name>+<kind>``.
    """
    from countgym.scenes.cache import build_once, derived_cache_root

    _check_kind(kind)
    label = name or f"{base.name}+{kind}"
    slug = re.sub(r"[^A-Za-z0-9.+-]+", "-", base.name).strip("-")[-40:] or "dataset"
    final = derived_cache_root() / "transforms" / f"{slug}-{kind}-{_fingerprint(base, kind)}"
    build_once(final, lambda tmp: write_transformed_dataset(base, tmp, kind, progress=progress))
    return Dataset(final, name=label)


def split_transform(name: str) -> tuple[str, str | None]:
    """``"dotarrays:ablation+rot180"`` -> ``("dotarrays:ablation", "rot180")``; no suffix -> None."""
    for kind in TRANSFORMS:
        tail = f"+{kind}"
        if name.endswith(tail) and len(name) > len(tail):
            return name[: -len(tail)], kind
    return name, None


__all__ = [
    "FSC_HEIGHT",
    "MAX_LONG_SIDE",
    "TRANSFORMS",
    "TRANSFORM_VERSION",
    "Transform",
    "fit_long_side",
    "fit_size",
    "mirror",
    "rotate180",
    "split_transform",
    "transform_box",
    "transform_points",
    "transform_stimulus",
    "transformed_dataset",
    "upscale_to_height",
    "write_transformed_dataset",
]
