"""Image interventions of CounterCount (Section 4.1.2) and the Mask-BB region (Section 2.2)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageChops, ImageDraw, ImageFilter

BLUR_RADIUS = 48.0
"""Gaussian blur radius in pixels (the paper's choice from the sweep of Appendix C.5.3)."""
FEATHER = 4.0
"""Feathering of the sharp region's edge in pixels (same sweep)."""
BLUR_SWEEP: tuple[tuple[float, float], ...] = tuple(
    (r, f) for r in (8.0, 16.0, 32.0, 48.0, 64.0) for f in (0.0, 4.0, 8.0)
)
"""A (radius, feather) grid around the paper's setting for re-running the C.5.3 sweep; the
paper's figure does not list its grid, so this one is ours."""

Box = Sequence[float]


def blur_outside(
    image: Image.Image, boxes: Sequence[Box], *, radius: float = BLUR_RADIUS, feather: float = FEATHER
) -> Image.Image:
    """Gaussian-blur everything outside ``boxes`` (pixel xyxy, x2/y2 exclusive), keeping the
    boxes exactly sharp.

    Feathering softens only the outside of each box edge (the blend weight is 1 everywhere
    inside a box), so the counted attribute keeps every original pixel while the transition to
    the blurred surround has no hard seam.
    """
    if radius < 0 or feather < 0:
        raise ValueError(f"radius and feather must be >= 0, got {radius} and {feather}")
    image = image.convert("RGB")
    keep = Image.new("L", image.size, 0)
    d = ImageDraw.Draw(keep)
    for b in boxes:
        x1, y1, x2, y2 = (round(float(v)) for v in b)
        if x2 > x1 and y2 > y1:
            d.rectangle([x1, y1, x2 - 1, y2 - 1], fill=255)
    if feather > 0:
        keep = ImageChops.lighter(keep, keep.filter(ImageFilter.GaussianBlur(feather)))
    blurred = image.filter(ImageFilter.GaussianBlur(radius)) if radius > 0 else image
    return Image.composite(image, blurred, keep)


def scale_box(box: Box, sx: float, sy: float) -> list[float]:
    """A pixel box scaled with its image (for resized observations)."""
    x1, y1, x2, y2 = (float(v) for v in box)
    return [x1 * sx, y1 * sy, x2 * sx, y2 * sy]


def box_mask(box: Box, shape: tuple[int, int]) -> np.ndarray:
    """Boolean (H, W) mask of a pixel box (x2/y2 exclusive), clipped to the image."""
    h, w = shape
    x1, y1, x2, y2 = (round(float(v)) for v in box)
    m = np.zeros((h, w), dtype=bool)
    m[max(0, y1) : max(0, min(h, y2)), max(0, x1) : max(0, min(w, x2))] = True
    return m


def mask_bb(mask: np.ndarray, box: Box) -> np.ndarray:
    """Mask-BB: the object mask intersected with the attribute box (the edited region's pixels)."""
    m = np.asarray(mask).astype(bool)
    return m & box_mask(box, m.shape)


def load_mask(path: str, size: tuple[int, int] | None = None) -> np.ndarray:
    """A mask PNG as a boolean array (non-zero = inside), resized (nearest) to ``size`` = (w, h)."""
    from countgym.stimulus import check_image_size

    with Image.open(path) as im:
        check_image_size(im, path)
        m = im.convert("L")
        if size is not None and m.size != tuple(size):
            m = m.resize((int(size[0]), int(size[1])), Image.Resampling.NEAREST)
        return np.asarray(m) > 127
