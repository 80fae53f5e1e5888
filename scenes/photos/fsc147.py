"""FSC-147 (Ranjan et al., 2021) from the official release, as *Give the Model a Finger* uses it.

Appendix D: from the official test split, 40 images per count bin {8-15, 16-25, 26-40, 41-60,
61-80} with round-robin class balancing; the class name, lightly normalised, is the object name;
images (native height 384 px) upscaled to a height of 768 px with the dot annotations scaled.

Release layout (``root``, as distributed by the authors)::

    images_384_VarV2/<name>.jpg      the images, 384 px high
    annotation_FSC147_384.json       {"<name>.jpg": {"points": [[x, y], ...], ...}, ...}
    Train_Test_Val_FSC_147.json      {"train": [...], "val": [...], "test": [...]}
    ImageClasses_FSC147.txt          "<name>.jpg<TAB>class name" per line

Selection (deterministic, ``seed`` 0 = the documented set): the count of an image is the number of
its dots; inside a bin, classes are ordered by a SHA-256 key of (seed, bin, class) and the images
of a class by a key of (seed, file name); the bin's sequence takes one image per class in turn
(round robin) until ``per_bin`` are taken. The named subsets take prefixes of that sequence, so
they are class-balanced too: ``common`` the first 20 per bin (100), ``ablation`` the first 15 (75).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image
from tqdm import tqdm

from countgym.errors import UserError
from countgym.stimulus import Stimulus, write_manifest

from ..transforms import FSC_HEIGHT, upscale_to_height
from .common import (
    SUBSETS_KEY,
    build_once,
    derived_cache_root,
    file_digest,
    missing_files_error,
    normalise_label,
    noun_forms,
    round_robin,
    sort_key,
)

FSC147_DOCS = "https://github.com/cvlab-stonybrook/LearningToCountEverything"
ROOT_ENV = "COUNTGYM_FSC147_ROOT"
IMAGE_DIR = "images_384_VarV2"
ANNOTATION_NAMES: tuple[str, ...] = ("annotation_FSC147_384.json", "annotation_FSC147_384_V2.json")
SPLIT_FILE = "Train_Test_Val_FSC_147.json"
CLASS_FILE = "ImageClasses_FSC147.txt"
BINS: tuple[tuple[int, int], ...] = ((8, 15), (16, 25), (26, 40), (41, 60), (61, 80))
PER_BIN = 40
SUBSET_PER_BIN: dict[str, int] = {"common": 20, "ablation": 15}
"""Named subsets as prefixes of each bin's round-robin sequence: 100 and 75 images."""
FSC147_VERSION = 1
"""Bump when the prepared images or manifest fields change (renames the cached folder)."""
JPEG_QUALITY = 95


@dataclass(frozen=True)
class FSC147Files:
    """The paths of a complete FSC-147 release."""

    root: Path
    images: Path
    annotation: Path
    split: Path
    classes: Path


@dataclass(frozen=True)
class FSCImage:
    """One annotated image of the release."""

    name: str
    """File name in ``images_384_VarV2`` (``"2.jpg"``)."""
    label: str
    """Class name as written in ``ImageClasses_FSC147.txt``."""
    points: tuple[tuple[float, float], ...]
    """Dots in pixels of the 384-px-high image."""

    @property
    def n(self) -> int:
        """The count: one dot per object."""
        return len(self.points)


