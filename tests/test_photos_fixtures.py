"""Tiny photo releases in the official file formats, built by the tests (no download).

Builders (plain functions, used by the photo, transform and config tests):

- ``make_fsc147_release``: ``images_384_VarV2/``, ``annotation_FSC147_384.json``,
  ``Train_Test_Val_FSC_147.json``, ``ImageClasses_FSC147.txt``; 384-px-high images of dark discs
  at the annotated dots, two test images per count bin plus out-of-range and train images.
- ``make_pixmo_release``: ``test.jsonl`` (image_url, image_sha256, count, label, points) and
  ``images/<sha256(url)>.png``.
- ``make_countbench_release``: ``CountBench.json`` (image_url, text, number) and ``images/``.

This module holds no tests; pytest collects it and finds none.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from pathlib import Path

from PIL import Image, ImageDraw

FSC_TEST_COUNTS: dict[str, list[tuple[int, str]]] = {
    # bin -> (count, class) of its test images
    "8-15": [(8, "deers"), (12, "sea shells")],
    "16-25": [(16, "apples"), (25, "deers")],
    "26-40": [(30, "sea shells"), (40, "apples")],
    "41-60": [(45, "deers"), (60, "sea shells")],
    "61-80": [(61, "apples"), (80, "deers")],
}
FSC_OUTSIDE: list[tuple[int, str]] = [(5, "apples"), (120, "deers")]
"""Test images outside every bin (never selected)."""


def grid_points(n: int, size: tuple[int, int], margin: float = 20.0) -> list[tuple[float, float]]:
    """``n`` well-separated points on a near-square grid inside ``size`` (x, y floats)."""
    w, h = size
    cols = math.ceil(math.sqrt(n * w / h))
    rows = math.ceil(n / cols)
    dx = (w - 2 * margin) / max(cols, 1)
    dy = (h - 2 * margin) / max(rows, 1)
    pts = [(margin + dx * (i % cols + 0.5) + 0.25, margin + dy * (i // cols + 0.5) + 0.25) for i in range(n)]
    return pts


def disc_image(size: tuple[int, int], points: list[tuple[float, float]], radius: float = 5.0) -> Image.Image:
    """Dark discs on a light background, one per point."""
    im = Image.new("RGB", size, (235, 235, 225))
    d = ImageDraw.Draw(im)
    for x, y in points:
        d.ellipse([x - radius, y - radius, x + radius, y + radius], fill=(20, 20, 20))
    return im


def png_bytes(im: Image.Image) -> bytes:
    """PNG encoding of an image."""
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def make_fsc147_release(root: Path, *, counts: dict[str, list[tuple[int, str]]] | None = None) -> Path:
    """Write a tiny FSC-147 release; returns ``root``."""
    counts = FSC_TEST_COUNTS if counts is None else counts
    (root / "images_384_VarV2").mkdir(parents=True, exist_ok=True)
    ann: dict[str, dict] = {}
    classes: list[str] = []
    split: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    k = 100

    def add(n: int, label: str, part: str) -> None:
        nonlocal k
        k += 1
        name = f"{k}.jpg"
        w = 384 + 32 * (k % 5)  # widths vary like the release's
        pts = grid_points(n, (w, 384))
        disc_image((w, 384), pts).save(root / "images_384_VarV2" / name, format="JPEG", quality=92)
        ann[name] = {
            "H": 384, "W": w, "points": [[x, y] for x, y in pts],
            "box_examples_coordinates": [[[0, 0], [0, 10], [10, 10], [10, 0]]] * 3,
            "density_path": f"gt_density_map_adaptive_384_VarV2/{k}.npy", "img_path": f"images_384_VarV2/{name}",
            "r": [15, 15],
        }  # fmt: skip
        classes.append(f"{name}\t{label}")
        split[part].append(name)

    for items in counts.values():
        for n, label in items:
            add(n, label, "test")
    for n, label in FSC_OUTSIDE:
        add(n, label, "test")
    add(10, "apples", "train")
    add(20, "deers", "val")
    (root / "annotation_FSC147_384.json").write_text(json.dumps(ann))
    (root / "Train_Test_Val_FSC_147.json").write_text(json.dumps(split))
    (root / "ImageClasses_FSC147.txt").write_text("\n".join(classes) + "\n")
    return root


PIXMO_LABELS = ("dog", "people", "strawberries")


def pixmo_rows(per_count: int = 2, host: str = "http://pixmo.invalid") -> list[tuple[dict, bytes]]:
    """``(row, image bytes)`` pairs for counts 2-10 (``per_count`` each) plus two out-of-range."""
    out = []
    i = 0
    for n in [*range(2, 11), 1, 12]:
        for _ in range(per_count if 2 <= n <= 10 else 1):
            i += 1
            size = (320 + 16 * (i % 4), 240)
            data = png_bytes(disc_image(size, grid_points(n, size), radius=8))
            row = {
                "image_url": f"{host}/img/{i}.png", "image_sha256": hashlib.sha256(data).hexdigest(),
                "count": n, "points": None, "label": PIXMO_LABELS[i % len(PIXMO_LABELS)],
            }  # fmt: skip
            out.append((row, data))
    return out


def make_pixmo_release(root: Path, *, per_count: int = 2, with_images: bool = True, skip: int = 0) -> Path:
    """Write a tiny PixMo-Count test split as ``test.jsonl`` (+ ``images/``); ``skip`` leaves
    that many images out (dead links). Returns ``root``."""
    from countgym.scenes.photos import url_image_stem

    root.mkdir(parents=True, exist_ok=True)
    rows = pixmo_rows(per_count)
    with (root / "test.jsonl").open("w") as f:
        for row, _ in rows:
            f.write(json.dumps(row) + "\n")
    if with_images:
        (root / "images").mkdir(exist_ok=True)
        for j, (row, data) in enumerate(rows):
            if j < skip:
                continue
            (root / "images" / f"{url_image_stem(row['image_url'])}.png").write_bytes(data)
    return root


def make_countbench_release(root: Path) -> Path:
    """Write a tiny ``CountBench.json`` release with its images; returns ``root``."""
    from countgym.scenes.photos import url_image_stem

    (root / "images").mkdir(parents=True, exist_ok=True)
    captions = [
        (2, "two dogs playing in the park"),
        (3, "Three red apples on a wooden table."),
        (5, "a photo of 5 cats sitting together"),
        (7, "seven wonders of the world"),
        (12, "twelve eggs in a box"),  # outside 2-10: dropped
    ]
    items = []
    for i, (n, text) in enumerate(captions):
        url = f"http://laion.invalid/{i}.jpg"
        size = (300, 200)
        disc_image(size, grid_points(n, size), radius=7).save(
            root / "images" / f"{url_image_stem(url)}.jpg", format="JPEG", quality=90
        )
        items.append({"image_url": url, "text": text, "number": n})
    items.append({"image_url": "http://laion.invalid/dead.jpg", "text": "four birds on a wire", "number": 4})
    (root / "CountBench.json").write_text(json.dumps(items))
    return root


def ensure_photo_resolver(monkeypatch) -> bool:  # noqa: ANN001 - pytest.MonkeyPatch
    """Route ``countgym.scenes.resolve_dataset`` through the photo resolver unless the lead has
    wired it in already (then the real wiring is what the tests exercise). Returns True when
    it patched."""
    import countgym.scenes as scenes
    from countgym.errors import UserError
    from countgym.scenes.batteries import resolve_with_photos

    try:
        scenes.resolve_dataset("fsc147")
    except UserError as e:
        if "unknown dataset" not in str(e):
            return False  # wired: the photo resolver answered (e.g. "set COUNTGYM_FSC147_ROOT")
    monkeypatch.setattr(scenes, "resolve_dataset", resolve_with_photos)
    return True
