"""The working-image renderer (Give the Model a Finger, Appendix C).

Pure functions of the episode state: the working image is rebuilt from the original image, the
ordered tags, the erased regions and the grid flag after every action, so any view is
reproducible from the log. Layers, bottom to top: original image, erased regions, grid, tags.
Pillow's bundled scalable font is used so text renders identically on every machine.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

Point = tuple[float, float]

TAG_RED = (230, 0, 0)
WHITE = (255, 255, 255)
ERASE_RGBA = (160, 160, 160, round(0.9 * 255))
GRID_RGBA = (0, 90, 255, 110)
GRID_LABEL_RGBA = (0, 60, 220, 200)
CROP_MIN_SHORT = 768
CROP_MAX_LONG = 1024
# Candidate box offsets in the paper's order; ties keep the earlier one.
OFFSETS = ("right", "left", "above", "below")


def tag_radius(s: int) -> float:
    """Disc radius: max(3, min(6, 0.006 s)) px, s the shorter image side."""
    return max(3.0, min(6.0, 0.006 * s))


def font_size(s: int) -> float:
    """Tag-number font size: max(11, min(20, 0.024 s))."""
    return max(11.0, min(20.0, 0.024 * s))


def erase_radius(s: int) -> float:
    """Erase disc radius: 0.02 s."""
    return 0.02 * s


@lru_cache(maxsize=32)
def _font(size: float) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


@lru_cache(maxsize=32)
def _digit_metrics(size: float) -> tuple[float, float, float]:
    """(top offset, text height, padding) shared by all numbers at this size, so boxes align."""
    f = _font(size)
    left, top, right, bottom = f.getbbox("0123456789")
    return float(top), float(bottom - top), max(2.0, round(0.15 * size))


_LAST_BOXES = threading.local()
"""The last ``label_boxes`` call of this thread: (size, tags, boxes). A tag-loop episode runs on
one thread and re-renders after every action with its earlier tags first, and a tag's box
depends only on the tags before it, so only the new tags are placed."""


def label_boxes(tags: Sequence[Point], size: tuple[int, int]) -> np.ndarray:
    """Greedy box placement: for each tag in order, the offset (right, left, above, below) whose
    box overlaps the previously placed boxes least; ties broken by less area off the image,
    then by the order above. Returns an (n, 4) array of x1, y1, x2, y2."""
    w_img, h_img = size
    s = min(size)
    r, fs = tag_radius(s), font_size(s)
    f = _font(fs)
    _, th, pad = _digit_metrics(fs)
    gap = 2.0
    placed = tuple((float(x), float(y)) for x, y in tags)
    boxes = np.zeros((len(placed), 4))
    start = 0
    last = getattr(_LAST_BOXES, "value", None)
    if last is not None and last[0] == tuple(size) and len(last[1]) <= len(placed) and placed[: len(last[1])] == last[1]:
        start = len(last[1])
        boxes[:start] = last[2]
    for i in range(start, len(placed)):
        x, y = placed[i]
        tw = f.getlength(str(i + 1))
        bw, bh = tw + 2 * pad, th + 2 * pad
        cands = np.array(
            [
                [x + r + gap, y - bh / 2],
                [x - r - gap - bw, y - bh / 2],
                [x - bw / 2, y - r - gap - bh],
                [x - bw / 2, y + r + gap],
            ]
        )
        cb = np.concatenate([cands, cands + [bw, bh]], 1)
        if i:
            prev = boxes[:i]
            ix = np.clip(np.minimum(cb[:, None, 2], prev[None, :, 2]) - np.maximum(cb[:, None, 0], prev[None, :, 0]), 0, None)
            iy = np.clip(np.minimum(cb[:, None, 3], prev[None, :, 3]) - np.maximum(cb[:, None, 1], prev[None, :, 1]), 0, None)
            overlap = (ix * iy).sum(1)
        else:
            overlap = np.zeros(4)
        inside_w = np.clip(np.minimum(cb[:, 2], w_img) - np.maximum(cb[:, 0], 0), 0, None)
        inside_h = np.clip(np.minimum(cb[:, 3], h_img) - np.maximum(cb[:, 1], 0), 0, None)
        off = bw * bh - inside_w * inside_h
        best = int(np.lexsort((np.arange(4), np.round(off, 6), np.round(overlap, 6)))[0])
        boxes[i] = cb[best]
    _LAST_BOXES.value = (tuple(size), placed, boxes.copy())
    return boxes


def _draw_erased(img: Image.Image, erased: Sequence[dict]) -> Image.Image:
    s = min(img.size)
    layer = Image.new("RGBA", img.size, (0, 0, 0, 0))
    d = ImageDraw.Draw(layer)
    for region in erased:
        if region["kind"] == "box":
            d.rectangle(list(region["xyxy"]), fill=ERASE_RGBA)
        else:
            x, y = region["xy"]
            r = region.get("r", erase_radius(s))
            d.ellipse([x - r, y - r, x + r, y + r], fill=ERASE_RGBA)
    return Image.alpha_composite(img.convert("RGBA"), layer)


def _draw_grid(img: Image.Image) -> Image.Image:
    w, h = img.size
    s = min(w, h)
    layer = Image.new("RGBA", img.size, (0, 0, 0, 0))
    d = ImageDraw.Draw(layer)
    f = _font(max(10.0, min(16.0, 0.018 * s)))
    for k in range(1, 10):
        x, y = k * w / 10, k * h / 10
        d.line([(x, 0), (x, h)], fill=GRID_RGBA, width=1)
        d.line([(0, y), (w, y)], fill=GRID_RGBA, width=1)
        d.text((x + 2, 1), str(100 * k), font=f, fill=GRID_LABEL_RGBA)
        d.text((2, y + 1), str(100 * k), font=f, fill=GRID_LABEL_RGBA)
    d.text((2, 1), "0", font=f, fill=GRID_LABEL_RGBA)
    return Image.alpha_composite(img.convert("RGBA"), layer)


def _draw_tags(img: Image.Image, tags: Sequence[Point], numbered: bool) -> None:
    s = min(img.size)
    r, fs = tag_radius(s), font_size(s)
    d = ImageDraw.Draw(img)
    outline = max(1, round(0.25 * r))
    for x, y in tags:
        d.ellipse([x - r, y - r, x + r, y + r], fill=TAG_RED, outline=WHITE, width=outline)
    if not numbered or not tags:
        return
    f = _font(fs)
    top, _, pad = _digit_metrics(fs)
    for i, (x1, y1, x2, y2) in enumerate(label_boxes(tags, img.size)):
        d.rectangle([x1, y1, x2, y2], fill=WHITE, outline=TAG_RED, width=1)
        d.text((x1 + pad, y1 + pad - top), str(i + 1), font=f, fill=TAG_RED)


def render_working_image(
    original: Image.Image,
    tags: Sequence[Point] = (),
    erased: Sequence[dict] = (),
    grid: bool = False,
    *,
    numbered: bool = True,
) -> Image.Image:
    """The working image for a state: original, erased regions, grid, then tags (RGB)."""
    img = original
    if erased:
        img = _draw_erased(img, erased)
    if grid:
        img = _draw_grid(img)
    img = img.convert("RGB") if img.mode != "RGB" else img.copy()
    _draw_tags(img, tags, numbered)
    return img


def crop_size(box_w: float, box_h: float) -> tuple[int, int]:
    """Output size of a crop: shorter side >= 768 px, longer side <= 1024 px (longer wins)."""
    short, long_ = min(box_w, box_h), max(box_w, box_h)
    scale = min(max(CROP_MIN_SHORT / short, 1.0), CROP_MAX_LONG / long_)
    return max(1, round(box_w * scale)), max(1, round(box_h * scale))


def crop_view(working: Image.Image, box_px: tuple[float, float, float, float]) -> Image.Image:
    """The enlarged view of a pixel box of the working image (tags visible)."""
    x1, y1, x2, y2 = box_px
    out = crop_size(x2 - x1, y2 - y1)
    return working.resize(out, Image.Resampling.BICUBIC, box=(x1, y1, x2, y2))