def check_fsc147_release(root: str | Path) -> FSC147Files:
    """The release files under ``root``; a ``UserError`` names every missing one."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise missing_files_error("FSC-147", root, ["the folder itself"], FSC147_DOCS)
    annotation = next((root / n for n in ANNOTATION_NAMES if (root / n).is_file()), None)
    missing = []
    if not (root / IMAGE_DIR).is_dir():
        missing.append(f"{IMAGE_DIR}/")
    if annotation is None:
        missing.append(ANNOTATION_NAMES[0])
    for name in (SPLIT_FILE, CLASS_FILE):
        if not (root / name).is_file():
            missing.append(name)
    if missing:
        raise missing_files_error("FSC-147", root, missing, FSC147_DOCS)
    assert annotation is not None
    return FSC147Files(root, root / IMAGE_DIR, annotation, root / SPLIT_FILE, root / CLASS_FILE)


def is_fsc147_release(path: Path) -> bool:
    """True when ``path`` looks like an FSC-147 release (split file or image folder present)."""
    return (path / SPLIT_FILE).is_file() or (path / IMAGE_DIR).is_dir()


def _load_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


def read_classes(path: Path) -> dict[str, str]:
    """``{file name: class name}`` from ``ImageClasses_FSC147.txt`` (tab, else first space)."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        name, sep, label = line.partition("\t")
        if not sep:
            name, _, label = line.partition(" ")
        out[name.strip()] = label.strip()
    return out


def read_fsc147(root: str | Path, split: str = "test") -> list[FSCImage]:
    """The annotated images of one split, in the split file's order."""
    files = check_fsc147_release(root)
    splits = _load_json(files.split)
    if not isinstance(splits, dict) or split not in splits:
        raise UserError(f"{files.split} has no {split!r} split (keys: {', '.join(map(str, splits))})"
                        if isinstance(splits, dict) else f"{files.split}: expected a JSON object")
    annotations = _load_json(files.annotation)
    if not isinstance(annotations, dict):
        raise UserError(f"{files.annotation}: expected a JSON object keyed by image name")
    classes = read_classes(files.classes)
    images: list[FSCImage] = []
    missing_ann, missing_cls = [], []
    for name in splits[split]:
        ann = annotations.get(name)
        if not isinstance(ann, dict) or not isinstance(ann.get("points"), list):
            missing_ann.append(name)
            continue
        if name not in classes:
            missing_cls.append(name)
            continue
        try:
            pts = tuple((float(p[0]), float(p[1])) for p in ann["points"])
        except (TypeError, ValueError, IndexError):
            raise UserError(f"{files.annotation}: bad points for {name}") from None
        images.append(FSCImage(name, classes[name], pts))
    if missing_ann:
        raise UserError(f"{files.annotation} lacks points for {len(missing_ann)} {split} images "
                        f"(first: {missing_ann[0]}); is it the official {ANNOTATION_NAMES[0]}?")
    if missing_cls:
        raise UserError(f"{files.classes} lacks the class of {len(missing_cls)} {split} images (first: {missing_cls[0]})")
    return images


def bin_label(n: int) -> str | None:
    """``"8-15"`` etc. for a count inside the bins, else None."""
    for lo, hi in BINS:
        if lo <= n <= hi:
            return f"{lo}-{hi}"
    return None


@dataclass(frozen=True)
class Selected:
    """One selected image: its bin and its position in the bin's round-robin sequence."""

    image: FSCImage
    bin: str
    rank: int

    def subsets(self) -> list[str]:
        """The named subsets this image belongs to."""
        return [s for s, k in SUBSET_PER_BIN.items() if self.rank < k]


def select_fsc147(images: Sequence[FSCImage], *, per_bin: int = PER_BIN, seed: int = 0) -> list[Selected]:
    """Class-balanced, deterministic selection of ``per_bin`` images per count bin (bin order).

    A bin with fewer images than ``per_bin`` gives all it has, with a warning.
    """
    if per_bin < 1:
        raise ValueError(f"per_bin must be >= 1, got {per_bin}")
    chosen: list[Selected] = []
    for lo, hi in BINS:
        label = f"{lo}-{hi}"
        groups: dict[str, list[FSCImage]] = {}
        for im in images:
            if lo <= im.n <= hi:
                groups.setdefault(normalise_label(im.label), []).append(im)
        classes = sorted(groups, key=lambda c: sort_key(seed, "class", label, c))
        ordered = [sorted(groups[c], key=lambda im: sort_key(seed, im.name)) for c in classes]
        picks = list(round_robin(ordered))[:per_bin]
        if len(picks) < per_bin:
            warnings.warn(f"FSC-147 bin {label}: {len(picks)} images available, {per_bin} wanted", stacklevel=2)
        chosen.extend(Selected(im, label, k) for k, im in enumerate(picks))
    return chosen


