"""Classical blob detection on the pixels a policy is shown (no model, no ground truth).

Used by the ``blob-counter`` policy and by the local test server, which answers like a model by
looking at the image it is sent.
"""

from __future__ import annotations

import numpy as np


def foreground_mask(image: np.ndarray, *, target: str = "dark") -> np.ndarray:
    """Pixels that belong to objects: dark (``"dark"``), red (``"red"``) or any saturated/dark
    non-background colour (``"any"``). The annotation colours of tags (pure red discs with white
    boxes) are not excluded here; policies look before they tag."""
    img = np.asarray(image)
    if img.ndim == 2:
        img = np.stack([img] * 3, -1)
    # Compared in the image's own dtype (no widened copy of every pixel: this runs on every
    # request of the test server); the spread is max - min, which cannot wrap.
    rgb = img[..., :3]
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    if target == "dark":
        return (r < 96) & (g < 96) & (b < 96)
    if target == "red":
        return (r > 150) & (g < 90) & (b < 90)
    # "any": far from the white/grey background.
    top = rgb.max(-1)
    return (top < 110) | (top - rgb.min(-1) > 80)


def detect_blobs(
    image: np.ndarray, *, target: str = "dark", min_area: int = 12, split_touching: bool = True
) -> list[tuple[float, float]]:
    """Centres (x, y) in pixels of the connected object blobs, in reading order.

    Touching discs form one component; with ``split_touching`` a component whose area is close to
    k times the median single-blob area is counted as k blobs, with centres spread along its
    principal axis (a crude but pixel-honest splitter).
    """
    from scipy import ndimage  # here, not at import: the audit imports the agents but never detects

    mask = foreground_mask(image, target=target)
    labels, n = ndimage.label(mask)
    if n == 0:
        return []
    # Per-blob statistics inside each blob's bounding box: whole-image reductions per label
    # (sum_labels, center_of_mass) cost ~10x more on large, sparse images.
    blobs: list[tuple[float, float, int, np.ndarray, np.ndarray]] = []
    for lab, sl in enumerate(ndimage.find_objects(labels), 1):
        if sl is None:
            continue
        ys, xs = np.nonzero(labels[sl] == lab)
        if len(xs) < min_area:
            continue
        xs = xs + sl[1].start
        ys = ys + sl[0].start
        blobs.append((float(xs.mean()), float(ys.mean()), len(xs), xs, ys))
    if not blobs:
        return []
    unit = float(np.median([b[2] for b in blobs]))
    out: list[tuple[float, float]] = []
    for cx, cy, area, xs, ys in blobs:
        k = int(round(area / unit)) if split_touching and unit > 0 else 1
        if k <= 1:
            out.append((cx, cy))
            continue
        pts = np.stack([xs, ys], 1).astype(float)
        mean = pts.mean(0)
        _, _, vt = np.linalg.svd(pts - mean, full_matrices=False)
        proj = (pts - mean) @ vt[0]
        qs = np.quantile(proj, (np.arange(k) + 0.5) / k)
        for q in qs:
            x, y = mean + q * vt[0]
            out.append((float(x), float(y)))
    out.sort(key=lambda p: (round(p[1] / 20), p[0]))
    return out
