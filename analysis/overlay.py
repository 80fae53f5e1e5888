"""The audit overlay of the trajectory viewer, drawn with Pillow.

On the final working image: every final tag is ringed by its audit label (on-target green,
duplicate orange, phantom red) and every omitted object gets a hollow circle, so the image
shows at a glance what the audit counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw

from countgym.matching import Match, match_tags

OVERLAY_COLORS: dict[str, tuple[int, int, int]] = {
    "on_target": (0, 170, 60),
    "duplicate": (255, 140, 0),
    "phantom": (220, 0, 0),
    "omission": (0, 90, 255),
}
"""Overlay colours: on-target green, duplicate orange, phantom red, omission (hollow) blue."""


def fit_image(image: Image.Image, max_side: int) -> tuple[Image.Image, float]:
    """The image scaled down (never up) so its longer side is at most ``max_side``, and the scale."""
    if max_side < 1:
        raise ValueError(f"max_side must be positive, got {max_side!r}")
    w, h = image.size
    scale = min(1.0, max_side / max(w, h))
    if scale < 1.0:
        # Box (area-average) filtering: sharp enough for down-scaling, 3x faster than Lanczos.
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        image = image.resize(size, Image.Resampling.BOX)
    return image, scale


def draw_audit_overlay(
    image: Image.Image | np.ndarray,
    tags: Sequence[Sequence[float]] | np.ndarray,
    points: Sequence[Sequence[float]] | np.ndarray,
    *,
    tau: float | None = None,
    max_side: int = 512,
) -> tuple[Image.Image, Match]:
    """The image (scaled to ``max_side``) with the audit of ``tags`` against ``points`` drawn
    on it, and the match. Tags and points are pixels of ``image``."""
    im = Image.fromarray(image) if isinstance(image, np.ndarray) else image
    im, scale = fit_image(im.convert("RGB"), max_side)
    m = match_tags(tags, points, tau=tau)
    draw = ImageDraw.Draw(im)
    side = min(im.size)
    r = max(4.0, 0.014 * side)
    width = max(2, round(0.004 * side))
    t = np.asarray(tags, dtype=float).reshape(-1, 2) * scale
    p = np.asarray(points, dtype=float).reshape(-1, 2) * scale
    for j in m.omitted:
        x, y = p[j]
        rr = r * 1.4
        draw.ellipse([x - rr, y - rr, x + rr, y + rr], outline=OVERLAY_COLORS["omission"],
                     width=width)  # fmt: skip
    for (x, y), label in zip(t, m.tag_label, strict=True):
        draw.ellipse([x - r, y - r, x + r, y + r], outline=OVERLAY_COLORS[label], width=width + 1)
    return im, m