def stimulus_id(name: str) -> str:
    """Manifest id of a release image: ``fsc147-<file stem>``."""
    return f"fsc147-{Path(name).stem}"


def prepare_fsc147(
    root: str | Path,
    out: str | Path,
    *,
    per_bin: int = PER_BIN,
    height: int = FSC_HEIGHT,
    seed: int = 0,
    progress: bool = True,
) -> Path:
    """Write the paper's FSC-147 set (manifest + upscaled JPEGs) from the release into ``out``.

    Each stimulus: id ``fsc147-<stem>``, ``n`` = number of dots, ``obj``/``obj_sing`` from the
    class name (``noun_forms``), ``points`` scaled to the upscaled image, meta ``battery``,
    ``set``, ``class``, ``bin``, ``rank``, ``subsets``, ``source``, ``source_size``, ``scale``.
    Returns ``out``.
    """
    files = check_fsc147_release(root)
    selected = select_fsc147(read_fsc147(files.root), per_bin=per_bin, seed=seed)
    absent = [s.image.name for s in selected if not (files.images / s.image.name).is_file()]
    if absent:
        raise missing_files_error("FSC-147", files.root, [f"{IMAGE_DIR}/{absent[0]}"
                                  + (f" and {len(absent) - 1} more images" if len(absent) > 1 else "")], FSC147_DOCS)
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    stimuli: list[Stimulus] = []
    for sel in tqdm(selected, desc="scenes fsc147", unit="img", disable=None if progress else True):
        stimuli.append(_write_one(files, sel, out, height))
    write_manifest(out, stimuli)
    return out


def _write_one(files: FSC147Files, sel: Selected, out: Path, height: int) -> Stimulus:
    src = files.images / sel.image.name
    try:
        with Image.open(src) as im:
            image = im.convert("RGB")
    except (OSError, Image.DecompressionBombError) as e:
        raise UserError(f"cannot read FSC-147 image {src}: {e}") from None
    big, points = upscale_to_height(image, sel.image.points, height)
    assert points is not None
    sid = stimulus_id(sel.image.name)
    rel = f"images/{sid}.jpg"
    big.save(out / rel, format="JPEG", quality=JPEG_QUALITY, subsampling=0)
    obj, obj_sing = noun_forms(sel.image.label)
    return Stimulus(
        id=sid,
        n=sel.image.n,
        obj=obj,
        obj_sing=obj_sing,
        image=rel,
        points=[(round(x, 3), round(y, 3)) for x, y in points],
        meta={
            "battery": "fsc147",
            "set": "test",
            "class": sel.image.label,
            "bin": sel.bin,
            "rank": sel.rank,
            SUBSETS_KEY: sel.subsets(),
            "source": sel.image.name,
            "source_size": list(image.size),
            "scale": [big.size[0] / image.size[0], big.size[1] / image.size[1]],
        },
    )


def cached_fsc147(root: str | Path, *, progress: bool = False) -> Path:
    """The prepared set of a release in the derived-data cache (built once per release)."""
    files = check_fsc147_release(root)
    fp = file_digest(
        [files.annotation, files.split, files.classes],
        extra=f"{files.root.resolve()}|v{FSC147_VERSION}|{PER_BIN}|{FSC_HEIGHT}",
    )
    final = derived_cache_root() / "photos" / f"fsc147-v{FSC147_VERSION}-{fp}"
    return build_once(final, lambda tmp: prepare_fsc147(files.root, tmp, progress=progress))


__all__ = [
    "BINS",
    "FSC147_DOCS",
    "PER_BIN",
    "ROOT_ENV",
    "SUBSET_PER_BIN",
    "FSC147Files",
    "FSCImage",
    "Selected",
    "bin_label",
    "cached_fsc147",
    "check_fsc147_release",
    "is_fsc147_release",
    "prepare_fsc147",
    "read_classes",
    "read_fsc147",
    "select_fsc147",
    "stimulus_id",
]
